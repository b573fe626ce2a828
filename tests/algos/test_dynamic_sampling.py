"""DAPO's dynamic sampling (``dynamic_sampling_rounds``): which groups a step keeps, the extra
rounds' task seeds, the config's checks, and a run's metrics."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.algos.dynamic_sampling import (
    EXTRA_ROUND_SEEDS,
    MAX_DYNAMIC_SAMPLING_ROUNDS,
    round_seed,
    sample_groups,
)
from textgym.errors import NonFiniteError
from textgym.rollout import Trajectory

G = 2  # episodes per group in these tests


def _round(*group_returns, styles=None):
    """A round: ``(episodes, styles)`` with one ``(a, b)`` pair of returns per group; each
    episode's ``task_id`` names its group's first return so the picks can be read back."""
    episodes = [
        SimpleNamespace(episode_return=r, task_id=f"{pair}") for pair in group_returns for r in pair
    ]
    return episodes, styles


def _picked(sampled):
    return [sampled.batch[i].task_id for i in range(0, len(sampled.batch), G)]


def test_extra_rounds_play_until_the_batch_is_informative():
    rounds = [
        _round((1, 1), (0, 1), (0, 0), styles=["a", "b", "c"]),
        _round((0, 0), (1, 1), (0, 0), styles=["d", "e", "f"]),
        _round((1, 0), (0.5, 0), (1, 0), styles=["g", "h", "i"]),
        _round((1, 0), (1, 0), (1, 0), styles=["j", "k", "l"]),  # never played
    ]
    sampled = sample_groups(lambda r: rounds[r], groups=3, group_size=G, rounds=3)
    assert sampled.rounds == 3
    assert _picked(sampled) == ["(0, 1)", "(1, 0)", "(0.5, 0)"]  # the first three, play order
    assert len(sampled.played) == 3 * 3 * G
    assert sampled.opponents == list("abcdefghi")  # one per played group
    assert sampled.metrics(G) == {
        "rollout_rounds": 3.0,
        "groups_played": 9.0,
        "zero_variance_fraction_played": pytest.approx(5 / 9),
    }


def test_a_short_batch_is_filled_with_the_first_flat_groups():
    rounds = [_round((1, 1), (0, 1), (0, 0)), _round((0, 0), (1, 1), (0, 0))]
    sampled = sample_groups(lambda r: rounds[r], groups=3, group_size=G, rounds=1)
    assert sampled.rounds == 2 and sampled.informative == 1
    assert _picked(sampled) == ["(1, 1)", "(0, 1)", "(0, 0)"]
    assert sampled.opponents is None


def test_no_extra_round_when_the_first_suffices_or_none_are_allowed():
    calls = []

    def play(r):
        calls.append(r)
        return _round((1, 0), (0, 0))

    assert sample_groups(play, groups=2, group_size=G, rounds=0).rounds == 1
    assert calls == [0]
    informative = sample_groups(lambda r: _round((1, 0)), groups=1, group_size=G, rounds=5)
    assert informative.rounds == 1 and informative.informative == 1


class _Stop(Exception):
    pass


@pytest.mark.parametrize("stop_before", [1, 2, 7])
def test_the_check_runs_before_every_extra_round_and_ends_the_sampling(stop_before):
    """400,000 allowed rounds of flat groups end at the first check that raises (a Ctrl-C or
    the time limit in the trainer), not after the last round."""
    played, checks = [], []

    def check():
        checks.append(len(played))
        if len(played) == stop_before:
            raise _Stop

    def play(r):
        played.append(r)
        return _round((0, 0))

    with pytest.raises(_Stop):
        sample_groups(play, groups=1, group_size=G, rounds=400_000, check=check)
    assert played == list(range(stop_before)) and checks == list(range(1, stop_before + 1))


def test_the_maximum_is_documented_in_the_help(capsys):
    from textgym.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"0 turns it off; at most {MAX_DYNAMIC_SAMPLING_ROUNDS}." in help_text


def _episode(ret, prompt=50):
    """A token-level trajectory: ``prompt`` prompt tokens, then three generated ones."""
    return Trajectory(
        env_id="e",
        seed=0,
        task_id=f"{ret}",
        messages=[{"role": "user", "content": "x" * 1000}],
        rewards=[ret],
        reward_components=[{"task": ret}],
        invalid_actions=[False],
        finish_reasons=["stop"],
        outcome="win" if ret else "loss",
        token_ids=[1] * prompt + [2, 3, 4],
        loss_mask=[0] * prompt + [1, 1, 1],
        token_logprobs=[0.0] * prompt + [-0.5, -0.25, -0.125],
    )


def test_groups_that_cannot_enter_the_batch_keep_only_what_the_metrics_read():
    """A long step kept every round's prompts and messages (its memory grew each round)."""
    pytest.importorskip("torch")
    from textgym.algos.distributed import SINGLE_PROCESS
    from textgym.algos.grpo_rollouts import rollout_metrics

    flat = [_episode(0.0), _episode(0.0)]
    rounds = [[_episode(1.0), _episode(0.0), *flat], *[flat + flat for _ in range(5)]]
    sampled = sample_groups(lambda r: (rounds[r], None), groups=2, group_size=G, rounds=5)
    assert sampled.rounds == 6 and len(sampled.played) == 24
    full = [e for round_ in rounds for e in round_]
    assert [e.token_ids for e in sampled.batch] == [e.token_ids for e in full[:4]]  # whole
    assert all(e.token_ids for e in sampled.played[:6])  # the first two flat groups may fill
    light = sampled.played[6:]  # the third flat group on: never in a batch of two groups
    assert all(not e.token_ids and not e.messages and len(e.loss_mask) == 3 for e in light)
    assert rollout_metrics(sampled.played, SINGLE_PROCESS) == rollout_metrics(full, SINGLE_PROCESS)


@pytest.mark.parametrize(
    ("round_", "match"),
    [
        (_round((1, 0)), "Expected round 0 to play 2 groups of 2 episodes"),
        (_round((1, 0), (0, 1), styles=["a"]), "with one opponent each"),
        (_round((1, float("nan")), (0, 1)), "finite"),
    ],
)
def test_a_malformed_round_is_refused(round_, match):
    with pytest.raises(ValueError, match=match):
        sample_groups(lambda r: round_, groups=2, group_size=G, rounds=1)


def test_a_nan_return_is_a_non_finite_error():
    with pytest.raises(NonFiniteError):
        sample_groups(lambda r: _round((1, float("nan"))), groups=1, group_size=G, rounds=0)


@given(
    seed=st.integers(0, 50),
    groups=st.integers(1, 64),
    rounds=st.integers(1, 8),
    steps=st.integers(1, 200),
)
def test_every_round_of_every_step_has_its_own_tasks(seed, groups, rounds, steps):
    seen: set[int] = set()
    for step in range(steps):
        for r in range(rounds + 1):
            first = round_seed(seed, step, r, groups, rounds)
            tasks = set(range(first, first + groups))
            assert not tasks & seen
            seen |= tasks
    # Round 0 is the seed the trainer always used; all stay in the run's band.
    assert round_seed(seed, 3, 0, groups, rounds) == seed * 10**6 + 3 * groups
    assert max(seen) < (seed + 1) * 10**6 and min(seen) >= seed * 10**6
    assert all(s - seed * 10**6 < EXTRA_ROUND_SEEDS for s in seen if s < EXTRA_ROUND_SEEDS)


def _config(tmp_path, **overrides):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from textgym.algos.grpo_config import GRPOConfig

    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        dynamic_sampling_rounds=2,
        steps=1,
        groups_per_step=2,
        group_size=2,
        rollout_batch_size=12,
        micro_batch_size=4,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=1,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"dynamic_sampling_rounds": -1}, "dynamic_sampling_rounds: expected >= 0"),
        ({"rollout_engine": "llama-server", "lora_rank": 8}, "needs rollout_engine hf"),
        ({"steps": 10**5, "groups_per_step": 8}, "task seeds each kind of round has"),
        ({"dynamic_sampling_rounds": 101}, "expected at most 100 extra rounds a step, got 101"),
        ({"dynamic_sampling_rounds": 400_000, "steps": 1}, "at most 100 extra rounds"),
        ({"dynamic_sampling_rounds": 2**63}, "at most 100 extra rounds"),
    ],
)
def test_the_config_refuses_what_dynamic_sampling_cannot_run(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, **overrides)


def test_dynamic_sampling_needs_one_process(tmp_path):
    from textgym.algos.distributed import DistributedContext
    from textgym.algos.grpo_config import check_world_size

    ctx = DistributedContext(rank=0, world_size=2)
    with pytest.raises(ValueError, match="dynamic sampling runs in one process"):
        check_world_size(_config(tmp_path), ctx)


@pytest.mark.llm
@pytest.mark.slow
def test_a_run_plays_extra_rounds_while_its_groups_are_flat(tmp_path):
    from textgym.algos import grpo

    grpo.train(_config(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    (train,) = [r for r in rows if r["stage"] == "train"]
    # The untrained tiny model never plays a legal move, so every group is flat: the step plays
    # all 1 + 2 rounds, and the update has nothing to learn from.
    assert train["rollout_rounds"] == 3 and train["groups_played"] == 6
    assert train["zero_variance_fraction_played"] == 1.0
    assert train["skipped_update"] == 1.0
