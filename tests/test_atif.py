"""``textgym export --format atif``: eval, collect and train runs as ATIF v1.8 trajectories that
validate against the ``atif`` package's own models; the file is written in one step and never
overwritten without ``--overwrite``."""

import json
import os

import pytest

from textgym.cli import main

atif = pytest.importorskip("atif")

from textgym.atif import SCHEMA_VERSION, episode_to_atif, read_run  # noqa: E402
from textgym.errors import SetupError  # noqa: E402


def export(run, out, *extra):
    return main(["export", str(run), "--format", "atif", "--output", str(out), *extra])


def documents(path):
    """Each line of an ATIF export, validated by ``atif.Trajectory``; the parsed dicts."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        atif.Trajectory.model_validate_json(line)  # raises on anything ATIF does not allow
    return [json.loads(line) for line in lines]


def agent_steps(doc):
    return [s for s in doc["steps"] if s["source"] == "agent"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An eval run and a collect file of the email env (tool calls), the gold policy."""
    folder = tmp_path_factory.mktemp("runs")
    email = ["textgym/EmailToolUse-v1", "--policy", "gold", "--episodes", "3", "--no-progress"]
    assert main(["eval", *email, "--output-dir", str(folder / "eval")]) == 0
    assert main(["collect", *email, "--output", str(folder / "collect.jsonl")]) == 0
    return folder


def test_an_eval_run_exports_messages_tool_calls_results_and_rewards(runs, tmp_path):
    out = tmp_path / "eval.atif.jsonl"
    assert export(runs / "eval", out) == 0
    docs = documents(out)
    source = [json.loads(line) for line in (runs / "eval" / "trajectories.jsonl").open()]
    assert len(docs) == len(source) == 3
    for doc, record in zip(docs, source):
        assert doc["schema_version"] == SCHEMA_VERSION and doc["agent"]["name"] == "textgym"
        assert doc["agent"]["extra"] == {"policy": "gold"}
        assert doc["agent"]["tool_definitions"][0]["type"] == "function"
        assert [s["source"] for s in doc["steps"][:2]] == ["system", "user"]
        steps = agent_steps(doc)
        assert [s["extra"]["reward"] for s in steps] == record["rewards"]
        assert [s["extra"]["reward_components"] for s in steps] == record["reward_components"]
        assert all(s["llm_call_count"] == 0 for s in steps)  # a scripted policy
        assert doc["final_metrics"]["extra"]["return"] == record["return"]
        assert doc["extra"]["task_id"] == record["task_id"] and doc["extra"]["run"] == "eval"
    calls = [c for doc in docs for s in agent_steps(doc) for c in s.get("tool_calls", [])]
    assert calls, "the gold email episodes call tools"
    step = next(s for doc in docs for s in agent_steps(doc) if s.get("tool_calls"))
    ids = [c["tool_call_id"] for c in step["tool_calls"]]
    assert [r["source_call_id"] for r in step["observation"]["results"]] == ids
    assert "<tool_call>" in step["extra"]["completion"]  # the text as generated


def test_a_collect_file_exports_its_structured_tool_calls(runs, tmp_path):
    out = tmp_path / "collect.atif.jsonl"
    assert export(runs / "collect.jsonl", out) == 0
    docs = documents(out)
    assert len(docs) == 3 and all(doc["extra"]["run"] == "collect" for doc in docs)
    assert any(s.get("tool_calls") for doc in docs for s in agent_steps(doc))
    last = agent_steps(docs[0])[-1]  # the final answer; the final observation answers it
    assert "final tables" in last["observation"]["results"][0]["content"]
    assert docs[0]["final_metrics"]["extra"]["reward_components"] == {"outcome": 1.0}


def test_token_ids_and_logprobs_are_split_by_turn():
    """A token-level record: each turn's prompt is the episode so far, its completion the ids
    the policy generated, with their log-probs."""
    record = {
        "env_id": "e",
        "seed": 1,
        "task_id": "t",
        "messages": [
            {"role": "system", "content": "play"},
            {"role": "user", "content": "board"},
            {"role": "assistant", "content": "<move>4</move>"},
            {"role": "user", "content": "board 2"},
            {"role": "assistant", "content": "<move>0</move>"},
            {"role": "user", "content": "draw"},
        ],
        "rewards": [0.0, 0.5],
        "reward_components": [{"outcome": 0.0}, {"outcome": 0.5}],
        "finish_reasons": ["stop", "stop"],
        "token_ids": [1, 2, 3, 10, 11, 4, 5, 12, 13, 14],
        "loss_mask": [0, 0, 0, 1, 1, 0, 0, 1, 1, 1],
        "token_logprobs": [0, 0, 0, -0.1, -0.2, 0, 0, -0.3, -0.4, -0.5],
    }
    doc = episode_to_atif(record, kind="eval", index=0, policy="hf", model="tiny")
    atif.Trajectory.model_validate(doc)
    first, second = (s["metrics"] for s in agent_steps(doc))
    assert first == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [10, 11],
        "logprobs": [-0.1, -0.2],
    }
    assert second["prompt_token_ids"] == [1, 2, 3, 10, 11, 4, 5]
    assert second["completion_token_ids"] == [12, 13, 14] and second["logprobs"][-1] == -0.5
    assert doc["final_metrics"]["total_completion_tokens"] == 5
    assert all(s["llm_call_count"] == 1 for s in agent_steps(doc))


def test_a_train_run_exports_its_kept_episodes(tmp_path):
    pytest.importorskip("torch")
    import gymnasium as gym

    from textgym.algos.train_episodes import TrainEpisodesLog, episode_records
    from textgym.builder import make_policy
    from textgym.rollout import rollout

    episodes = rollout(
        lambda: gym.make("textgym/TicTacToe-v0", random_move_prob=1.0),
        make_policy("minimax", seed=0),
        [0, 0, 1, 1],
    )
    run = tmp_path / "train"
    (run / "metrics.jsonl").parent.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    (run / "run.json").write_text(json.dumps({"config": {"model": "tiny"}}))
    log = TrainEpisodesLog(run, groups=2)
    log.write(episode_records(episodes, step=1, groups=2, group_size=2, scale_rewards="group"))
    out = tmp_path / "train.atif.jsonl"
    assert export(run, out) == 0
    docs = documents(out)
    assert len(docs) == 4
    assert [d["extra"]["group"] for d in docs] == [0, 0, 1, 1]
    assert all(d["extra"]["step"] == 1 and "advantage" in d["extra"] for d in docs)
    assert docs[0]["agent"]["model_name"] == "tiny" and docs[0]["extra"]["run"] == "train"


def test_the_output_is_refused_without_overwrite_and_replaced_in_one_step(runs, tmp_path, capsys):
    out = tmp_path / "eval.atif.jsonl"
    assert export(runs / "eval", out) == 0
    before = out.read_text()
    with pytest.raises(SystemExit) as exited:
        export(runs / "eval", out)
    assert exited.value.code == 2 and out.read_text() == before
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert export(runs / "collect.jsonl", out, "--overwrite") == 0
    assert documents(out)[0]["extra"]["run"] == "collect"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no temporary left


def test_the_default_format_is_the_chat_jsonl_of_collect(runs, tmp_path):
    out = tmp_path / "chat.jsonl"
    assert main(["export", str(runs / "eval"), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    collected = [json.loads(line) for line in (runs / "collect.jsonl").open()]
    assert [r["messages"] for r in records] == [r["messages"] for r in collected]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "holds no textgym run"),
        (lambda p: (p / "metrics.jsonl").write_text("{}\n") and p, "kept no episodes"),
    ],
)
def test_a_path_that_is_no_run_is_one_error_line(make, message, tmp_path, capsys):
    path = make(tmp_path)
    with pytest.raises(SetupError, match=message):
        read_run(path)
    with pytest.raises(SystemExit) as exited:
        export(path, tmp_path / "out.jsonl")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("textgym: error:") and message in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("line", ["not json", '["a list"]', '{"no": "messages"}'])
def test_a_malformed_line_is_named_and_leaves_no_file(line, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n")
    with pytest.raises(SystemExit) as exited:
        export(bad, tmp_path / "out.jsonl")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"{bad}:1" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow
def test_a_real_token_level_eval_and_train_run_validate(tmp_path):
    """The tiny model: an eval (token ids and log-probs kept) and a one-step train run."""
    pytest.importorskip("transformers")
    from ._runs import train_argv

    eval_run = tmp_path / "eval"
    argv = ["eval", "textgym/TicTacToe-v0", "--policy", "hf", "--model", "tiny"]
    assert (
        main(
            [
                *argv,
                "--episodes",
                "2",
                "--max-new-tokens",
                "8",
                "--output-dir",
                str(eval_run),
                "--no-progress",
            ]
        )
        == 0
    )
    assert export(eval_run, tmp_path / "e.jsonl") == 0
    steps = [s for d in documents(tmp_path / "e.jsonl") for s in agent_steps(d)]
    assert steps and all(len(s["metrics"]["completion_token_ids"]) >= 1 for s in steps)
    assert all(len(s["metrics"]["logprobs"]) == s["metrics"]["completion_tokens"] for s in steps)
    train_run = tmp_path / "train"
    assert main(train_argv(steps=1, output_dir=str(train_run), progress=False)) == 0
    assert export(train_run, tmp_path / "t.jsonl") == 0
    assert documents(tmp_path / "t.jsonl")
