"""Bounded checkpoints and training-run safety.

A run keeps at most ``save_total_limit`` checkpoints, only the newest with optimizer state; a
save refused for lack of disk leaves the last checkpoint loadable; a Ctrl-C saves the last
completed step (exit 130) and ``--resume`` then reaches the weights of an uninterrupted run;
every damaged checkpoint file is one ``textgym: error:`` line; files get the user's umask.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from textgym.algos import grpo, grpo_rollouts, grpo_run, sft  # noqa: E402
from textgym.algos.checkpoint_layout import OPTIMIZER_STATE, CheckpointError  # noqa: E402
from textgym.algos.resume import load_checkpoint  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.results import default_file_mode, write_json  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

from .._runs import train_argv  # noqa: E402
from .test_grpo import small  # noqa: E402

pytestmark = pytest.mark.llm

#: ``small()``'s settings as ``textgym train`` options (the resume check compares them).
TRAIN_ARGS = train_argv(learning_rate="1e-3", progress=False)
RECORD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def checkpoints(run: Path) -> list[str]:
    return sorted(p.name for p in run.glob("checkpoint-*"))


def load_into_tiny(checkpoint: Path) -> dict:
    model, _ = build_tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return load_checkpoint(checkpoint, model=model, optimizer=optimizer, scheduler=scheduler)


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a)), load_file(str(b))
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def error_line(err: str) -> str:
    """The one line of stderr, which must be a ``textgym: error:`` line (no traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    return lines[0]


# ------------------------------------------------------------------ bounded checkpoints


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """A 3-step run saved every step with ``save_total_limit`` 2: ``tmp / "run"``."""
    tmp = tmp_path_factory.mktemp("three")
    grpo.train(small(tmp, steps=3, save_every=1, save_total_limit=2))
    return tmp


def test_save_total_limit_keeps_two_checkpoints_only_the_newest_with_optimizer(three_steps):
    tmp_path, run = three_steps, three_steps / "run"
    assert checkpoints(run) == ["checkpoint-2", "checkpoint-3"]
    assert not (run / "checkpoint-2" / OPTIMIZER_STATE).exists()
    assert (run / "checkpoint-3" / OPTIMIZER_STATE).exists()
    assert not [p for p in run.iterdir() if p.name.startswith(".checkpoint-")]  # no scratch left
    # Files get the user's umask, not safetensors' / mkstemp's 0600.
    for name in ("model.safetensors", "trainer_state.pt", OPTIMIZER_STATE):
        assert (run / "checkpoint-3" / name).stat().st_mode & 0o777 == default_file_mode(), name
    write_json(run / "summary.json", {"x": 1})
    assert (run / "summary.json").stat().st_mode & 0o777 == default_file_mode()
    # An older checkpoint without optimizer state is refused by name; the newest resumes.
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        load_into_tiny(run / "checkpoint-2")
    grpo.train(small(tmp_path, steps=4, save_every=1, save_total_limit=2, resume=True))
    assert checkpoints(run) == ["checkpoint-3", "checkpoint-4"]
    assert load_into_tiny(run / "checkpoint-4")["step"] == 4


def test_a_save_refused_for_lack_of_disk_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    saves = []
    real = shutil.disk_usage

    def disk_usage(path):
        saves.append(path)
        usage = real(path)
        # The check before the first step and the first save find room; the second a full disk.
        free = usage.free if len(saves) <= 2 else 1000
        return namedtuple("usage", "total used free")(usage.total, usage.used, free)

    monkeypatch.setattr("textgym.algos.checkpoints.shutil.disk_usage", disk_usage)
    run = tmp_path / "run"
    code = main([*TRAIN_ARGS, "--steps", "3", "--save-every", "1", "--output-dir", str(run)])
    line = error_line(capsys.readouterr().err)
    assert code == 1
    assert f"not enough free disk in {run} to save checkpoint-2" in line
    assert "1,000 free" in line and "checkpoint-1 is the last good checkpoint" in line
    assert checkpoints(run) == ["checkpoint-1"]
    assert not [p for p in run.iterdir() if p.name.startswith(".checkpoint-")]
    assert load_into_tiny(run / "checkpoint-1")["step"] == 1


def test_a_failing_evaluation_never_costs_the_save(tmp_path, monkeypatch):
    evaluate, calls = grpo_rollouts.evaluate, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the evaluation after step 1 (the first is before any step)
            raise RuntimeError("evaluation broke")
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(grpo_run, "evaluate", failing)
    with pytest.raises(RuntimeError, match="evaluation broke"):
        grpo.train(small(tmp_path, steps=3, eval_every=1, save_every=0))
    assert checkpoints(tmp_path / "run") == ["checkpoint-1"]  # saved though save_every is 0
    assert load_into_tiny(tmp_path / "run" / "checkpoint-1")["step"] == 1


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--save-every", "-1", "save_every: expected an int >= 0"),
        ("--eval-every", "-3", "eval_every: expected an int >= 0"),
        ("--save-total-limit", "0", "save_total_limit: expected None"),
    ],
)
def test_negative_intervals_are_refused_in_one_line(tmp_path, capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*TRAIN_ARGS, option, value, "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert message in error_line(capsys.readouterr().err)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(RECORD) + "\n")
    with pytest.raises(SystemExit):
        main(["sft", "--data", str(data), "--model", "tiny", option, value])
    if option != "--eval-every":  # sft has no evaluation
        assert message in error_line(capsys.readouterr().err)


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_resume_with_nothing_to_resume_is_refused(tmp_path, capsys, state):
    run = tmp_path / "run"
    if state == "empty":
        run.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main([*TRAIN_ARGS, "--steps", "2", "--resume", "--output-dir", str(run)])
    assert exit_info.value.code == 2
    assert "nothing to resume" in error_line(capsys.readouterr().err)
    assert not (run / "metrics.jsonl").exists()


# ------------------------------------------------------------------ damaged checkpoints


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    """A one-step ``textgym train`` run (checkpoint-1) to copy and damage."""
    run = tmp_path_factory.mktemp("good") / "run"
    assert main([*TRAIN_ARGS, "--steps", "1", "--output-dir", str(run)]) == 0
    return run


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _bad_header(path: Path) -> None:
    path.write_bytes(b"\xff" * 8 + b"not a header" + path.read_bytes()[20:])


def _reshape(path: Path) -> None:
    weights = load_file(str(path))
    name = next(n for n in weights if n.endswith("mlp.down_proj.weight"))
    weights[name] = torch.zeros(3, 5)
    save_file(weights, str(path), metadata={"format": "pt"})


def _nan(path: Path) -> None:
    weights = load_file(str(path))
    name = next(iter(weights))
    weights[name][0] = math.nan
    save_file(weights, str(path), metadata={"format": "pt"})


def _keyless(path: Path) -> None:
    torch.save({"step": 1}, path)


class _Payload:
    def __reduce__(self):
        return (print, ("unpickled",))


def _pickled(path: Path) -> None:
    import pickle

    path.write_bytes(pickle.dumps({"step": 1, "rng": {}, "extra": {"x": _Payload()}}))


@pytest.mark.parametrize(
    ("file", "damage", "message"),
    [
        ("model.safetensors", _truncate, "model.safetensors does not read"),
        ("model.safetensors", _bad_header, "model.safetensors does not read"),
        ("model.safetensors", _reshape, "holds weights of another shape"),
        ("model.safetensors", _nan, "holds NaN or inf"),
        ("trainer_state.pt", _keyless, "trainer_state.pt lacks keys"),
        ("trainer_state.pt", _truncate, "trainer_state.pt does not load"),
        ("trainer_state.pt", _pickled, "holds objects other than tensors"),
        (OPTIMIZER_STATE, _truncate, "optimizer.pt does not load"),
        (OPTIMIZER_STATE, Path.unlink, "holds no optimizer state"),
    ],
)
def test_a_damaged_checkpoint_is_one_error_line(
    tmp_path, capsys, one_step_run, file, damage, message
):
    run = tmp_path / "run"
    shutil.copytree(one_step_run, run)
    damage(run / "checkpoint-1" / file)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*TRAIN_ARGS, "--steps", "2", "--resume", "--output-dir", str(run)])
    assert exit_info.value.code == 2
    line = error_line(capsys.readouterr().err)
    assert message in line and str(run / "checkpoint-1") in line
    assert checkpoints(run) == ["checkpoint-1"]  # no step ran


# ------------------------------------------------------------------ Ctrl-C


def _interrupted(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``textgym argv`` in a subprocess, send it SIGINT once it printed its first progress
    line, and return its exit code and stderr."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    # This process's thread count, so the CLI's CPU sharing (one thread per free core on a busy
    # machine) cannot change the float sums that the same-weights checks compare.
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    process = subprocess.Popen(
        [sys.executable, "-m", "textgym.cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if line.startswith("step 1/"):
                process.send_signal(signal.SIGINT)
                break
        lines += process.stderr.readlines()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return code, "".join(lines)


def _saved_step(err: str) -> int:
    last = err.strip().splitlines()[-1]
    assert last.startswith("textgym: interrupted after step "), err
    assert "Traceback" not in err
    return int(last.split("after step ")[1].split(";")[0])


@pytest.mark.subprocess
def test_ctrl_c_in_train_saves_the_last_step_and_resume_reaches_the_same_weights(
    tmp_path, three_steps
):
    run = tmp_path / "run"
    shown = [a for a in TRAIN_ARGS if a != "--no-progress"]  # the progress line says when
    argv = [*shown, "--steps", "50", "--output-dir", str(run)]
    code, err = _interrupted(argv, tmp_path)
    assert code == 130, err
    step = _saved_step(err)
    assert 1 <= step < 50 and checkpoints(run) == [f"checkpoint-{step}"]
    assert f"saved {run / f'checkpoint-{step}'}" in err
    assert load_into_tiny(run / f"checkpoint-{step}")["step"] == step
    # Resumed, it reaches the weights of an uninterrupted run with the same seed (the 3-step
    # run when the Ctrl-C came before step 3, as it does unless the machine is very slow).
    target = max(3, step + 1)
    grpo.train(small(tmp_path, steps=target, resume=True))
    whole = three_steps
    if target > 3:
        whole = tmp_path / "whole"
        grpo.train(small(whole, steps=target))
    final = f"checkpoint-{target}/model.safetensors"
    assert_same_weights(run / final, whole / "run" / final)


@pytest.mark.subprocess
def test_ctrl_c_in_sft_saves_the_last_step_and_resume_reaches_the_same_weights(tmp_path):
    data = tmp_path / "d.jsonl"
    records = [
        {
            "messages": [
                {"role": "user", "content": f"say {i}"},
                {"role": "assistant", "content": f"{i}"},
            ]
        }
        for i in range(60)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = ["--data", str(data), "--model", "tiny", "--batch-size", "2", "--device", "cpu"]
    settings += ["--no-tensorboard", "--learning-rate", "1e-3"]
    run = tmp_path / "run"
    code, err = _interrupted(["sft", *settings, "--output-dir", str(run)], tmp_path)
    assert code == 130, err
    step = _saved_step(err)
    assert 1 <= step < 30 and checkpoints(run) == [f"checkpoint-{step}"]
    assert not (run / "model.safetensors").exists()  # not finished
    config = dict(data=str(data), model="tiny", batch_size=2, device="cpu", tensorboard=False)
    config["learning_rate"] = 1e-3
    sft.train(SFTConfig(**config, output_dir=str(run), resume=True, progress=False))
    sft.train(SFTConfig(**config, output_dir=str(tmp_path / "whole"), progress=False))
    assert_same_weights(run / "model.safetensors", tmp_path / "whole" / "model.safetensors")
