"""``benchmarks/tictactoe_eval.py`` and ``benchmarks/tictactoe_recipe.py`` follow the study
output rules (issue 52 item 1), in process and without training: a bad argument is one line and
exit 2, ``benchmarks/results/`` is written only with ``--update-results``, and a user's file
where a record or plot goes is refused and left byte-identical."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import tictactoe_recipe as recipe  # noqa: E402  (a script beside the benchmarks, not a package)
from _study_outputs import run_main  # noqa: E402

from ..._study import USER, exit_code, one_error_line  # noqa: E402


@pytest.mark.parametrize(
    "bad",
    [
        ["--games", "0"],
        ["--games", "x"],
        ["--batch-size", "0"],
        ["--max-new-tokens", "0"],
        ["--positions-games", "-1"],
        ["--explore-samples", "-1"],
        ["--seed", "-1"],
        ["--seed", "4294967296"],
        ["--temperature", "-1"],
        ["--temperature", "nan"],
        ["--selfplay-temperature", "inf"],
        ["--dtype", "int8"],
        ["--device", "tpu", "--rows"],
        ["--device", "cuda:x", "--rows"],
        ["--output", str(REPO / "benchmarks" / "results" / "tictactoe_eval_minimax.json")],
        ["--ceilings", str(REPO / "benchmarks" / "results" / "tictactoe_ceilings.json")],
        ["--rows", "nobody"],
        ["--selfplay-against", "a"],
    ],
)
def test_eval_script_refuses_bad_arguments_in_one_line(eval_script, bad, capsys):
    results = REPO / "benchmarks" / "results"
    before = {p: p.read_bytes() for p in results.glob("tictactoe_*.json")}
    assert exit_code(run_main, eval_script.main, bad) == 2
    one_error_line(capsys)
    assert {p: p.read_bytes() for p in results.glob("tictactoe_*.json")} == before


@pytest.mark.parametrize(
    "bad",
    [
        ["run", "nobody"],
        ["run", "control", "--steps", "0"],
        ["run", "control", "--eval-games", "0"],
        ["run", "control", "--seed", "-1"],
        ["run", "control", "--seed", "4294967296"],
        ["run", "league_misreads"],  # needs --start-boards-from
        ["run", "league_misreads", "--start-boards-from", "/nonexistent/exam.json"],
        ["run", "league_misreads", "--start-boards-from", "/dev/zero"],
        ["run", "control", "--league-from", "{user}"],
        ["run", "control", "--results", str(REPO / "benchmarks" / "results" / "recipe")],
        ["table", "--results", str(REPO / "benchmarks" / "results" / "recipe")],
        [],
    ],
)
def test_recipe_script_refuses_bad_arguments_in_one_line(bad, tmp_path, capsys):
    user = tmp_path / "user.txt"
    user.write_bytes(USER)
    argv = [a.replace("{user}", str(user)) for a in bad] + ["--work-dir", str(tmp_path / "w")]
    assert exit_code(run_main, recipe.main, argv) == 2
    one_error_line(capsys)
    assert user.read_bytes() == USER
    assert not (tmp_path / "w").exists()  # nothing written before the refusal


def test_recipe_table_writes_into_the_work_dir_and_keeps_a_users_plot(tmp_path, capsys):
    results = tmp_path / "w" / "results"
    results.mkdir(parents=True)
    record = json.loads((recipe.RESULTS / "curriculum_0_1.json").read_text())  # a committed arm
    (results / "control.json").write_text(json.dumps(record))
    doc = recipe.TABLE_DOC.read_bytes()
    assert run_main(recipe.main, ["table", "--work-dir", str(tmp_path / "w")]) == 0
    assert (results / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert recipe.TABLE_DOC.read_bytes() == doc  # docs only with --update-results
    assert run_main(recipe.main, ["table", "--work-dir", str(tmp_path / "w")]) == 0  # its own
    capsys.readouterr()
    (results / "curves.png").write_bytes(USER)  # now the user's
    assert run_main(recipe.main, ["table", "--work-dir", str(tmp_path / "w")]) == 2
    assert "curves.png" in one_error_line(capsys)
    assert (results / "curves.png").read_bytes() == USER


def test_recipe_record_replaces_only_its_own(tmp_path):
    own = tmp_path / "own.json"
    own.write_text(json.dumps({"benchmark": "tictactoe_recipe"}))
    recipe._check_record(own)
    recipe._check_record(tmp_path / "absent.json")
    user = tmp_path / "user.json"
    user.write_bytes(USER)
    with pytest.raises(recipe.SetupError, match="not a tictactoe_recipe record"):
        recipe._check_record(user)
    assert user.read_bytes() == USER
