"""Training runs lose nothing.

- SIGTERM (how ``kill``, SLURM and Kubernetes stop a job) is a Ctrl-C: the last completed step
  is saved even with ``save_every`` 0, the lock is released, exit 143 with one line, and
  ``--resume`` continues; a run stopped before its first checkpoint resumes from scratch.
- The free disk is checked before the first step, from the real size of a checkpoint (a small
  margin, not a fixed 64 MiB), and a final save the disk has no room for keeps the weights.
- Resume refuses in one line what it cannot continue (fewer epochs, an optimizer state of
  other shapes, a config nested too deeply), and finishes what it can.
- Returns near the largest float train (float64 advantages); an advantage beyond the loss's
  float32 is refused with advice one can follow.
"""

from __future__ import annotations

import json
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

from textgym.algos.checkpoint_layout import OPTIMIZER_STATE  # noqa: E402
from textgym.algos.checkpoints import checkpoint_bytes, with_margin  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.cli.output_locks import DIR_LOCK  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

from ..cli.test_cli_reliability import _rewarding  # noqa: E402

pytestmark = pytest.mark.llm

#: A ``textgym train`` run of about a second a step: the tiny model on GSM8K (one turn), one
#: group of two, four new tokens, one evaluation episode.
TRAIN = [
    "train", "textgym/GSM8K-v0", "--model", "tiny", "--device", "cpu", "--groups-per-step",
    "1", "--group-size", "2", "--rollout-batch-size", "2", "--micro-batch-size", "2",
    "--max-new-tokens", "4", "--eval-every", "0", "--eval-episodes", "1", "--no-tensorboard",
]  # fmt: skip


def sft_args(data: Path) -> list[str]:
    settings = ["sft", "--data", str(data), "--model", "tiny", "--batch-size", "2"]
    return [*settings, "--device", "cpu", "--no-tensorboard", "--no-progress"]


@pytest.fixture
def data(tmp_path) -> Path:
    """Eight short conversations: four SFT steps an epoch with ``--batch-size 2``."""
    path = tmp_path / "d.jsonl"
    records = [
        {"messages": [{"role": "user", "content": f"say {i}"}, {"role": "assistant", "content": f"{i}"}]}
        for i in range(8)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def checkpoints_in(run: Path) -> list[str]:
    return sorted(p.name for p in run.glob("checkpoint-*"))


def one_line(err: str, start: str = "textgym: error: ") -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith(start), err
    return lines[0]


def train_rows(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r.get("stage", "train") == "train"]


# ------------------------------------------------------------------ SIGTERM


def _terminated(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``textgym argv`` in a subprocess, send it SIGTERM once it printed its first step's
    progress line, and return its exit code and stderr."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
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
                process.send_signal(signal.SIGTERM)
                break
        lines += process.stderr.readlines()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return code, "".join(lines)


def _saved_step(err: str, run: Path) -> int:
    last = err.strip().splitlines()[-1]
    assert last.startswith("textgym: terminated (SIGTERM) after step "), err
    assert "Traceback" not in err and last.endswith("(continue with --resume)")
    step = int(last.split("after step ")[1].split(";")[0])
    assert f"saved {run / f'checkpoint-{step}'}" in last
    return step


@pytest.mark.subprocess
@pytest.mark.slow
def test_sigterm_in_train_saves_the_last_step_releases_the_lock_and_resumes(tmp_path):
    run = tmp_path / "run"
    code, err = _terminated([*TRAIN, "--steps", "50", "--output-dir", str(run)], tmp_path)
    assert code == 143, err  # 128 + SIGTERM, though save_every is 0
    step = _saved_step(err, run)
    assert 1 <= step < 50 and checkpoints_in(run) == [f"checkpoint-{step}"]
    assert (run / f"checkpoint-{step}" / OPTIMIZER_STATE).is_file()
    assert not (run / DIR_LOCK).exists()
    argv = [*TRAIN, "--steps", str(step + 1), "--output-dir", str(run), "--no-progress"]
    assert main([*argv, "--resume"]) == 0
    assert checkpoints_in(run)[-1] == f"checkpoint-{step + 1}"
    assert train_rows(run) == list(range(1, step + 2))
    assert not (run / DIR_LOCK).exists()


@pytest.mark.subprocess
@pytest.mark.slow
def test_sigterm_in_sft_saves_the_last_step_releases_the_lock_and_resumes(tmp_path, data):
    run = tmp_path / "run"
    shown = [a for a in sft_args(data) if a != "--no-progress"]  # the progress line says when
    code, err = _terminated([*shown, "--epochs", "100", "--output-dir", str(run)], tmp_path)
    assert code == 143, err
    step = _saved_step(err, run)
    assert checkpoints_in(run) == [f"checkpoint-{step}"] and not (run / DIR_LOCK).exists()
    epochs = -(-(step + 1) // 4)  # 4 steps an epoch: at least one step is left
    assert (
        main([*sft_args(data), "--epochs", str(epochs), "--output-dir", str(run), "--resume"]) == 0
    )
    summary = json.loads((run / "sft_summary.json").read_text())
    assert summary["steps"] == 4 * epochs and (run / "model.safetensors").is_file()
    assert not (run / DIR_LOCK).exists()


@pytest.fixture
def sigterm_fails_the_test():
    """A SIGTERM the code under test does not handle fails the test (instead of killing the
    test session, as its default action would)."""

    def unhandled(signum, frame):
        pytest.fail("SIGTERM was not handled by textgym", pytrace=False)

    previous = signal.signal(signal.SIGTERM, unhandled)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
@pytest.mark.usefixtures("sigterm_fails_the_test")
def test_sigterm_before_any_step_says_how_to_start_again(tmp_path, data, capsys, monkeypatch):
    """SIGTERM while the model loads: no checkpoint, the lock released, exit 143, and the
    command the line names works (it did not: "nothing to resume" / "not empty")."""
    import textgym.algos.sft as sft

    load = sft.load_trainable_model

    def load_then_sigterm(*args, **kwargs):
        loaded = load(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return loaded

    monkeypatch.setattr(sft, "load_trainable_model", load_then_sigterm)
    run = tmp_path / "run"
    argv = [*sft_args(data), "--output-dir", str(run)]
    assert main(argv) == 143
    line = one_line(capsys.readouterr().err, "textgym: terminated (SIGTERM) before the first")
    assert "with --resume starts the run again" in line
    assert not (run / DIR_LOCK).exists() and not checkpoints_in(run)
    monkeypatch.setattr(sft, "load_trainable_model", load)
    assert main([*argv, "--resume"]) == 0
    assert json.loads((run / "sft_summary.json").read_text())["steps"] == 4


def test_train_resumes_from_scratch_a_run_killed_before_its_first_checkpoint(tmp_path):
    """What a SIGKILL before the first save leaves: run.json, an empty metrics.jsonl."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    argv = [*TRAIN, "--steps", "1", "--output-dir", str(run), "--no-progress"]
    assert main([*argv, "--resume"]) == 0
    assert checkpoints_in(run) == ["checkpoint-1"] and train_rows(run) == [1]


# ------------------------------------------------------------------ resume


def test_sft_resume_of_a_run_killed_before_its_first_metrics_row(tmp_path, data):
    """A checkpoint at the run's last step and no metrics row (logged every 100 steps): the
    resume finishes the run (it crashed in plot_metrics)."""
    first = tmp_path / "first"
    assert main([*sft_args(data), "--save-every", "1", "--output-dir", str(first)]) == 0
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(first / "run.json", run)
    shutil.copytree(first / "checkpoint-4", run / "checkpoint-4")
    (run / "metrics.jsonl").write_text("")
    argv = [*sft_args(data), "--save-every", "1", "--output-dir", str(run), "--resume"]
    assert main(argv) == 0
    assert json.loads((run / "sft_summary.json").read_text())["steps"] == 4
    assert (run / "model.safetensors").is_file()


def test_sft_resume_with_fewer_epochs_is_one_line(tmp_path, data, capsys):
    run = tmp_path / "run"
    argv = [*sft_args(data), "--save-every", "1", "--log-every", "100", "--output-dir", str(run)]
    assert main([*argv, "--epochs", "2"]) == 0
    (run / "sft_summary.json").unlink()  # as if killed before it finished
    (run / "metrics.jsonl").write_text("")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--epochs", "1", "--resume"])
    assert exit_info.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert "Cannot resume from" in line and "checkpoint-8 with epochs=1" in line
    assert line.endswith("pass --epochs >= 2")


@pytest.fixture
def sft_run(tmp_path, data) -> Path:
    """A finished one-epoch SFT run saved every step, its summary removed (as if killed after
    its last checkpoint): ``--epochs 2 --resume`` continues it."""
    run = tmp_path / "run"
    assert main([*sft_args(data), "--save-every", "1", "--output-dir", str(run)]) == 0
    (run / "sft_summary.json").unlink()
    return run


def test_an_optimizer_state_of_other_shapes_is_refused_at_load(sft_run, data, capsys):
    file = sft_run / "checkpoint-4" / OPTIMIZER_STATE
    saved = torch.load(file, weights_only=True)
    for state in saved["optimizer"]["state"].values():
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = state[key].reshape(-1)[:-1].clone()  # one number short, flat
    torch.save(saved, file)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*sft_args(data), "--epochs", "2", "--output-dir", str(sft_run), "--resume"])
    assert exit_info.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert f"{file} holds optimizer state 'exp_avg' of shape" in line
    assert "resume with the --model the run was started with" in line


def test_a_deeply_nested_trainer_config_is_one_line(sft_run, data, capsys):
    config = sft_run / "checkpoint-4" / "trainer_config.json"
    config.write_text("[" * 100_000 + "]" * 100_000)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*sft_args(data), "--epochs", "2", "--output-dir", str(sft_run), "--resume"])
    assert exit_info.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert f"{config} does not read as JSON (nested too deeply)" in line


# ------------------------------------------------------------------ free disk


def _free_disk(monkeypatch, free):
    """``shutil.disk_usage`` as the checkpoints see it, with ``free(call)`` bytes free."""
    real, calls = shutil.disk_usage, []

    def disk_usage(path):
        usage = real(path)
        calls.append(path)
        return namedtuple("usage", "total used free")(usage.total, usage.used, free(len(calls)))

    monkeypatch.setattr("textgym.algos.checkpoints.shutil.disk_usage", disk_usage)
    return calls


def test_too_little_disk_is_refused_before_the_first_step(tmp_path, monkeypatch, capsys, data):
    _free_disk(monkeypatch, lambda call: 1_000_000)
    run = tmp_path / "run"
    assert main([*TRAIN, "--steps", "2", "--output-dir", str(run), "--no-progress"]) == 1
    line = one_line(capsys.readouterr().err)
    assert f"not enough free disk in {run} to save a checkpoint of this run (weights " in line
    assert "1,000,000 free" in line and "no step was run" in line
    assert "choose another --output-dir" in line and "--save-total-limit" in line
    assert train_rows(run) == [] and not checkpoints_in(run)
    assert not (run / DIR_LOCK).exists()
    sft_run = tmp_path / "sft"
    assert main([*sft_args(data), "--output-dir", str(sft_run)]) == 1
    line = one_line(capsys.readouterr().err)
    assert "to save its model of this run" in line and "no step was run" in line
    assert not (sft_run / "metrics.jsonl").exists() and not checkpoints_in(sft_run)


def test_a_tiny_run_fits_a_50_mb_disk(tmp_path, monkeypatch):
    """The tiny model's checkpoint is about 1.2 MB: 50 MB free is plenty (64 MiB were asked)."""
    _free_disk(monkeypatch, lambda call: 50_000_000)
    run = tmp_path / "run"
    assert main([*TRAIN, "--steps", "1", "--output-dir", str(run), "--no-progress"]) == 0
    assert checkpoints_in(run) == ["checkpoint-1"]


def test_a_final_save_without_room_for_the_optimizer_keeps_the_weights(
    tmp_path, monkeypatch, capsys
):
    model, tokenizer = build_tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    empty = tmp_path / "empty"
    empty.mkdir()
    light, whole = (
        with_margin(checkpoint_bytes(empty, model, optimizer, tokenizer, optimizer_state=state))
        for state in (False, True)
    )
    assert light < whole
    # The check before the first step finds room; the final save finds room for the weights.
    _free_disk(monkeypatch, lambda call: whole if call == 1 else (light + whole) // 2)
    run = tmp_path / "run"
    argv = [*TRAIN, "--steps", "1", "--output-dir", str(run), "--no-progress"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    line = one_line(err, "textgym: warning: not enough free disk for checkpoint-1 with its ")
    assert f"saved {run / 'checkpoint-1'} without it" in line
    assert f"--resume finishes the run, --model {run / 'checkpoint-1'} starts" in line
    assert (run / "checkpoint-1" / "model.safetensors").is_file()
    assert not (run / "checkpoint-1" / OPTIMIZER_STATE).exists()
    # --resume works: a run whose final evaluation did not finish evaluates, and ends.
    (run / "final_eval.json").unlink()
    monkeypatch.undo()
    assert main([*argv, "--resume"]) == 0
    assert (run / "final_eval.json").is_file()


# ------------------------------------------------------------------ returns near 1e308


def test_returns_near_the_largest_float_train(tmp_path, monkeypatch):
    """[1e300, 1e308] made float32 rewards of inf, and the advice was "use float64 rewards",
    which no option does; the advantages are now computed in float64."""
    _rewarding(monkeypatch, [1e300, 1e308, -1e308, 1.0])
    run = tmp_path / "run"
    assert main([*TRAIN, "--steps", "2", "--output-dir", str(run), "--no-progress"]) == 0
    assert train_rows(run) == [1, 2]


def test_an_advantage_beyond_float32_names_a_fix_one_can_apply(tmp_path, monkeypatch, capsys):
    _rewarding(monkeypatch, [1e300, -1e300])
    run = tmp_path / "run"
    argv = [*TRAIN, "--steps", "1", "--output-dir", str(run), "--no-progress"]
    assert main([*argv, "--loss-type", "dr_grpo"]) == 1  # dr_grpo: scale_rewards 'none'
    line = one_line(capsys.readouterr().err)
    assert "with scale_rewards='none', beyond float32" in line and "float64" not in line
    assert "use --scale-rewards group or batch" in line
