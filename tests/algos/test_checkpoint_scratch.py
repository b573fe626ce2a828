"""A checkpoint's scratch folders: a leftover of a killed save, marked as textgym's, is removed
by the next save; a user's folder of the same hidden name is never deleted (one line, nothing
touched); the saved checkpoint carries no mark."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from textgym.algos.checkpoints import SCRATCH_MARK  # noqa: E402
from textgym.cli import main  # noqa: E402

from .._runs import train_argv  # noqa: E402

pytestmark = pytest.mark.llm


def test_a_marked_leftover_goes_and_the_checkpoint_keeps_no_mark(tmp_path):
    out = tmp_path / "run"
    assert main(train_argv(steps=1, output_dir=out, progress=False)) == 0
    leftover = out / ".checkpoint-2.tmp"  # a save killed half way
    leftover.mkdir()
    (leftover / SCRATCH_MARK).touch()
    (leftover / "model.safetensors").write_bytes(b"half")
    (out / ".checkpoint-9.tmp").mkdir()  # killed before its mark: empty
    assert main([*train_argv(steps=2, output_dir=out, progress=False), "--resume"]) == 0
    assert not leftover.exists() and not (out / ".checkpoint-9.tmp").exists()
    for step in (1, 2):
        assert not (out / f"checkpoint-{step}" / SCRATCH_MARK).exists()
    assert (out / "checkpoint-2" / "trainer_config.json").is_file()


def test_a_users_folder_of_a_scratch_name_is_never_deleted(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(steps=1, output_dir=out, progress=False)) == 0
    mine = out / ".checkpoint-2.tmp"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*train_argv(steps=2, output_dir=out, progress=False), "--resume"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not textgym's scratch" in err[0], err
    assert (mine / "notes.txt").read_text() == "mine"
