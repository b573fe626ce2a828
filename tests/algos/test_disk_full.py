"""Issue 52 items 2 and 6: a full disk anywhere in ``train``/``sft`` is one ``textgym: error:``
line, exit 1, and nothing half-written is left looking complete; a resumed run never appends
into a hard link (the other name keeps its bytes).

The failures are made where the library meets the disk: a write that takes half a record and
raises ``ENOSPC``, ``torch.save``'s ``RuntimeError`` raised during the ``OSError``,
``safetensors``' ``SafetensorError`` with its ``(os error 28)``, TensorBoard's writer failing to
open its event file.
"""

import errno
import importlib.machinery
import json
import os
import sys
import types

import pytest
import torch
from safetensors import SafetensorError

import textgym.results
from textgym.algos.metrics import MetricsLogger
from textgym.algos.train_episodes import TrainEpisodesLog
from textgym.cli import main
from textgym.errors import OutputWriteError
from textgym.results import os_error_behind, saving_into

from .._runs import train_argv

FULL = "No space left on device"


def _full(number: int = errno.ENOSPC) -> OSError:
    return OSError(number, os.strerror(number))


def _torch_full() -> RuntimeError:
    try:
        raise _full()
    except OSError:  # torch's writer raises its RuntimeError while the OSError is handled
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704")
        except RuntimeError as exc:
            return exc


WRITE_ERRORS = {
    "ENOSPC": lambda: _full(),
    "EDQUOT": lambda: _full(errno.EDQUOT),
    "EROFS": lambda: _full(errno.EROFS),
    "torch.save": _torch_full,
    "safetensors": lambda: SafetensorError(
        f"Error while serializing: I/O error: {FULL} (os error 28)"
    ),
}


@pytest.mark.parametrize("name", WRITE_ERRORS)
def test_a_write_error_behind_a_library_error_is_one_line_and_removes_the_scratch(tmp_path, name):
    scratch, target = tmp_path / ".checkpoint-3.tmp", tmp_path / "checkpoint-3"
    with pytest.raises(OutputWriteError) as raised, saving_into(scratch, target, "keeps x"):
        scratch.mkdir()
        (scratch / "model.safetensors").write_bytes(b"half")
        raise WRITE_ERRORS[name]()
    message = str(raised.value)
    assert "\n" not in message and str(target) in message and "keeps x" in message
    assert raised.value.errno == os_error_behind(WRITE_ERRORS[name]()).errno
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "bug", [RuntimeError("unexpected pos"), ValueError("x (os error 28)"), FloatingPointError()]
)
def test_an_error_that_is_not_a_write_goes_on_as_it_was(tmp_path, bug):
    scratch = tmp_path / ".model.tmp"
    with pytest.raises(type(bug)) as raised, saving_into(scratch, tmp_path, "k"):
        scratch.mkdir()
        raise bug
    assert raised.value is bug and not scratch.exists()


class _HalfThenFull:
    """A file whose writes take half the data and then find the disk full."""

    def __init__(self, fh):
        self.fh = fh

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def write(self, data):
        self.fh.write(bytes(data[: len(data) // 2]))
        raise _full()


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_metrics_row_the_disk_has_no_room_for_is_cut_off(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(0, {"loss": 1.0})
        logger._file._fh = _HalfThenFull(logger._file._fh)
        with pytest.raises(OutputWriteError, match=FULL):
            logger.log(1, {"loss": 2.0})
    assert _rows(tmp_path / "metrics.jsonl") == [{"step": 0, "stage": "train", "loss": 1.0}]


def test_a_train_episode_the_disk_has_no_room_for_is_cut_off(tmp_path, monkeypatch):
    log = TrainEpisodesLog(tmp_path, groups=1)
    log.write([{"step": 1, "a": 1}])
    real = textgym.results.JsonlWriter.append.__func__

    def full_append(cls, path):
        writer = real(cls, path)
        writer._fh = _HalfThenFull(writer._fh)
        return writer

    monkeypatch.setattr(textgym.results.JsonlWriter, "append", classmethod(full_append))
    with pytest.raises(OutputWriteError, match=FULL):
        log.write([{"step": 2, "a": "x" * 100}])
    assert _rows(log.path) == [{"step": 1, "a": 1}]


@pytest.mark.parametrize("target", ["metrics", "train_episodes"])
def test_a_resume_never_appends_into_a_hard_link(tmp_path, target):
    run = tmp_path / "run"
    run.mkdir()
    path = run / f"{target}.jsonl"
    path.write_text('{"step": 0, "stage": "train"}\n')
    user = tmp_path / "mine.jsonl"
    os.link(path, user)
    before = user.read_bytes()
    if target == "metrics":
        with MetricsLogger(run, tensorboard=False, resume=True) as logger:
            logger.log(1, {"loss": 1.0})
    else:
        TrainEpisodesLog(run, groups=1).write([{"step": 1}])
    assert user.read_bytes() == before and os.stat(user).st_nlink == 1
    assert len(path.read_text().splitlines()) == 2


# -- through textgym.cli.main: one line, exit 1, nothing half-written looking complete --------

TINY = dict(steps=1, progress=False, groups_per_step=1, group_size=2, rollout_batch_size=2)
TINY |= dict(micro_batch_size=2, max_new_tokens=4, eval_episodes=1, save_every=1)


def _fake_tensorboard(monkeypatch):
    """TensorBoard's ``SummaryWriter`` as on a full disk (it makes its event file at once)."""

    def writer(**_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "tensorboard/events.out.tfevents")

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = writer
    package = types.ModuleType("tensorboard")
    package.__spec__ = importlib.machinery.ModuleSpec("tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboard", package)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)


def _fail_torch_save(monkeypatch):
    real = torch.save

    def save(value, fh, *args, **kwargs):
        real(value, fh, *args, **kwargs)
        fh.truncate(7)
        raise _torch_full()

    monkeypatch.setattr(torch, "save", save)


def _fail_safetensors(monkeypatch):
    import transformers.modeling_utils

    def save(_state, filename, **_):
        with open(filename, "wb") as fh:
            fh.write(b"half")
        raise WRITE_ERRORS["safetensors"]()

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", save)


def _fail_replace_of(name):
    def patch(monkeypatch):
        real = textgym.results.tempfile.mkstemp

        def mkstemp(*args, prefix="", **kwargs):
            if prefix.startswith(f".{name}."):
                raise _full()
            return real(*args, prefix=prefix, **kwargs)

        monkeypatch.setattr(textgym.results.tempfile, "mkstemp", mkstemp)

    return patch


def _fail_append_of(name):
    def patch(monkeypatch):
        real = textgym.results.JsonlWriter.append.__func__

        def append(cls, path):
            writer = real(cls, path)
            if path.name == name:
                writer._fh = _HalfThenFull(writer._fh)
            return writer

        monkeypatch.setattr(textgym.results.JsonlWriter, "append", classmethod(append))

    return patch


TRAIN_POINTS = {
    "tensorboard": _fake_tensorboard,
    "metrics.jsonl": _fail_append_of("metrics.jsonl"),
    "train_episodes.jsonl": _fail_append_of("train_episodes.jsonl"),
    "checkpoint torch.save": _fail_torch_save,
    "checkpoint safetensors": _fail_safetensors,
    "final_eval.json": _fail_replace_of("final_eval.json"),
}


def _one_error_line(capsys) -> str:
    text = capsys.readouterr().err  # sft's progress lines are there too
    err = [line for line in text.splitlines() if line.startswith("textgym:")]
    assert len(err) == 1 and err[0].startswith("textgym: error: "), text
    assert "Traceback" not in text, text
    assert FULL in err[0] or "Read-only" in err[0], err
    return err[0]


def _nothing_half_written(run):
    left = sorted(p.name for p in run.rglob("*") if p.name.endswith(".tmp"))
    assert left == [], left
    for name in ("metrics.jsonl", "train_episodes.jsonl"):
        if (run / name).exists():
            _rows(run / name)  # whole JSON lines only
    assert not (run / "final_eval.json").exists()
    for checkpoint in run.glob("checkpoint-*"):  # a checkpoint there is a whole one
        assert (checkpoint / "trainer_state.pt").stat().st_size > 1000
        assert (checkpoint / "model.safetensors").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.parametrize("point", TRAIN_POINTS)
def test_train_on_a_full_disk_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys, point):
    run = tmp_path / "run"
    options = TINY | ({"tensorboard": True} if point == "tensorboard" else {})
    TRAIN_POINTS[point](monkeypatch)
    code = main(train_argv(output_dir=run, **options))
    monkeypatch.undo()
    _one_error_line(capsys)
    assert code == 1
    _nothing_half_written(run)


SFT_POINTS = {
    "metrics.jsonl": _fail_append_of("metrics.jsonl"),
    "model safetensors": _fail_safetensors,
    "sft_summary.json": _fail_replace_of("sft_summary.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", SFT_POINTS)
def test_sft_on_a_full_disk_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys, point):
    data = tmp_path / "d.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    data.write_text(json.dumps({"messages": turns}) + "\n")
    run = tmp_path / "run"
    SFT_POINTS[point](monkeypatch)
    argv = ["sft", "--data", str(data), "--model", "tiny", "--batch-size", "1", "--device", "cpu"]
    code = main([*argv, "--no-tensorboard", "--log-every", "1", "--output-dir", str(run)])
    monkeypatch.undo()
    _one_error_line(capsys)
    assert code == 1
    _nothing_half_written(run)
    assert not (run / "sft_summary.json").exists()  # written last: the run is not finished
    if point != "sft_summary.json":  # saved whole before the summary, or not at all
        assert not (run / "model.safetensors").exists()
