"""The trainers' progress and closing summaries: evaluations inside ``train`` show progress, a
skipped update says why and is counted, and ``train`` and ``sft`` end with tables of the same
numbers their progress lines showed (no raw JSON)."""

from __future__ import annotations

import json
import re
import types

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import textgym.progress  # noqa: E402
from textgym.algos.metric_summaries import (  # noqa: E402
    progress_line,
    skipped_update_note,
    training_summary,
)
from textgym.algos.metrics import MetricsLogger  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.cli.training_tables import eval_table_rows, print_train_summary  # noqa: E402

from .._runs import table, train_argv  # noqa: E402


def test_a_skipped_update_says_why():
    assert skipped_update_note({"skipped_update": 1.0}, 8) == (
        "update skipped: all 8 groups had equal rewards"
    )
    assert skipped_update_note({"skipped_update": 0.0, "nonfinite_skipped": 1.0}, 8) == (
        "update skipped: the loss or the gradient norm was not finite"
    )
    assert skipped_update_note({"skipped_update": 0.0, "nonfinite_skipped": 0.0}, 8) is None
    line = progress_line(
        1, 2, loss=float("nan"), seconds=1.0, tokens=10, reward=-0.1, note="update skipped: x"
    )
    assert line == "step 1/2  loss -  reward -0.1  1.00 s  10 tokens/s  update skipped: x"


def test_training_summary_counts_skipped_updates(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(0, {"random/return_mean": 0.1}, stage="eval")
        logger.log(1, {"loss": float("nan"), "reward_mean": 0.0, "skipped_update": 1.0})
        logger.log(2, {"loss": 0.25, "reward_mean": 0.5, "skipped_update": 0.0})
        logger.log(3, {"loss": float("nan"), "reward_mean": 1.0, "skipped_update": 1.0})
        logger.log(3, {"random/return_mean": 0.75, "random/win_rate": 0.5}, stage="eval")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    summary = training_summary(rows)
    assert summary["steps"] == 3 and summary["skipped_updates"] == 2
    assert summary["last_reward"] == 1.0 and summary["last_loss"] != summary["last_loss"]  # NaN
    assert summary["eval_step"] == 3
    assert summary["eval"] == {"random/return_mean": 0.75, "random/win_rate": 0.5}
    config = types.SimpleNamespace(
        output_dir=str(tmp_path), env_id="e", model="m", steps=3, eval_episodes=4
    )
    print_train_summary(config, summary["eval"], 12.0)


def test_the_final_evaluation_reads_as_evals_table():
    settings, rows = eval_table_rows(
        {
            "random/return_mean": 0.5,
            "random/invalid_rate": 0.25,
            "random/win_rate": 0.5,
            "optimal/return_mean": 0.25,
            "optimal/invalid_rate": 0.0,
            "optimal/win_rate": 0.0,
        }
    )
    assert settings == ["random", "optimal"]
    assert dict(rows) == {
        "mean return": ["0.5000", "0.2500"],
        "win": ["50.0%", "0.0%"],
        "invalid actions": ["25.0%", "0.0%"],
    }


def test_train_shows_evaluation_progress_and_ends_with_tables(tmp_path, capsys, monkeypatch):
    """One tiny step: the tiny model's answers are all invalid, so every group is flat and the
    update is skipped; the evaluations before and after show progress lines (piped stderr)."""
    monkeypatch.setattr(textgym.progress, "QUIET_S", 0.0)
    monkeypatch.setenv("COLUMNS", "200")  # rich's tables one row per line
    out = tmp_path / "run"
    assert main(train_argv(steps=1, output_dir=out)) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    before = [line for line in err if line.startswith("evaluation before training")]
    after = [line for line in err if line.startswith("evaluation after step 1 of 1")]
    assert before and after
    assert re.search(
        r": 4/4 episodes \(100%\), \d+ actions, [\d.]+ s, [\d.]+ episodes/s$", after[-1]
    )
    step = next(line for line in err if line.startswith("step 1/1"))
    assert step.endswith("update skipped: both groups had equal rewards")
    assert not captured.out.lstrip().startswith("{")  # no JSON dump
    rows = table(captured.out)
    assert rows["steps"] == ["1 of 1"]
    assert rows["updates skipped (all groups had equal rewards)"] == ["1 of 1"]
    reward = re.search(r"reward (\S+)", step).group(1)
    assert float(rows["reward (last step)"][0]) == pytest.approx(float(reward), abs=1e-4)
    final = json.loads((out / "final_eval.json").read_text())
    assert rows["mean return"] == [
        f"{final['random/return_mean']:.4f}",
        f"{final['optimal/return_mean']:.4f}",
    ]
    assert rows["invalid actions"] == ["100.0%", "100.0%"]


def write_sft_data(path, count=12):
    from textgym.cli import main as cli

    assert (
        cli(
            [
                "collect",
                "textgym/TicTacToe-v0",
                "--episodes",
                str(count),
                "--output",
                str(path),
                "--no-progress",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("log_every", "label"),
    [("10", "loss (mean of steps 1-3, nats per token)"), ("1", "loss (step 3, nats per token)")],
)
def test_sft_ends_with_the_loss_its_last_progress_line_showed(
    tmp_path, capsys, monkeypatch, log_every, label
):
    monkeypatch.setenv("COLUMNS", "200")  # rich's tables one row per line
    data = tmp_path / "games.jsonl"
    write_sft_data(data)
    capsys.readouterr()
    argv = ["sft", "--data", str(data), "--model", "tiny", "--output-dir", str(tmp_path / "sft")]
    argv += ["--epochs", "1", "--batch-size", "4", "--log-every", log_every, "--device", "cpu"]
    assert main([*argv, "--no-tensorboard"]) == 0
    captured = capsys.readouterr()
    last = [line for line in captured.err.splitlines() if line.startswith("step ")][-1]
    assert last.startswith("step 3/3")
    rows = table(captured.out)
    assert not captured.out.lstrip().startswith("{")
    assert rows["steps"] == ["3"]
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    if log_every == "10":  # the window mean, named on the last progress line with its steps
        shown = float(re.search(r"mean of steps 1-3: (\S+)$", last).group(1))
        assert summary["final_loss_steps"] == [1, 3]
    else:  # the last step's own loss
        shown = float(re.search(r"loss (\S+)", last).group(1))
        assert summary["final_loss_steps"] == [3, 3]
    assert float(rows[label][0]) == pytest.approx(shown, rel=1e-3)
    assert summary["final_loss"] == pytest.approx(shown, rel=1e-3)
