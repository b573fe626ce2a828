"""``benchmarks/tictactoe_eval.py``: its rows, its exact references and its ceiling table, with
the scripted minimax player (fast, no model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "tictactoe_eval.py"


def run(*args: str) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    return completed


def test_minimax_rows_both_marks_with_exact_references(tmp_path):
    out = tmp_path / "eval.json"
    rows = ["random", "optimal", "minimax p=0.5", "fork", "greedy_edge"]
    completed = run("--policy", "minimax", "--games", "40", "--rows", *rows, "--output", str(out))
    record = json.loads(out.read_text())
    assert record["complete"] is True and record["seed"] == 0 and record["policy"] == "minimax"
    assert "commit" in record and record["machine"]["cores"] >= 1
    results = record["results"]["scripted"]
    assert list(results) == rows
    for row in rows:
        assert set(results[row]) == {"X", "O"}
        for mark, r in results[row].items():
            assert r["games"] == 40 and 1 <= r["distinct_games"] <= 40
            assert r["loss"]["rate"] == 0.0 and r["invalid_action"]["rate"] == 0.0, (row, mark)
            total = r["win"]["rate"] + r["draw"]["rate"] + r["loss"]["rate"]
            assert abs(total - 1.0) < 1e-12
            assert r["exact"]["best_player"]["score"] >= r["exact"]["minimax_player"]["score"]
    # Against an optimal opponent every game is drawn, exactly and as played.
    for mark in "XO":
        assert results["random"][mark]["distinct_games"] > 20  # random replies: many lines
        assert results["optimal"][mark]["draw"]["rate"] == 1.0
        assert results["fork"][mark]["exact"]["best_player"]["draw"] == 1.0
    assert results["random"]["X"]["exact"]["minimax_player"]["win_exact"] == "75257/77760"
    assert "greedy_edge" in completed.stdout and "minimax p=0.5" in completed.stdout


def test_ceilings_file(tmp_path):
    out = tmp_path / "ceilings.json"
    completed = run("--ceilings", str(out))
    table = json.loads(out.read_text())["ceilings"]
    assert table["O"]["best_score_vs_random"]["loss_exact"] == "1/105"
    assert table["X"]["minimax_vs_optimal"]["draw_exact"] == "1"
    assert "2645/3402" in completed.stdout


def test_position_exam_passes_the_minimax_and_fails_random_play(tmp_path):
    exams = {}
    for policy in ("minimax", "random"):
        out = tmp_path / f"{policy}.json"
        run("--policy", policy, "--rows", "--positions", "--positions-games", "600",
            "--output", str(out))  # fmt: skip
        record = json.loads(out.read_text())
        assert record["results"] == {"scripted": {}}  # no rows asked for
        exams[policy] = record["positions"]["scripted"]
    for mark in "XO":
        minimax, random = exams["minimax"][mark], exams["random"][mark]
        # The same positions for both policies: found by the expert, not by the examinee.
        assert minimax["positions"] == random["positions"] > 20
        assert minimax["safe"]["rate"] == 1.0 and minimax["unsafe_by_marks"] == {}
        assert len(random["unsafe"]) == sum(random["unsafe_by_marks"].values())
        assert all(u["move"] not in u["safe"] for u in random["unsafe"])
        assert minimax["best"]["rate"] < 1.0  # the minimax does not always exploit
        assert random["safe"]["rate"] < 0.8 and sum(random["unsafe_by_marks"].values()) > 0
        assert minimax["invalid"]["rate"] == random["invalid"]["rate"] == 0.0


def test_the_output_folder_is_made_before_any_game(tmp_path):
    """A JSON path in a folder that does not exist yet: made first, every row saved into it
    (a missing folder used to fail after the first finished row, losing it)."""
    out = tmp_path / "new" / "deeper" / "eval.json"
    run("--policy", "minimax", "--games", "4", "--rows", "optimal", "--output", str(out))
    record = json.loads(out.read_text())
    assert record["complete"] is True and set(record["results"]["scripted"]) == {"optimal"}
