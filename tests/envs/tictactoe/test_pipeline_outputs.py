"""``benchmarks/tictactoe_pipeline.py`` follows the output rules (issue 52 item 1): a bad argument
is one line and exit 2, a user's files in the work dir and beside ``--output`` are refused and
left byte-identical, and ``benchmarks/results/`` is written only with ``--update-results``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import tictactoe_pipeline  # noqa: E402  (a script beside the benchmarks, not a package)
from _study_outputs import run_main  # noqa: E402

from ..._study import one_error_line  # noqa: E402

RATE = {"rate": 0.5, "stderr": 0.1}
EVAL = {
    "greedy/random": {
        **dict.fromkeys(("win", "draw", "loss", "invalid_game", "invalid_action", "format"), RATE),
        "return": {"mean": 0.5, "stderr": 0.1},
        "games": 4,
    }
}


@pytest.mark.parametrize(
    "bad",
    [
        ["--batch-size", "0"],
        ["--games", "0"],
        ["--games", "x"],
        ["--eval-episodes", "0"],
        ["--group-size", "1"],
        ["--grpo-steps", "-1"],
        ["--device", "tpu"],
        ["--device", "cuda:x"],
        ["--opponent-random-move-prob", "0.9", "0.1"],
        ["--sft-opponent-random-move-prob", "0", "2"],
        ["--temperature", "-1"],
        ["--stage", "nope"],
    ],
)
def test_each_bad_argument_is_one_line_and_exit_2(bad, tmp_path, capsys):
    argv = ["--work-dir", str(tmp_path / "w"), "--stage", "report", *bad]
    try:
        code = run_main(tictactoe_pipeline.main, argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    one_error_line(capsys)


def test_report_on_an_empty_work_dir_is_one_line(tmp_path, capsys):
    argv = ["--work-dir", str(tmp_path), "--stage", "report", "--device", "cpu"]
    assert run_main(tictactoe_pipeline.main, argv) == 2
    assert "no evaluation" in one_error_line(capsys)


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "baseline.json").write_text(json.dumps(EVAL))
    return work


def _report(work: Path, *extra: str) -> list[str]:
    return ["--work-dir", str(work), "--stage", "report", "--device", "cpu", *extra]


@pytest.mark.parametrize("inside", ["photos/cat.jpg", "photos/sft/cat.png", "photos"])
def test_a_folder_beside_output_that_is_not_ours_is_refused_and_kept(inside, tmp_path, capsys):
    work, d = _work(tmp_path), tmp_path / "D"
    user = d / inside
    user.parent.mkdir(parents=True)
    user.write_bytes(b"user data")
    argv = _report(work, "--output", str(d / "photos.json"))
    assert run_main(tictactoe_pipeline.main, argv) == 2
    assert "nothing was deleted" in one_error_line(capsys)
    assert user.read_bytes() == b"user data" and not (d / "photos.json").exists()


def test_an_output_that_is_not_our_record_is_refused(tmp_path, capsys):
    work, out = _work(tmp_path), tmp_path / "mine.json"
    out.write_text('{"mine": 1}')
    assert run_main(tictactoe_pipeline.main, _report(work, "--output", str(out))) == 2
    one_error_line(capsys)
    assert out.read_text() == '{"mine": 1}'


def test_the_report_writes_into_the_work_dir_and_replaces_its_own_plots(tmp_path, capsys):
    work = _work(tmp_path)
    committed = REPO / "benchmarks" / "results" / "tictactoe_pipeline_tiny_cpu.json"
    before = committed.read_bytes() if committed.exists() else None
    (work / "sft" / "plots").mkdir(parents=True)
    (work / "sft" / "plots" / "loss.png").write_bytes(b"png")
    (work / "sft" / "metrics.jsonl").write_text("{}\n")
    for _ in range(2):  # the second run replaces the first one's record and plots
        assert run_main(tictactoe_pipeline.main, _report(work)) == 0
    out = work / "tictactoe_pipeline_tiny_cpu.json"
    assert json.loads(out.read_text())["benchmark"] == "tictactoe_pipeline"
    assert (work / "tictactoe_pipeline_tiny_cpu" / "sft" / "loss.png").read_bytes() == b"png"
    assert (committed.read_bytes() if committed.exists() else None) == before


def test_results_are_read_only_without_update_results(tmp_path, capsys):
    out = REPO / "benchmarks" / "results" / "h1_never_written.json"
    assert run_main(tictactoe_pipeline.main, _report(_work(tmp_path), "--output", str(out))) == 2
    assert "--update-results" in one_error_line(capsys) and not out.exists()


@pytest.mark.parametrize("user_file", ["games.jsonl", "sft/notes.txt"])
def test_the_sft_stage_keeps_a_users_files_in_the_work_dir(user_file, tmp_path, capsys):
    work = tmp_path / "w"
    (work / user_file).parent.mkdir(parents=True, exist_ok=True)
    (work / user_file).write_bytes(b"mine\n")
    argv = ["--smoke", "--stage", "sft", "--work-dir", str(work), "--device", "cpu"]
    assert run_main(tictactoe_pipeline.main, argv) == 2
    one_error_line(capsys)
    assert (work / user_file).read_bytes() == b"mine\n"
    assert not (work / "sft.json").exists()
