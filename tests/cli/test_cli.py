"""The textgym command line, run as a real subprocess where it matters."""

import json
import subprocess
import sys

import pytest

from textgym.cli import main

CLI = [sys.executable, "-m", "textgym.cli"]


def run_cli(*args, input_text=None):
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, input=input_text, timeout=300
    )


def test_list_prints_ids(capsys):
    assert main(["list"]) == 0
    assert "textgym/TicTacToe-v0" in capsys.readouterr().out


@pytest.mark.subprocess
def test_eval_minimax_draws_every_game(tmp_path):
    out = tmp_path / "run"
    proc = run_cli(
        "eval",
        "textgym/TicTacToe-v0",
        "--policy",
        "minimax",
        "--episodes",
        "1000",
        "--seed",
        "0",
        "--env-kwargs",
        '{"random_move_prob": 0}',
        "--output-dir",
        str(out),
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    for key in [
        "env_id",
        "policy",
        "model",
        "episodes",
        "seed",
        "mean_return",
        "stderr_return",
        "reward_components",
        "outcomes",
        "invalid_action_rate",
        "mean_turns",
        "elapsed_s",
    ]:
        assert key in summary
    assert summary["episodes"] == 1000 and summary["outcomes"] == {
        "win": 0.0,
        "draw": 1.0,
        "loss": 0.0,
    }
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 1000
    record = json.loads(lines[0])
    assert (
        record["seed"] == 0
        and record["outcome"] == "draw"
        and record["messages"][0]["role"] == "system"
    )
    assert len(record["rewards"]) == len(record["reward_components"]) == 5
    assert proc.stdout.strip().splitlines()[-2] == (
        "minimax over 1000 episodes: legal, parsable actions in 100% of turns; 0% wins, "
        "100% draws, 0% losses."
    )


def test_eval_with_wrappers_reports_components(capsys):
    assert (
        main(
            [
                "eval",
                "textgym/TicTacToe-v0",
                "--policy",
                "random",
                "--episodes",
                "50",
                "--wrappers",
                "format_reward",
                "invalid_action_penalty",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "component format" in out and "component invalid_action" in out and "loss" in out


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "textgym/Nope-v0"], "unknown env id"),
        (["eval", "textgym/TicTacToe-v0", "--env-kwargs", "{bad"], "not valid JSON"),
        (["eval", "textgym/TicTacToe-v0", "--env-kwargs", "[1]"], "JSON object"),
        (
            ["eval", "textgym/TicTacToe-v0", "--env-kwargs", '{"random_move_prob": 1.5}'],
            r"random_move_prob in [0, 1], got 1.5",
        ),
        (["eval", "textgym/TicTacToe-v0", "--env-kwargs", '{"colour": "red"}'], "colour"),
        (["eval", "textgym/TicTacToe-v0", "--episodes", "0"], "--episodes"),
        (
            ["eval", "textgym/TicTacToe-v0", "--policy", "alphago"],
            "expected one of {expert,minimax,",
        ),
        (["eval", "textgym/TicTacToe-v0", "--wrappers", "shiny"], "unknown wrapper"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr


@pytest.mark.subprocess
def test_play_in_terminal():
    moves = "\n".join(["4", "hello", "0", "2", "6", "8", "1", "3", "5", "7"]) + "\n"
    proc = run_cli("play", "textgym/TicTacToe-v0", "--seed", "0", input_text=moves)
    assert proc.returncode == 0, proc.stderr
    assert "Invalid move" in proc.stdout and "Game over" in proc.stdout
