"""Output safety: ``--overwrite`` removes only what textgym wrote, and refuses a folder holding
anything else (or anything write-protected) before it deletes a thing; an output's lock is the
same through every path that reaches it (symlink, hard link, the folder of a running run); a
full disk leaves whole JSONL records and one error line; a device, a FIFO or a dangling symlink
as the output is refused in one line.
"""

import contextlib
import errno
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import textgym.results
from textgym.cli import main
from textgym.cli.outputs import claim_dir, claim_file, clear_run_dir
from textgym.errors import UsageError
from textgym.results import open_jsonl

TTT = "textgym/TicTacToe-v0"
FAST = ["--episodes", "4", "--no-progress"]


def one_error(capsys, argv, code=2):
    """Run ``textgym argv``; return its one ``textgym: error:`` line (exit ``code``)."""
    try:
        got = main(argv)
    except SystemExit as exc:
        got = exc.code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert got == code and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    return lines[0]


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: file bytes, ``"dir"``, or ``"-> target"`` for a symlink."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = path.read_bytes()
    return found


def chat_data(tmp_path: Path) -> Path:
    data = tmp_path / "good.jsonl"
    record = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    }
    data.write_text((json.dumps(record) + "\n") * 2)
    return data


def sft_argv(data: Path, out: Path) -> list[str]:
    return ["sft", "--model", "tiny", "--data", str(data), "--epochs", "1", "--device", "cpu"] + [
        "--output-dir",
        str(out),
        "--overwrite",
        "--no-progress",
    ]


def fake_run(out: Path) -> None:
    """What ``textgym sft`` leaves in ``out`` (names as a real run writes them)."""
    out.mkdir(parents=True)
    for name in ("run.json", "sft_summary.json", "config.json", "generation_config.json"):
        (out / name).write_text("{}\n")
    for name in ("metrics.jsonl", "tokenizer.json", "tokenizer_config.json"):
        (out / name).write_text("{}\n")
    (out / "model.safetensors").write_bytes(b"\0" * 64)
    (out / "chat_template.jinja").write_text("{{ messages }}")
    (out / "plots").mkdir()
    (out / "plots" / "loss.png").write_bytes(b"\x89PNG")
    (out / "tensorboard").mkdir()
    (out / "tensorboard" / "events.out.tfevents.1.host.2.0").write_bytes(b"tb")
    ckpt = out / "checkpoint-1"
    ckpt.mkdir()
    for name in ("config.json", "trainer_config.json", "tokenizer.json"):
        (ckpt / name).write_text("{}\n")
    for name in ("model.safetensors", "trainer_state.pt", "optimizer.pt"):
        (ckpt / name).write_bytes(b"\0" * 8)


# ----------------------------------------------------------------------------- 1. --overwrite


def test_sft_overwrite_refuses_a_folder_with_a_foreign_folder(tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "main.py").write_text("x\n")
    (proj / "summary.json").write_text("{}")
    before = tree(proj)
    line = one_error(capsys, sft_argv(chat_data(tmp_path), proj))
    assert "src" in line and "--overwrite" in line, line
    assert tree(proj) == before


def test_sft_overwrite_refuses_a_foreign_file_beside_a_run(tmp_path, capsys):
    proj = tmp_path / "proj"
    fake_run(proj)
    (proj / "notes.txt").write_text("mine\n")
    before = tree(proj)
    line = one_error(capsys, sft_argv(chat_data(tmp_path), proj))
    assert "notes.txt" in line, line
    assert tree(proj) == before


def test_overwrite_refuses_a_foreign_file_inside_a_checkpoint(tmp_path, capsys):
    proj = tmp_path / "proj"
    fake_run(proj)
    (proj / "checkpoint-1" / "my_analysis.ipynb").write_text("{}")
    before = tree(proj)
    line = one_error(capsys, sft_argv(chat_data(tmp_path), proj))
    assert "my_analysis.ipynb" in line, line
    assert tree(proj) == before


def test_overwrite_refuses_a_symlink_and_leaves_it_and_its_target(tmp_path, capsys):
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    fake_run(proj)
    elsewhere.mkdir()
    (elsewhere / "data.csv").write_text("1,2\n")
    (proj / "data").symlink_to(elsewhere)
    before = tree(proj)
    line = one_error(capsys, sft_argv(chat_data(tmp_path), proj))
    assert "data" in line and "symbolic link" in line, line
    assert tree(proj) == before and (elsewhere / "data.csv").read_text() == "1,2\n"


def test_train_overwrite_refuses_a_foreign_file(tmp_path, capsys):
    pytest.importorskip("torch")
    proj = tmp_path / "proj"
    fake_run(proj)
    (proj / "train.py").write_text("print()\n")
    before = tree(proj)
    argv = ["train", TTT, "--device", "cpu", "--output-dir", str(proj), "--overwrite"]
    line = one_error(capsys, argv)
    assert "train.py" in line, line
    assert tree(proj) == before


def test_eval_overwrite_refuses_read_only_results_and_keeps_them(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["eval", TTT, *FAST, "--output-dir", str(out)]) == 0
    capsys.readouterr()
    for path in out.iterdir():
        path.chmod(0o444)
    before = tree(out)
    try:
        line = one_error(capsys, ["eval", TTT, *FAST, "--output-dir", str(out), "--overwrite"])
        assert "read-only" in line, line
        assert tree(out) == before
    finally:
        for path in out.iterdir():
            path.chmod(0o644)


def test_sft_overwrite_refuses_a_write_protected_checkpoint_before_deleting(tmp_path, capsys):
    proj = tmp_path / "proj"
    fake_run(proj)
    (proj / "checkpoint-1").chmod(0o555)
    before = tree(proj)
    try:
        line = one_error(capsys, sft_argv(chat_data(tmp_path), proj))
        assert "checkpoint-1" in line and "read-only" in line, line
        assert tree(proj) == before
    finally:
        (proj / "checkpoint-1").chmod(0o755)


@contextlib.contextmanager
def immutable(path: Path):
    """``chattr +i path`` for the block (a file even root cannot delete); skip without it."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr")
def test_overwrite_with_an_undeletable_file_deletes_nothing(tmp_path, capsys):
    proj = tmp_path / "proj"
    fake_run(proj)
    before = tree(proj)
    with immutable(proj / "run.json"):
        one_error(capsys, sft_argv(chat_data(tmp_path), proj))
        assert tree(proj) == before


def test_a_delete_failing_half_way_puts_everything_back(tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    fake_run(proj)
    before = tree(proj)
    calls = {"n": 0}
    real_rename = os.rename

    def failing_rename(src, dst, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError(errno.EIO, "Input/output error", str(src))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(UsageError, match="nothing was deleted"):
        clear_run_dir(proj, "--output-dir")
    monkeypatch.undo()
    assert tree(proj) == before


def test_clear_run_dir_removes_a_whole_textgym_run(tmp_path):
    proj = tmp_path / "proj"
    fake_run(proj)
    (proj / ".checkpoint-2.tmp").mkdir()
    (proj / ".checkpoint-2.tmp" / "config.json").write_text("{}")
    clear_run_dir(proj, "--output-dir")
    assert list(proj.iterdir()) == []


@pytest.mark.slow
def test_sft_overwrite_replaces_its_own_run(tmp_path, capsys):
    pytest.importorskip("torch")
    data, proj = chat_data(tmp_path), tmp_path / "proj"
    assert main(sft_argv(data, proj)) == 0
    (proj / "run.json").write_text("{}")  # the first run's record, to be replaced
    assert main(sft_argv(data, proj)) == 0
    assert json.loads((proj / "run.json").read_text()) != {}


# ----------------------------------------------------------------------------- 2. locks


def collect_argv(out: Path, *extra: str) -> list[str]:
    return ["collect", TTT, *FAST, "--output", str(out), *extra]


def test_a_symlink_to_a_held_output_file_is_refused(tmp_path, capsys):
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(real)
    with claim_file(real, "--output", overwrite=False):
        line = one_error(capsys, collect_argv(link))
        assert "in use by another run" in line, line
    assert not real.exists() or real.read_bytes() == b""


def test_a_held_output_file_refuses_the_path_of_its_symlink_target(tmp_path, capsys):
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(real)
    with claim_file(link, "--output", overwrite=False):
        line = one_error(capsys, collect_argv(real))
        assert "in use by another run" in line, line


def test_a_hard_link_to_a_held_output_file_is_refused(tmp_path, capsys):
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"")
    other = tmp_path / "sub" / "hard.jsonl"
    other.parent.mkdir()
    os.link(real, other)
    near = tmp_path / "hard.jsonl"
    os.link(real, near)
    with claim_file(real, "--output", overwrite=False):
        for alias in (near, other):
            line = one_error(capsys, collect_argv(alias, "--overwrite"))
            assert "in use by another run" in line, line
    assert real.read_bytes() == b""


def test_collect_into_the_folder_of_a_running_eval_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    with claim_dir(run, "--output-dir", overwrite=False):
        line = one_error(capsys, collect_argv(run / "trajectories.jsonl"))
        assert "in use by another run" in line, line
        assert not (run / "trajectories.jsonl").exists()


def test_a_symlink_to_a_held_output_dir_is_refused(tmp_path, capsys):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    with claim_dir(real, "--output-dir", overwrite=False):
        line = one_error(capsys, ["eval", TTT, *FAST, "--output-dir", str(link)])
        assert "in use by another run" in line, line


# ----------------------------------------------------------------------------- 4. full disk


class FullDisk(io.RawIOBase):
    """A raw file that takes ``room`` bytes, then fails as a full disk does: a short write,
    then ``ENOSPC``."""

    def __init__(self, path, room: int):
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115
        self.room = room

    def writable(self):
        return True

    def fileno(self):
        return self._file.fileno()

    def seekable(self):
        return True

    def seek(self, *args):
        return self._file.seek(*args)

    def tell(self):
        return self._file.tell()

    def truncate(self, size=None):
        return self._file.truncate(size)

    def write(self, data):
        data = bytes(data)
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = self._file.write(data[: self.room])
        self.room -= taken
        return taken

    def close(self):
        self._file.close()
        super().close()


def full_disk_open(room: int, name: str):
    """A stand-in for ``open`` in :mod:`textgym.results` that gives the JSONL file ``name``
    (opened for writing) only ``room`` bytes."""
    real_open = open

    def fake(path, mode="r", buffering=-1, *args, **kwargs):
        if Path(path).name == name and "w" in mode and "b" in mode:
            raw = FullDisk(path, room)
            return raw if buffering == 0 else io.BufferedWriter(raw)
        return real_open(path, mode, buffering, *args, **kwargs)

    return fake


def whole_records(path: Path) -> list:
    text = path.read_bytes().decode("utf-8")
    assert text == "" or text.endswith("\n"), text[-80:]
    return [json.loads(line) for line in text.splitlines()]


def test_jsonl_writer_keeps_whole_records_on_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    record = json.dumps({"episode": 0, "text": "x" * 40})
    monkeypatch.setattr(
        textgym.results, "open", full_disk_open(len(record) * 3, "out.jsonl"), raising=False
    )
    with pytest.raises(OSError) as raised, open_jsonl(path) as writer:
        for _ in range(10):
            writer.write(record)
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.__context__ is None and raised.value.__cause__ is None  # one error
    assert writer.count == 2
    assert len(whole_records(path)) == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_jsonl_writer_on_dev_full_fails_once():
    with pytest.raises(OSError) as raised, open_jsonl(Path("/dev/full")) as writer:
        writer.write("{}")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.__context__ is None and writer.count == 0


def test_collect_on_a_full_disk_keeps_whole_records_and_says_so(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sft.jsonl"
    monkeypatch.setattr(textgym.results, "open", full_disk_open(3000, "sft.jsonl"), raising=False)
    line = one_error(
        capsys, ["collect", TTT, "--episodes", "12", "--no-progress", "--output", str(out)], code=1
    )
    assert "No space left on device" in line, line
    records = whole_records(out)
    assert f"{len(records)} whole records" in line, line


def test_eval_on_a_full_disk_keeps_whole_records_and_writes_the_summary(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    monkeypatch.setattr(
        textgym.results, "open", full_disk_open(6000, "trajectories.jsonl"), raising=False
    )
    line = one_error(
        capsys, ["eval", TTT, "--episodes", "12", "--no-progress", "--output-dir", str(out)], code=1
    )
    assert "No space left on device" in line, line
    records = whole_records(out / "trajectories.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["episodes"] == len(records) < 12


# ----------------------------------------------------------------------------- 10. odd outputs


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_collect_to_dev_full_is_one_line(capsys):
    line = one_error(capsys, collect_argv(Path("/dev/full")))
    assert "/dev/full" in line and "regular file" in line, line
    assert not Path("/dev/.full.lock").exists()


@pytest.mark.subprocess
def test_collect_to_a_fifo_is_refused_and_does_not_hang(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "textgym.cli", *collect_argv(fifo)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("collect --output FIFO hung")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "FIFO" in done.stderr and "Traceback" not in done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_dangling_symlink_output_dir_is_refused_naming_its_target(tmp_path, capsys):
    link, target = tmp_path / "out", tmp_path / "gone" / "run"
    link.symlink_to(target)
    line = one_error(capsys, ["eval", TTT, *FAST, "--output-dir", str(link)])
    assert "symbolic link" in line and str(target) in line and "File exists" not in line, line
