"""benchmarks/task_pipeline.py end to end with the tiny model (``--smoke``), for both tasks:
every stage writes its JSON, the curriculum chains its GRPO runs, the evaluations are held out
and carry their per-length or per-tool-call results, and a second run resumes (skips every
finished stage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401  (registers the envs)
from textgym.envs.email_tool_use.generator import FAMILIES  # noqa: E402

pytestmark = [pytest.mark.llm, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import task_pipeline  # noqa: E402  (a script beside the benchmarks, not a package)

STAGES = ("base-eval", "sft-data", "sft", "grpo", "eval", "report")


def run_pipeline(task: str, work: Path) -> str:
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "task_pipeline.py"),
        task,
        "--smoke",
        "--work-dir",
        str(work),
        "--output",
        str(work / "result.json"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def check_common(work: Path, stdout: str) -> dict:
    assert all((work / f"{s}.json").is_file() for s in STAGES)
    result = json.loads((work / "result.json").read_text())
    assert result["commit"] and result["machine"]["cores"]
    assert {(row["model"], row["mode"]) for row in result["table"]} == {
        (m, mode) for m in ("base", "sft", "grpo") for mode in ("greedy", "sampled")
    }
    assert set(result["rl_vs_sft"]) == {"greedy", "sampled"}
    assert (work / "report.html").stat().st_size > 0
    # The curves outlive the work folder: every metrics row of the SFT run and of each stage.
    sft_rows = (work / "sft" / "metrics.jsonl").read_text().splitlines()
    assert len(result["curves"]["sft"]) == len(sft_rows) > 0
    assert [len(rows) > 0 for rows in result["curves"]["grpo"]] == [True, True]
    assert (work / "result.png").stat().st_size > 0  # the curves, beside the result JSON
    # The curriculum: stage 1 starts from stage 0's final checkpoint, with its own env kwargs.
    grpo = json.loads((work / "grpo.json").read_text())
    first, second = grpo["stages"]
    config = json.loads((work / "grpo" / "stage-1" / "run.json").read_text())["config"]
    assert config["model"] == first["checkpoint"] and config["wrappers"] == []
    for key, value in second["env_kwargs"].items():
        assert config["env_kwargs"][key] == value
    assert grpo["model"] == second["checkpoint"]
    evals = json.loads((work / "eval.json").read_text())
    assert evals["grpo"]["model"] == grpo["model"]
    for ev in (evals["sft"], evals["grpo"], json.loads((work / "base-eval.json").read_text())):
        assert ev["greedy"]["tasks"]["rollouts_per_task"] == 1
        assert ev["sampled"]["tasks"]["rollouts_per_task"] == 2
        assert "pass@2" in ev["sampled"]["tasks"]
        for mode in ("greedy", "sampled"):
            assert ev[mode]["shared_with_training"] == 0
            assert ev[mode]["success"]["tasks"] == len(ev[mode]["task_scores"]) == 2
    return evals


def check_resumes(task: str, work: Path) -> None:
    stdout = run_pipeline(task, work)
    for stage in STAGES[:-1]:
        assert f"{stage}: done" in stdout


def test_windows_stay_on_their_passages_side_and_spread_over_passages(tmp_path):
    curriculum = json.dumps([{"steps": 1, "env_kwargs": {"max_chars": 64}}])
    args = task_pipeline.parse_args(
        ["reverse_text", "--windows", "3", "--curriculum", curriculum, "--work-dir", str(tmp_path)]
    )
    paths = task_pipeline._split_files(args, tmp_path)
    rows = {
        side: [json.loads(x) for x in path.read_text().splitlines()] for side, path in paths.items()
    }
    sides = {side: {r["id"].split("~")[0] for r in rs} for side, rs in rows.items()}
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]
    for rs in rows.values():
        whole = [r for r in rs if "~" not in r["id"]]
        assert rs[: len(whole)] == whole  # the whole passages first, then the pieces
        pieces = rs[len(whole) :]
        assert len(pieces) > 2 * len(whole) and all(16 <= len(r["text"]) <= 64 for r in pieces)
        text = {r["id"]: r["text"] for r in whole}
        assert all(r["text"] in text[r["id"].split("~")[0]] for r in pieces)
        # The first pieces come from different passages: a --limit prefix spreads out.
        first = [r["id"].split("~")[0] for r in pieces[:20]]
        assert len(set(first)) == 20


@pytest.mark.subprocess
def test_reverse_text_pipeline(tmp_path):
    work = tmp_path / "reverse"
    evals = check_common(work, run_pipeline("reverse_text", work))
    test_ids = {
        json.loads(x)["id"] for x in (work / "data" / "test.jsonl").read_text().splitlines()
    }
    train_ids = {
        json.loads(x)["id"] for x in (work / "data" / "train.jsonl").read_text().splitlines()
    }
    assert test_ids and train_ids and not test_ids & train_ids
    sft = [json.loads(x) for x in (work / "sft_data.jsonl").read_text().splitlines()]
    assert len(sft) == 2 and all(r["task_id"] in train_ids for r in sft)
    assert all(r["return"] > 1.0 for r in sft)  # the gold answers: lcs 1 + format 0.1
    sampled = evals["grpo"]["sampled"]
    assert evals["grpo"]["env_kwargs"]["max_chars"] == 64  # the last smoke stage's length
    buckets = sampled["length_buckets"]
    assert [b["bucket"] for b in buckets] == ["1-32", "33+"]
    assert sum(b["episodes"] for b in buckets) == 4
    records = (work / "eval" / "grpo" / "sampled" / "trajectories.jsonl").read_text().splitlines()
    assert {json.loads(r)["task_id"] for r in records} <= test_ids
    check_resumes("reverse_text", work)


@pytest.mark.subprocess
def test_email_pipeline(tmp_path):
    work = tmp_path / "email"
    evals = check_common(work, run_pipeline("email", work))
    sft = [json.loads(x) for x in (work / "sft_data.jsonl").read_text().splitlines()]
    assert len(sft) == 2 and all(r["return"] == 1.0 and r["tools"] for r in sft)
    # The look-up-first expert: a lookup reply before the writes, so more than two turns.
    assert json.loads((work / "sft-data.json").read_text())["expert"] == "lookup"
    assert all(r["num_steps"] >= 3 for r in sft)
    for ev in (evals["sft"], evals["grpo"]):
        calls = ev["sampled"]["tool_calls"]
        assert calls["episodes"] == 4
        assert sum(calls["verdicts"].values()) == 4
        assert sum(calls["call_kinds"].values()) == calls["calls"]
        # One request per held-out task: the families split the tasks and their success.
        families, success = ev["sampled"]["families"], ev["sampled"]["success"]
        assert set(families) <= set(FAMILIES)
        assert sum(f["tasks"] for f in families.values()) == success["tasks"] == 2
        solved = sum(f["tasks"] * f["success"] for f in families.values())
        assert solved == pytest.approx(success["mean"] * 2)
    records = (work / "eval" / "grpo" / "greedy" / "trajectories.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["seed"] for r in records) == [2 * 10**9, 2 * 10**9 + 1]
    record = json.loads((work / "result.json").read_text())
    assert record["no_call_floor"]["tasks"] == 2
    check_resumes("email", work)


def test_the_no_call_floor_solves_only_requests_whose_condition_fails():
    seeds = [2 * 10**9 + g for g in range(40)]
    floor = task_pipeline.no_call_floor({}, seeds)
    assert floor["tasks"] == 40 and floor["solved_seeds"]  # some requests need no change
    assert floor["mean"] == len(floor["solved_seeds"]) / 40
    for seed in seeds:
        env = gym.make("textgym/EmailToolUse-v1")
        request = env.reset(seed=seed)[0]
        solved = seed in floor["solved_seeds"]
        assert solved <= ("Please if " in request), (seed, request)  # conditional requests only
        env.close()


@pytest.mark.parametrize("tokens", [None, 2048])
def test_packing_reaches_both_the_sft_and_the_grpo_commands(tmp_path, monkeypatch, tokens):
    """``--micro-batch-tokens`` is passed to ``textgym sft`` and to every ``textgym train``."""
    argv = [
        "email",
        "--work-dir",
        str(tmp_path),
        "--curriculum",
        '[{"steps": 1, "env_kwargs": {}}]',
    ]
    args = task_pipeline.parse_args(
        argv + (["--micro-batch-tokens", str(tokens)] if tokens else [])
    )
    commands = []

    def fake_run(*command):
        commands.append([str(c) for c in command])
        out = Path(command[command.index("--output-dir") + 1])
        (out / "checkpoint-1").mkdir(parents=True, exist_ok=True)  # train's last checkpoint
        (out / "sft_summary.json").write_text("{}")

    monkeypatch.setattr(task_pipeline, "_run", fake_run)
    task_pipeline.stage_sft(args, tmp_path)
    assert task_pipeline.stage_grpo(args, tmp_path) is not None
    assert [c[0] for c in commands] == ["sft", "train"]
    train = commands[1]
    assert train[train.index("--wrappers") + 1] == "--steps"  # the env's own reward
    for command in commands:
        packed = "--micro-batch-tokens" in command
        assert packed == (tokens is not None)
        if packed:
            assert command[command.index("--micro-batch-tokens") + 1] == "2048"


def test_curves_keep_every_metrics_row_and_plot_to_a_png(tmp_path):
    rows = {
        "sft": [
            {"step": 10, "stage": "train", "loss": 0.6},
            {"step": 20, "stage": "train", "loss": 0.2},
        ],
        "grpo/stage-0": [
            {"step": s, "stage": "train", "reward_mean": 0.1 * s, "zero_variance_fraction": 0.5}
            for s in (1, 2)
        ],
        "grpo/stage-1": [{"step": 0, "stage": "eval", "return_mean": 0.3}],
    }
    for run, lines in rows.items():
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (tmp_path / "grpo" / "stage-2").mkdir()  # started, nothing logged yet
    curves = task_pipeline.training_curves(tmp_path)
    assert curves["sft"] == rows["sft"]
    assert curves["grpo"] == [rows["grpo/stage-0"], rows["grpo/stage-1"], []]
    png = tmp_path / "curves.png"
    task_pipeline.plot_training_curves(curves, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grpo_wrappers_reach_every_train_command(tmp_path, monkeypatch):
    args = task_pipeline.parse_args(
        ["email", "--work-dir", str(tmp_path), "--grpo-wrappers", "invalid_action_penalty",
         "--curriculum", '[{"steps": 1, "env_kwargs": {}}, {"steps": 1, "env_kwargs": {}}]']
    )  # fmt: skip
    commands = []

    def fake_run(*command):
        commands.append([str(c) for c in command])
        (Path(command[command.index("--output-dir") + 1]) / "checkpoint-1").mkdir(parents=True)

    monkeypatch.setattr(task_pipeline, "_run", fake_run)
    assert task_pipeline.stage_grpo(args, tmp_path) is not None
    assert len(commands) == 2
    for command in commands:
        at = command.index("--wrappers")
        assert command[at + 1 : at + 3] == ["invalid_action_penalty", "--steps"]


def test_rl_vs_sft_pairs_the_tasks_both_models_played():
    """The paired standard error is that of the per-task differences: two models that fail and
    solve mostly the same tasks differ far more surely than their two standard errors say."""

    def evaluation(outcomes):
        records = [
            {"task_id": f"t{i}", "component_totals": {"outcome": o}, "return": o}
            for i, o in enumerate(outcomes)
        ]
        scores = task_pipeline._task_scores(records)
        return {"success": task_pipeline._success(scores), "task_scores": scores}

    sft = evaluation([0, 0, 0, 0, 1, 1, 1, 1, 0, 0])
    rl = evaluation([1, 1, 0, 0, 1, 1, 1, 1, 0, 0])  # two tasks gained, none lost
    diff = task_pipeline._difference(sft, rl)
    assert diff["delta"] == pytest.approx(0.2) and diff["paired_tasks"] == 10
    gains = [1, 1] + [0] * 8
    mean = sum(gains) / 10
    sd = (sum((g - mean) ** 2 for g in gains) / 9) ** 0.5
    assert diff["paired_stderr"] == pytest.approx(sd / 10**0.5)
    assert diff["paired_z"] > diff["z"] > 0
    same = task_pipeline._difference(sft, sft)
    assert same["delta"] == 0 and same["paired_z"] is None  # no task differs: no z
