"""``benchmarks/tictactoe_recipe.py``: an arm's config is the base recipe plus its one knob; a
smoke arm trains, evaluates and writes its record; the table reads records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "tictactoe_recipe.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import tictactoe_recipe as recipe  # noqa: E402  (a script beside the benchmarks, not a package)


def args(*argv: str):
    return recipe.parse_args(["run", *argv])


def _exam(unsafe: dict[str, list[str]]) -> dict:
    """A ``tictactoe_eval.py --positions`` record whose greedy exam got ``unsafe`` wrong."""
    return {
        "positions": {
            "greedy": {mark: {"unsafe": [{"board": b} for b in boards]} for mark, boards in unsafe.items()}
        }
    }  # fmt: skip


MISREADS = {"X": ["X.O......", "XO.X.O..."], "O": ["........X"]}


@pytest.mark.parametrize("name", list(recipe.ARMS))
def test_each_arm_is_the_base_recipe_with_its_own_changes(name, tmp_path):
    extra: list[str] = []
    if name in recipe.NEEDS_START_BOARDS:
        exam = tmp_path / "exam.json"
        exam.write_text(json.dumps(_exam(MISREADS)))
        extra = ["--start-boards-from", str(exam)]
    config = recipe.arm_config(name, args(name, "--work-dir", str(tmp_path), *extra))
    changes = recipe.ARMS[name].changes
    for key, value in recipe.BASE.items():
        got = getattr(config, key)
        if key == "env_kwargs":
            want = {**value, **changes.get(key, {})}
            if extra:  # the exam's misread boards in place of the arm's own start boards
                want["start_boards"] = ["X.O......", "XO.X.O...", "........X"]
            assert got == want
        else:
            assert got == changes.get(key, value), (name, key)
    for key in set(changes) - set(recipe.BASE):
        assert getattr(config, key) == changes[key], (name, key)
    assert config.model == recipe.START and config.steps == 40
    assert config.output_dir == str(tmp_path / name)


def test_arms_that_change_the_env_keep_the_base_env_settings(tmp_path):
    styles = recipe.arm_config("styles", args("styles", "--work-dir", str(tmp_path)))
    assert styles.env_kwargs == {
        "prompt_style": "compact",
        "agent_mark": "random",
        "opponent": list(recipe.TRAIN_STYLES),
    }
    assert "minimax_any" not in recipe.TRAIN_STYLES  # held out for evaluation


@pytest.mark.subprocess
def test_unknown_arm_is_refused_in_one_line():
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "nobody"], capture_output=True, text=True
    )
    assert completed.returncode == 2 and "expected an arm in control" in completed.stderr


@pytest.mark.subprocess
def test_smoke_arm_writes_a_record_the_table_reads(tmp_path):
    results = tmp_path / "results"
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "run",
            "win_speed",
            "--smoke",
            "--work-dir",
            str(tmp_path / "runs"),
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO / "benchmarks",
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    record = json.loads((results / "win_speed.json").read_text())
    assert record["arm"] == "win_speed" and record["smoke"] is True and record["steps"] == 2
    assert record["config"]["wrappers"] == ["invalid_action_penalty", "win_speed_bonus"]
    assert [c["step"] for c in record["curve"] if c["stage"] == "train"] == [1, 2]
    greedy = record["eval"]["greedy"]
    assert list(greedy) == list(recipe.EVAL_ROWS)
    assert all(greedy[row][m]["games"] == 4 for row in greedy for m in ("X", "O"))
    table = recipe.markdown_table([record])
    assert table.count("\n") == 2 and "| win_speed | shaping | 2 |" in table
    per_mark = recipe.per_mark_table([record]).splitlines()
    assert len(per_mark) == 3 and per_mark[2].startswith("| win_speed | ")
    assert per_mark[2].count("|") == 2 + 2 * len(recipe.EVAL_ROWS)  # a cell per row and mark


def _rates(win, draw, loss, games=1000):
    def rate(p):
        return {"rate": p, "stderr": (p * (1 - p) / games) ** 0.5}

    return {
        "win": rate(win), "draw": rate(draw), "loss": rate(loss),
        "invalid_action": rate(0.0), "games": games,
    }  # fmt: skip


def test_the_gain_table_gives_the_loss_change_in_combined_standard_errors():
    before = {"greedy": {"optimal": {"O": _rates(0.0, 0.8, 0.2)}, "fork": {"O": _rates(0, 0, 1)}}}
    after = {"greedy": {"optimal": {"O": _rates(0.0, 0.9, 0.1)}}}
    table = recipe.gain_table(before, after)
    (row,) = [line for line in table.splitlines() if line.startswith("| optimal")]
    assert "0.0 / 80.0 / 20.0" in row and "0.0 / 90.0 / 10.0" in row
    assert row.endswith("| -10.0 (-6.3) |")  # 0.1 / hypot(0.01265, 0.00949)
    assert "fork" not in table  # a row only one side has is left out
    flat = {"greedy": {"fork": {"O": _rates(0, 0, 1)}}}
    (row,) = recipe.gain_table(flat, {"greedy": {"fork": {"O": _rates(0, 1, 0)}}}).splitlines()[2:]
    assert row.endswith("| -100.0 (-) |")  # outcomes that never vary: no standard error


def test_misread_boards_come_from_the_greedy_exam_and_are_required(tmp_path):
    assert recipe.misread_boards(_exam(MISREADS)) == ["X.O......", "XO.X.O...", "........X"]
    with pytest.raises(ValueError, match="no unsafe greedy move"):
        recipe.misread_boards(_exam({"X": [], "O": []}))
    with pytest.raises(ValueError, match="greedy exam"):
        recipe.misread_boards({"positions": {"sampled": {}}})
    for name in recipe.NEEDS_START_BOARDS:
        with pytest.raises(SystemExit):
            args(name)  # no --start-boards-from


def test_the_prioritised_league_weights_each_style_by_its_loss_rate():
    results = {
        "greedy": {
            "optimal": {"X": _rates(0, 1, 0), "O": _rates(0, 0.6, 0.4)},  # the minimax
            "fork": {"O": _rates(0, 0, 1)},
        }
    }
    league = recipe.prioritised_league(results, ("minimax", "fork", "random"), slots=10)
    assert league.count("minimax") == 3  # 1 + 10 x the marks' mean loss rate, 0.2
    assert league.count("fork") == 11 and league.count("random") == 1  # no row: one slot
    with pytest.raises(ValueError, match="slots >= 0"):
        recipe.prioritised_league(results, slots=-1)
