"""SIGKILL at random moments of ``textgym eval`` and ``collect``: whatever is left on disk is
valid, and the output can be used again.

A SIGKILL cannot be caught, so nothing is "saved on exit": what must hold is that the files
are written so that any moment is a consistent state (whole JSONL lines, flushed as each
episode finishes; ``summary.json`` replaced atomically or absent), and that the kernel releases
the run's lock, so the next run is not blocked by a dead one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._runs import train_argv

TTT = "textgym/TicTacToe-v0"
CLI = [sys.executable, "-c", "import sys; from textgym.cli import main; sys.exit(main())"]


def _kill_at_random(argv: list[str], seed: int, watch: Path) -> None:
    """Start ``textgym argv``, wait until ``watch`` has some content, then SIGKILL it after a
    random delay (0-0.3 s)."""
    process = subprocess.Popen([*CLI, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if watch.exists() and watch.stat().st_size > 0:
            break
        time.sleep(0.02)
    time.sleep(random.Random(seed).uniform(0.0, 0.3))
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    process.stderr.close()


def _valid_jsonl(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]  # raises on a torn line


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eval_killed_at_random_leaves_valid_files_and_no_stale_lock(tmp_path, seed):
    out = tmp_path / "run"
    argv = ["eval", TTT, "--policy", "random", "--episodes", "3000", "--seed", "0"]
    _kill_at_random(
        [*argv, "--output-dir", str(out), "--no-progress"], seed, out / "trajectories.jsonl"
    )
    episodes = _valid_jsonl(out / "trajectories.jsonl")
    assert 0 < len(episodes) < 3000, "the kill should land mid-run"
    assert all("messages" in e and "seed" in e for e in episodes)
    summary = out / "summary.json"
    if summary.exists():  # written last: if present, it is whole and describes the run
        assert json.loads(summary.read_text())["episodes_requested"] == 3000
    # The dead run's lock is gone with it: a new run into the same directory is allowed
    # (with --overwrite: the directory holds the dead run's episodes).
    again = subprocess.run(
        [
            *CLI,
            *argv[:4],
            "--episodes",
            "4",
            "--output-dir",
            str(out),
            "--overwrite",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert len(_valid_jsonl(out / "trajectories.jsonl")) == 4


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", [0, 1])
def test_collect_killed_at_random_leaves_whole_lines(tmp_path, seed):
    output = tmp_path / "games.jsonl"
    argv = ["collect", TTT, "--policy", "minimax", "--episodes", "3000", "--no-progress"]
    _kill_at_random([*argv, "--output", str(output)], seed, output)
    records = _valid_jsonl(output)
    assert 0 < len(records) < 3000, "the kill should land mid-run"
    assert all("messages" in r for r in records)


@pytest.mark.subprocess
def test_train_killed_during_its_saves_resumes_to_the_end(tmp_path):
    """SIGKILL while ``train`` writes checkpoints (every step, at a random moment after the
    first one appeared): ``--resume`` starts from the last complete checkpoint (a half-written
    one is never taken), runs to the end, and the metrics hold each step once."""
    run = tmp_path / "run"
    argv = train_argv(
        group_size=2,
        rollout_batch_size=4,
        micro_batch_size=4,
        max_new_tokens=4,
        progress=False,
        save_every=1,
        steps=4,
        output_dir=run,
    )
    _kill_at_random(argv, seed=3, watch=run / "checkpoint-1" / "trainer_state.pt")
    assert not (run / "checkpoint-4").exists(), "the kill should land mid-run"
    resumed = subprocess.run([*CLI, *argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (run / "checkpoint-4").is_dir()
    rows = [r for r in _valid_jsonl(run / "metrics.jsonl") if r.get("stage", "train") == "train"]
    steps = [r["step"] for r in rows]
    assert steps == [1, 2, 3, 4], steps
    assert not [p.name for p in run.iterdir() if p.name.startswith(".") and "checkpoint" in p.name]
