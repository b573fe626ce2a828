"""``textgym compare`` reads any mix of eval and train runs."""

from __future__ import annotations

import json

import pytest

from textgym.cli import main
from textgym.cli.compare import eval_rows

from .._runs import table


def eval_run(path, policy, episodes=8):
    assert (
        main(
            [
                "eval",
                "textgym/TicTacToe-v0",
                "--policy",
                policy,
                "--episodes",
                str(episodes),
                "--output-dir",
                str(path),
                "--no-progress",
            ]
        )
        == 0
    )
    return json.loads((path / "summary.json").read_text())


def train_run(path, rewards, return_mean):
    """A train directory as ``textgym train`` writes it: metrics.jsonl and final_eval.json."""
    path.mkdir()
    rows = [
        {"step": step, "stage": "train", "reward_mean": reward, "loss": 0.1, "step_time_s": 1.0}
        for step, reward in enumerate(rewards, start=1)
    ]
    final = {"eval/return_mean": return_mean, "eval/invalid_rate": 0.0}
    rows.append({"step": len(rewards), "stage": "eval", **final})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "final_eval.json").write_text(json.dumps(final))


def test_eval_and_train_runs_side_by_side(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    summary = eval_run(tmp_path / "minimax", "minimax")
    train_run(tmp_path / "grpo", [0.1, 0.3], 0.42)
    capsys.readouterr()
    plots = tmp_path / "plots"
    assert (
        main(["compare", str(tmp_path / "minimax"), str(tmp_path / "grpo"), "--plots", str(plots)])
        == 0
    )
    out = capsys.readouterr().out
    rows = table(out)
    header = next(line for line in out.splitlines() if line.count("┃") >= 3)
    assert [c.strip() for c in header.split("┃")[2:-1]] == ["minimax", "grpo"]
    assert "(eval)" in out and "(train)" in out  # each run's kind under its name
    # one name for the mean evaluation return of both kinds of run
    assert rows["eval/return_mean"] == [f"{summary['mean_return']:.4g}", "0.42"]
    assert rows["eval/draw_rate"] == [f"{summary['outcomes']['draw']:.4g}", "-"]
    assert rows["train/reward_mean"] == ["-", "0.3"]
    assert rows["eval/episodes"] == ["8", "-"]
    names = sorted(p.name for p in plots.iterdir())
    assert "reward.png" in names and "eval_return.png" in names
    assert f"wrote {plots / 'reward.png'}" in out


def test_two_eval_runs_compare_without_plots(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    minimax = eval_run(tmp_path / "minimax", "minimax")
    random = eval_run(tmp_path / "random", "random")
    capsys.readouterr()
    plots = tmp_path / "plots"
    argv = ["compare", str(tmp_path / "minimax"), str(tmp_path / "random"), "--plots", str(plots)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = table(out)
    assert rows["eval/return_mean"] == [
        f"{minimax['mean_return']:.4g}",
        f"{random['mean_return']:.4g}",
    ]
    assert "no plots: none of the runs is a train or sft run" in out
    assert not plots.exists()


def test_an_eval_run_without_its_summary_is_read_from_its_episodes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    summary = eval_run(tmp_path / "cut", "minimax")
    (tmp_path / "cut" / "summary.json").unlink()  # as a run stopped before its end leaves it
    train_run(tmp_path / "grpo", [0.1], 0.5)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "cut"), str(tmp_path / "grpo")]) == 0
    out = capsys.readouterr().out
    assert table(out)["eval/return_mean"][0] == f"{summary['mean_return']:.4g}"
    assert "computed from trajectories.jsonl" in out


@pytest.mark.parametrize("what", ["missing", "file", "one"])
def test_what_is_not_two_runs_is_one_line(tmp_path, capsys, what):
    eval_run(tmp_path / "a", "minimax", episodes=2)
    other = {"missing": tmp_path / "nothing", "file": tmp_path / "x.jsonl", "one": None}[what]
    if what == "file":
        other.write_text("{}\n")
    argv = ["compare", str(tmp_path / "a")] + ([str(other)] if other is not None else [])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("textgym: error: compare:") and err.count("\n") == 1


def test_eval_rows_names():
    rows = eval_rows(
        {
            "episodes": 10,
            "mean_return": 0.5,
            "stderr_return": 0.1,
            "reward_components": {"outcome": 0.5},
            "outcomes": {"win": 0.0, "draw": 0.0, "loss": 0.0},  # an env without outcomes
            "invalid_action_rate": 0.2,
            "tasks": {"pass@1": 0.3, "pass@4": 0.6, "mean@4": 0.4, "played": 3},
        }
    )
    assert rows == {
        "eval/episodes": 10.0,
        "eval/return_mean": 0.5,
        "eval/return_stderr": 0.1,
        "eval/invalid_rate": 0.2,
        "eval/reward/outcome": 0.5,
        "eval/pass@1": 0.3,
        "eval/pass@4": 0.6,
        "eval/mean@4": 0.4,
    }
