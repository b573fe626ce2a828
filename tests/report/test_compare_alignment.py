"""``textgym compare`` and ``textgym report`` put an eval run and a train run on shared rows:
an eval run's return, win / draw / loss and invalid rate go on the rows of the train run's
evaluation setting its env played (tic-tac-toe: ``random``, ``optimal``)."""

from __future__ import annotations

import json

import pytest

from textgym.cli import main
from textgym.report import load_run
from textgym.report.alignment import eval_setting, shared_eval
from textgym.report.page import summary_rows

from .._runs import table

TTT = "textgym/TicTacToe-v0"
RANDOM = '{"opponent": "random", "random_move_prob": 1.0}'


def eval_run(path, policy, *extra):
    argv = ["eval", TTT, "--policy", policy, "--episodes", "6", "--output-dir", str(path)]
    assert main([*argv, "--no-progress", *extra]) == 0
    return json.loads((path / "summary.json").read_text())


def train_run(path, wrappers=("invalid_action_penalty",)):
    """A GRPO run's files on tic-tac-toe: eval rows per setting, as algos/grpo_rollouts.py,
    and run.json's config with its reward wrappers (train's default)."""
    path.mkdir()
    run = {"command": ["textgym", "train"], "config": {"wrappers": list(wrappers)}}
    (path / "run.json").write_text(json.dumps(run))
    final = {}
    for setting, ret in (("random", 0.25), ("optimal", -0.5)):
        final.update(
            {
                f"{setting}/return_mean": ret,
                f"{setting}/invalid_rate": 0.1,
                f"{setting}/win_rate": 0.5,
                f"{setting}/draw_rate": 0.25,
                f"{setting}/loss_rate": 0.25,
            }
        )
    rows = [
        {"step": 1, "stage": "train", "reward_mean": 0.1, "loss": 0.2, "step_time_s": 1.0},
        {"step": 1, "stage": "eval", **final},
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "final_eval.json").write_text(json.dumps(final))


@pytest.mark.parametrize(
    ("env_kwargs", "expected"),
    [({}, "optimal"), (json.loads(RANDOM), "random"), ({"random_move_prob": 0.3}, None)],
)
def test_eval_setting_of_a_tictactoe_eval(env_kwargs, expected):
    assert eval_setting({"env_id": TTT, "env_kwargs": env_kwargs}) == expected


def test_eval_setting_of_an_env_without_settings_and_an_unknown_env():
    assert eval_setting({"env_id": "textgym/EmailToolUse-v1", "env_kwargs": {}}) == "eval"
    assert eval_setting({"env_id": "nobody/Nothing-v0"}) is None


def test_compare_eval_and_train_share_rows(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    minimax = eval_run(tmp_path / "vs_minimax", "random")
    random = eval_run(tmp_path / "vs_random", "random", "--env-kwargs", RANDOM)
    train_run(tmp_path / "grpo")
    capsys.readouterr()
    argv = ["compare", *(str(tmp_path / n) for n in ("vs_minimax", "vs_random", "grpo"))]
    assert main(argv) == 0
    rows = table(capsys.readouterr().out)
    # Not a diagonal table: each eval run sits on the rows of the opponent it played.
    assert rows["eval/optimal/return_mean"] == [f"{minimax['mean_return']:.4g}", "-", "-0.5"]
    assert rows["eval/random/return_mean"] == ["-", f"{random['mean_return']:.4g}", "0.25"]
    loss = f"{minimax['outcomes']['loss']:.4g}"
    assert rows["eval/optimal/loss_rate"] == [loss, "-", "0.25"]
    assert rows["eval/random/invalid_rate"] == ["-", "0", "0.1"]
    assert "eval/return_mean" not in rows  # every eval number found its setting's row


def test_compare_notes_an_eval_run_that_played_no_setting(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    eval_run(tmp_path / "mixed", "random", "--env-kwargs", '{"random_move_prob": 0.3}')
    train_run(tmp_path / "grpo")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "mixed"), str(tmp_path / "grpo")]) == 0
    out = capsys.readouterr().out
    assert table(out)["eval/return_mean"][1] == "-"
    assert "mixed: its env" in out and "plays none of the evaluation settings" in out


@pytest.mark.parametrize("same", [False, True])
def test_compare_notes_returns_on_different_reward_scales(tmp_path, capsys, monkeypatch, same):
    """train adds invalid_action_penalty by default, eval no wrapper: compare says so."""
    monkeypatch.setenv("COLUMNS", "200")
    extra = ("--wrappers", "invalid_action_penalty") if same else ()
    eval_run(tmp_path / "vs_minimax", "random", *extra)
    train_run(tmp_path / "grpo")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "vs_minimax"), str(tmp_path / "grpo")]) == 0
    out = capsys.readouterr().out
    assert ("different reward scales" in out) is not same
    if not same:
        assert "['invalid_action_penalty']" in out and "include wrappers none" in out


def test_report_summary_shares_rows(tmp_path):
    summary = eval_run(tmp_path / "vs_minimax", "minimax")
    train_run(tmp_path / "grpo")
    runs = [load_run(tmp_path / "vs_minimax"), load_run(tmp_path / "grpo")]
    assert shared_eval(runs[0])["optimal"]["draw_rate"] == 1.0  # minimax always draws
    assert set(shared_eval(runs[1])) == {"random", "optimal"}
    rows = dict(summary_rows(runs))
    se = summary["stderr_return"]
    assert rows["eval vs optimal: return"] == [f"{summary['mean_return']:.3f} ± {se:.3f}", "-0.500"]
    assert rows["eval vs optimal: win / draw / loss"] == [
        "0.0% / 100.0% / 0.0%",
        "50.0% / 25.0% / 25.0%",
    ]
    assert rows["eval vs random: return"] == ["–", "0.250"]
    assert rows["eval vs optimal: invalid actions"] == ["0.0%", "10.0%"]
