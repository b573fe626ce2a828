"""Issue 52 items 2 and 6: files textgym replaces are written beside and renamed over (a full
disk keeps the old file whole, one error line); ``eval --overwrite`` never writes through a
hard link; run.json on a full disk is one line and no empty file."""

import errno
import json
import os

import pytest

import textgym.results
from textgym.algos.metrics import write_run_record
from textgym.cli import main
from textgym.errors import OutputWriteError
from textgym.results import write_atomic, write_json

TTT = "textgym/TicTacToe-v0"


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


#: Where a replace can meet a full disk: making the temporary file, writing it, syncing it.
POINTS = ("mkstemp", "write", "fsync", "replace")


def full_disk_at(monkeypatch, point: str) -> None:
    if point == "mkstemp":
        monkeypatch.setattr(textgym.results.tempfile, "mkstemp", _enospc)
    elif point == "write":
        real = textgym.results.os.fdopen

        class Full:
            def __init__(self, fh):
                self.fh = fh

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

            def fileno(self):
                return self.fh.fileno()

            def write(self, data):
                self.fh.write(data[: len(data) // 2])
                self.fh.flush()
                _enospc()

        monkeypatch.setattr(textgym.results.os, "fdopen", lambda *a, **k: Full(real(*a, **k)))
    else:
        monkeypatch.setattr(textgym.results.os, point, _enospc)


@pytest.mark.parametrize("point", POINTS)
def test_a_full_disk_keeps_the_old_file_whole_and_leaves_no_temporary(tmp_path, monkeypatch, point):
    path = tmp_path / "summary.json"
    write_json(path, {"old": 1})
    before = path.read_bytes()
    full_disk_at(monkeypatch, point)
    with pytest.raises(OutputWriteError) as raised:
        write_json(path, {"new": "x" * 1000})
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC and raised.value.__context__ is None
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_replace_never_writes_into_a_hard_link(tmp_path):
    user = tmp_path / "mine.html"
    user.write_text("the user's page")
    os.link(user, tmp_path / "report.html")
    write_atomic(tmp_path / "report.html", "new")
    assert user.read_text() == "the user's page"
    assert (tmp_path / "report.html").read_text() == "new"


@pytest.mark.parametrize("point", POINTS)
def test_run_json_on_a_full_disk_is_one_error_and_no_file(tmp_path, monkeypatch, point):
    full_disk_at(monkeypatch, point)
    with pytest.raises(OutputWriteError) as raised:
        write_run_record(tmp_path, {"seed": 0})
    monkeypatch.undo()
    assert "No space left on device" in str(raised.value) and "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_eval_overwrite_unlinks_a_hard_linked_trajectories_file(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", TTT, "--episodes", "2", "--no-progress", "--output-dir", str(out)]
    assert main(argv) == 0
    user = tmp_path / "mine.jsonl"
    os.link(out / "trajectories.jsonl", user)
    before = user.read_bytes()
    assert main([*argv, "--overwrite", "--seed", "7"]) == 0
    assert user.read_bytes() == before
    assert os.stat(user).st_nlink == 1
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2


def test_collect_overwrite_never_writes_into_a_hard_link(tmp_path):
    out = tmp_path / "sft.jsonl"
    argv = ["collect", TTT, "--policy", "minimax", "--limit", "2", "--no-progress"]
    assert main([*argv, "--output", str(out)]) == 0
    user = tmp_path / "mine.jsonl"
    os.link(out, user)
    before = user.read_bytes()
    assert main([*argv, "--output", str(out), "--overwrite", "--seed", "7"]) == 0
    assert user.read_bytes() == before  # the user's name keeps its bytes
    assert os.stat(user).st_nlink == 1 and out.read_bytes() != before


def test_plots_are_replaced_in_one_step(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from textgym.algos import metric_plots

    written = []
    real = metric_plots.write_atomic
    monkeypatch.setattr(metric_plots, "write_atomic", lambda p, d: written.append(p) or real(p, d))
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "stage": "train", "reward_mean": 0.5, "loss": 1.0}\n')
    paths = metric_plots.plot_metrics(metrics, tmp_path / "plots")
    assert paths and sorted(written) == sorted(paths)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


@pytest.mark.parametrize("point", POINTS)
def test_report_on_a_full_disk_is_one_line_and_keeps_the_old_page(
    tmp_path, monkeypatch, capsys, point
):
    run = tmp_path / "run"
    assert main(["eval", TTT, "--episodes", "2", "--no-progress", "--output-dir", str(run)]) == 0
    page = tmp_path / "r.html"
    page.write_text("<p>old report</p>")
    capsys.readouterr()
    full_disk_at(monkeypatch, point)
    code = main(["report", str(run), "--output", str(page)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("textgym: error: ") and "No space left" in err, err
    assert page.read_text() == "<p>old report</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "run"]
    assert json.loads((run / "summary.json").read_text())["episodes"] == 2


@pytest.mark.parametrize("leftover", [False, True])
def test_overwrite_never_deletes_a_user_folder_named_like_the_trash(tmp_path, leftover):
    from textgym.cli.outputs import clear_run_dir
    from textgym.errors import UsageError

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}\n")
    trash = out / ".textgym-overwrite.tmp"
    trash.mkdir()
    (trash / "photo.jpg").write_bytes(b"jpeg")
    if leftover:  # what a killed --overwrite leaves is textgym's, and deleted
        (trash / ".textgym-trash").touch()
        clear_run_dir(out, "--output-dir")
        assert list(out.iterdir()) == []
        return
    with pytest.raises(UsageError, match="did not write"):
        clear_run_dir(out, "--output-dir")
    assert (trash / "photo.jpg").read_bytes() == b"jpeg" and (out / "run.json").exists()
