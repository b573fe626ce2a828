"""``textgym collect``: SFT records, the filter language and GRPO groups from the CLI."""

import json
import re
import time

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.cli import main
from textgym.collect import covering_records, parse_filter, sft_record
from textgym.policies import RandomPolicy
from textgym.rollout import rollout


def games(n=40):
    return rollout(
        lambda: gym.make("textgym/TicTacToe-v0", opponent="random"),
        RandomPolicy(seed=0),
        list(range(n)),
        batch_size=8,
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("outcome in win,draw", lambda t: t.outcome in ("win", "draw")),
        ("return >= 0.5", lambda t: t.episode_return >= 0.5),
        ("outcome == loss and num_steps > 3", lambda t: t.outcome == "loss" and t.num_steps > 3),
        ("component.outcome < 1", lambda t: t.component_totals()["outcome"] < 1),
        ("invalid_actions == 0", lambda t: not any(t.invalid_actions)),
    ],
)
def test_filter_matches_an_independent_predicate(expression, expected):
    trajectories = games()
    trajectories[0].invalid_actions[0] = True  # one episode for the invalid_actions clause to drop
    keep = parse_filter(expression)
    assert [keep(t) for t in trajectories] == [expected(t) for t in trajectories]
    assert 0 < sum(keep(t) for t in trajectories) < len(trajectories)  # the filter discriminates


@pytest.mark.parametrize("expression", ["outcome", "colour == red", "return >= high", "import os"])
def test_bad_filters_are_rejected(expression):
    with pytest.raises(ValueError):
        parse_filter(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # Each of these used to be read as a string literal ("win or outcome == draw", "win and",
        # "5 5", ...) that no episode matches: 0 episodes kept, no error.
        (
            "outcome == win or outcome == draw",
            "expected 'and' or the end of the filter at char 15, got 'or'",
        ),
        ("outcome == win and", "expected a field name at char 18, got the end"),
        ("num_steps == 5 5", "expected 'and' or the end of the filter at char 15, got '5'"),
        ("outcome == == win", "expected a value at char 11, got '=='"),
        ("outcome in win,", "expected a value at char 15, got the end"),
        ("outcome in win,,draw", "expected a value at char 15, got ','"),
        ("outcome == 'win", "expected a closing quote at char 11"),
        ("outcome = win", "expected a field, operator or value at char 8, got '= win'"),
        ("outcome < 1", "expected ==, != or in after the text field outcome at char 8, got '<'"),
        ("and == 1", "expected a field name at char 0, got 'and'"),
    ],
)
def test_malformed_filters_name_the_position_of_the_error(expression, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_filter(expression)


def test_quoted_values_and_spacing():
    trajectories = games()
    keep = parse_filter("outcome in 'win', \"draw\" and return>=0.5")
    assert [keep(t) for t in trajectories] == [t.outcome in ("win", "draw") for t in trajectories]


def test_filter_parsing_is_linear():
    # The old clause regex ("(.+?)\\s*$") backtracked over every run of spaces: quadratic, about
    # 30 s for this expression. A quoted value may hold the spaces.
    spaces = " " * 100_000
    start = time.perf_counter()
    keep = parse_filter(f"outcome == 'a{spaces}b' and " + " and ".join(["return >= 0"] * 5_000))
    with pytest.raises(ValueError, match="got 'b'"):
        parse_filter(f"outcome == win{spaces}b")  # an unquoted "a" is no outcome
    assert time.perf_counter() - start < 2.0
    assert not any(keep(t) for t in games(4))


def test_sft_record_drops_only_the_final_observation():
    (traj,) = games(1)
    record = sft_record(traj)
    assert record["messages"] == traj.messages[:-1]
    assert record["messages"][-1]["role"] == "assistant"
    assert record["final_observation"] == traj.messages[-1]["content"]


def test_collect_output_loads_with_datasets_and_round_trips(tmp_path):
    datasets = pytest.importorskip(
        "datasets", reason="needs the data extra: pip install 'textgym[data]'"
    )
    out = tmp_path / "sft.jsonl"
    assert (
        main(
            [
                "collect",
                "textgym/TicTacToe-v0",
                "--policy",
                "minimax",
                "--limit",
                "4",
                "--rollouts-per-task",
                "3",
                "--env-kwargs",
                '{"opponent": "random"}',
                "--filter",
                "outcome == win",
                "--output",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(r["outcome"] == "win" for r in records)
    # Rollouts of a seed: episodes 3g..3g+2 share seed g.
    assert {r["seed"] for r in records} <= set(range(4))
    loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    assert len(loaded) == len(records)
    assert [row["messages"] for row in loaded] == [r["messages"] for r in records]


def test_rollouts_of_a_seed_are_copies_of_one_episode_start(tmp_path):
    assert (
        main(
            [
                "eval",
                "textgym/TicTacToe-v0",
                "--policy",
                "minimax",
                "--limit",
                "2",
                "--rollouts-per-task",
                "4",
                "--env-kwargs",
                '{"random_move_prob": 0.5}',
                "--output-dir",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    records = [
        json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()
    ]
    assert [r["seed"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1]
    first_obs = [r["messages"][1]["content"] for r in records]
    assert len(set(first_obs[:4])) == 1 and len(set(first_obs[4:])) == 1


def _prompts(record):
    messages = [(m["role"], m["content"]) for m in record["messages"]]
    return {tuple(messages[:i]) for i, (role, _) in enumerate(messages) if role == "assistant"}


def test_covering_records_keep_every_prompt_with_fewer_games():
    records = [sft_record(t) for t in games(300)]
    kept = covering_records(records + records[:50])  # duplicates are never kept twice
    every = set().union(*map(_prompts, records))
    assert set().union(*map(_prompts, kept)) == every
    assert len(kept) < len(records)
    assert len({json.dumps(r["messages"]) for r in kept}) == len(kept)
    assert kept == sorted(kept, key=records.index)  # original order


def test_covering_records_of_nothing_is_nothing():
    assert covering_records([]) == []
    with pytest.raises(KeyError):
        covering_records([{"seed": 0}])


def test_covering_records_tell_tool_calls_apart():
    # Same texts, different tool calls: the second assistant turn follows different prompts.
    def record(call):
        call_msg = {"role": "assistant", "content": "", "tool_calls": [call]}
        return {
            "messages": [
                {"role": "user", "content": "go"},
                call_msg,
                {"role": "tool", "content": "ok"},
                {"role": "assistant", "content": "done"},
            ]
        }

    records = [record({"name": "a"}), record({"name": "b"}), record({"name": "a"})]
    assert covering_records(records) == records[:2]
