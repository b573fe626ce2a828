"""GRPO step time and generated tokens/s: textgym's trainer against TRL's ``GRPOTrainer``.

What is compared: one GRPO training step (rollout of M tasks x G completions, rewards, group
advantages, forward/backward over the batch in micro-batches, one AdamW step) of
:func:`textgym.algos.grpo.train` and of ``trl.GRPOTrainer`` (a benchmark-only dependency:
``pip install trl``), on the same model, tasks, batch, group size and lengths, single-turn so
that TRL can run it, one after the other in the same invocation. Each trainer runs in its own
subprocess so that its peak memory (``ru_maxrss``; on CUDA also
``torch.cuda.max_memory_allocated``) is its own. Each trainer runs ``--rounds`` times, in
alternating order; each run drops ``--warmup`` steps and times ``--steps`` steps, and the timed
steps of all runs are pooled. Step times: ours from ``step_time_s`` in ``metrics.jsonl``
(rollout + update, evaluation excluded), TRL's from a ``TrainerCallback`` (``on_step_begin`` to ``on_step_end``:
generation, rewards, the accumulated forward/backward passes and the optimizer step; logging
excluded). Generated tokens are counted exactly: ours from the loss masks
(``completion_tokens_mean`` x M x G), TRL's in the reward function from ``completion_ids``.
Each trainer's pooled steps are summarised by the mean and the median with their spread
(standard deviation, min, max, interquartile range), and per step by its rollout (TRL: the
``_generate_single_turn`` call) and update (the rest of the step) and, on CUDA, the peak
memory. Speedup = TRL's step time / ours, by the mean and by the median (``speedups`` in the
JSON); on CUDA ``trl_no_cudnn`` runs TRL again with cuDNN's attention kernel off, as our decode
engine runs it, and ``best_trl`` is the faster of the two. Every JSON, each child's
included, carries the same ``provenance`` block: commit, machine, device, weights (``random``
or the model as given) and settings, the task named. A third runner, ``ours_no_sharing``, is our trainer with
``share_prefix=False`` (each row's prompt prefilled in generation and forwarded in the update on
its own, as TRL does), so the JSON also records what prefix sharing alone is worth
(``speedup_from_prefix_sharing``). "Generation tokens/s" divides by ours' ``rollout_time_s``
(generation, prompt rendering and env steps) and by the time of TRL's ``_generate_single_turn``
(``model.generate`` only), so it slightly favours TRL.

Task: ``textgym/ReverseText-v0`` (bundled corpus, texts of at most ``--max-chars`` characters)
with the ``tiny`` model (default, CPU) or ``--model gemma-3-270m``. TRL's dataset is built from
the env itself: row r is ``env.reset(seed=seed * 10**6 + r)`` (system prompt + observation as a
conversational ``prompt``), which is the task seed our trainer uses for task r (step r // M),
and TRL's reward function resets an env with that seed and steps it with the completion text,
so both trainers see the same prompts and score identically. With ``shuffle_dataset=False``
TRL's sampler walks the rows in order, M per step.

Equal settings (recorded in the JSON): tasks per step M (TRL: prompts per step), group size G
(``num_generations``), batch M x G = one generation batch = one optimizer step (TRL:
``per_device_train_batch_size`` x ``gradient_accumulation_steps``, so ``steps_per_generation``
defaults to the accumulation steps), micro-batch (TRL: ``per_device_train_batch_size``),
``max_new_tokens`` = ``max_completion_length``, temperature 1, top-p 1, top-k off, learning rate,
constant schedule, AdamW (non-fused, as ours), weight decay 0, gradient clipping 1.0,
``loss_type="dapo"`` with clip range (0.2, 0.28), ``scale_rewards="group"``, ``beta=0`` (no
reference model), ``num_iterations=1`` (no old-log-prob pass in either), no gradient
checkpointing, no vLLM, fp32 on CPU (bf16 autocast on CUDA for both), torch threads.

Settings that cannot be made equal:

- **Reward signal (``--reward dense``, the default).** The untrained ``tiny`` model never writes
  the ``<reversed_text>`` tags, so every ReverseText reward is 0, every group has zero variance,
  and our trainer skips the backward pass of such groups (DAPO's filtering; all of them here)
  while TRL always runs it. To time the same work, the default env is
  ``textgym-bench/ReverseTextDense-v0``: ReverseText-v0 plus one reward component ``dense_lcs``,
  the LCS similarity of the whole completion (no tags needed) to the reversed text, which
  differs between random completions. ``--reward env`` uses the plain env (then ours skips).
- **Sampling RNG.** Both sample with seed ``--seed`` but through different RNG streams, so the
  completions (and their lengths) differ; tokens/s divides each trainer's own token count.
- **Training-only metrics.** Ours also computes the sampling log-probs during generation
  (``output_scores``) and the entropy of every loss token; TRL computes the entropy too.

Goals from the issue: at least 2x TRL's speed at equal settings; on CUDA, decode at >= 25% of
the memory-bandwidth ceiling at batch 256. The decode part (``decode_roofline``) runs only where
``torch.cuda.is_available()``: it times ``HFPolicy.generate`` at ``--decode-batch`` prompts (the
generation our trainer uses), subtracts the prefill (a 1-token run) and compares decode
tokens/s with ``B x bandwidth / (weight bytes + KV-cache bytes read per decode step)``, the
bandwidth measured by a device-to-device copy. That code path has only run where CUDA exists;
CPU runs record ``"decode_roofline": null``.

Threads: both trainers run with ``--threads`` torch threads (default: all cores). On a machine
whose cores are busy with other work, use ``--threads 1``: there an OpenMP pool of 2 threads on 2
shared cores ran the tiny model's forward about 12x slower than 1 thread (0.75 s against
0.06 s for 8 x 530 tokens), which swamps any difference between the trainers. The 1-minute load
average at the start and the end is recorded.

Random weights (``--random-weights``): every child loads the model's config and tokenizer with
weights initialised randomly (:func:`textgym.random_weights.random_weights_loading`, which also covers
the loads inside our trainer), to measure speed without the weights; the JSON says
``"weights": "random"``. Random weights rarely sample the end-of-turn token, so turns run to
``--max-new-tokens``: step times are upper bounds. A child that fails is recorded under
``failures`` (trainer, round, exit status, the end of its output); the JSON holds what succeeded,
with ``null`` where a ratio needs a trainer that failed, and the script exits with 1.

Usage::

    python benchmarks/grpo_vs_trl.py --threads 1                       # tiny, CPU, ~2 minutes
    python benchmarks/grpo_vs_trl.py --groups-per-step 8 --group-size 8 --max-new-tokens 128
    python benchmarks/grpo_vs_trl.py --model gemma-3-270m --steps 5     # CUDA: also the roofline
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from _grpo_task import (  # sibling module of this script
    CLIP_RANGE,
    EQUAL_SETTINGS,
    device_type,
    env_id,
    provenance,
    step_summary,
    task_conversations,
    weights_name,
)
from _profiling import profile_summary, profiler  # sibling module of this script
from _provenance import (  # sibling module of this script
    REPO_ROOT,
    machine_info,
    write_result,
)
from _roofline import copy_bandwidth, kv_bytes_per_row
from _trl_arm import run_trl

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.cli.usage import script_config
from textgym.tokens import ChatTokenizer

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# ours_no_sharing: ours with share_prefix=False; trl_no_cudnn: TRL with cuDNN's attention
# kernel off (torch.backends.cuda.enable_cudnn_sdp(False)), as our decode engine runs it
# (textgym/policies/slot_decoder.py); on a machine without CUDA it equals trl and is left out.
Trainer = Literal["ours", "trl", "trl_no_cudnn", "ours_no_sharing"]
TRAINERS: tuple[Trainer, ...] = get_args(Trainer)
CUDA_ONLY_TRAINERS = ("trl_no_cudnn",)


@dataclass
class Config:
    """The command line of this benchmark (and of its children, with ``--only``)."""

    model: str = "tiny"
    """tiny or gemma-3-270m (or a local directory)."""
    groups_per_step: int = 4
    """M: tasks (TRL: prompts) per step."""
    group_size: int = 8
    """G: completions per task (num_generations)."""
    micro_batch_size: int = 8
    """Completions per forward/backward pass; divides M x G."""
    max_new_tokens: int = 64
    """Tokens per completion, at most (= TRL's max_completion_length)."""
    max_chars: int = 100
    """Longest ReverseText passage in characters (the prompt's length)."""
    learning_rate: float = 1e-5
    """AdamW's learning rate, constant."""
    reward: Literal["dense", "env"] = "dense"
    """dense: ReverseText + dense_lcs (see the module docstring); env: ReverseText-v0 as is."""
    warmup: int = 1
    """Steps run and not timed, per run."""
    steps: int = 5
    """Timed steps per run."""
    rounds: int = 2
    """Runs of each trainer, in alternating order; their timed steps are pooled."""
    decode_batch: int = 256
    """CUDA only: prompts of the decode roofline."""
    threads: int = os.cpu_count() or 1
    """Torch threads, for both trainers (the default: every core of this machine)."""
    seed: int = 0
    """Seed of the tasks and of sampling."""
    random_weights: bool = False
    """The model's config and tokenizer, weights random (speed without the weights)."""
    trainers: tuple[Trainer, ...] | None = None
    """Which trainers to run (None: all, trl_no_cudnn only with CUDA; none listed: only the
    CUDA decode roofline)."""
    no_decode: bool = False
    """Skip the CUDA decode roofline child."""
    output: str | None = None
    """JSON path (None: benchmarks/results/grpo_vs_trl_{cpu,cuda}.json)."""
    profile_output: str | None = None
    """With one of our trainers (--trainers ours --rounds 1 --no-decode, or --only ours): run it
    under torch.profiler and write the per-step rollout / update ranges and the top operators
    to this JSON (the profiler slows the run: time it without). None: no profile."""
    only: Literal[Trainer, "decode"] | None = None
    """Run one trainer (or the decode roofline) in this process, no rounds or comparison, and
    write its JSON to --child-output. None: the whole comparison."""
    child_output: str | None = None
    """With --only: where its JSON goes."""

    def __post_init__(self) -> None:
        for flag, value, least in (
            ("--steps", self.steps, 1),
            ("--warmup", self.warmup, 0),
            ("--rounds", self.rounds, 1),
            ("--threads", self.threads, 1),
        ):
            if value < least:
                raise ValueError(f"{flag}: expected an integer >= {least}, got {value}")
        batch = self.groups_per_step * self.group_size
        if batch % self.micro_batch_size:
            raise ValueError(
                f"batch M x G = {batch} is not divisible by --micro-batch-size "
                f"{self.micro_batch_size}; TRL needs whole accumulation steps"
            )
        profiled = [self.only] if self.only else list(self.trainers or ())
        one_run = self.only is not None or (self.rounds == 1 and self.no_decode)
        if self.profile_output and (profiled not in (["ours"], ["ours_no_sharing"]) or not one_run):
            raise ValueError(
                "--profile-output profiles one of our runs: give --trainers ours (or "
                "ours_no_sharing) with --rounds 1 --no-decode, or --only ours"
            )


def run_ours(args: Config, out: Path, share_prefix: bool = True) -> dict[str, Any]:
    """Train with :func:`textgym.algos.grpo.train`; time the steps after the warm-up.

    ``share_prefix=False`` is the ablation: every row's prompt prefilled and forwarded on its own,
    as TRL does.
    """
    from textgym.algos.grpo import train
    from textgym.algos.grpo_config import GRPOConfig

    batch = args.groups_per_step * args.group_size
    config = GRPOConfig(
        model=args.model,
        output_dir=str(out),
        env_id=env_id(args.reward),
        env_kwargs={"max_chars": args.max_chars},
        wrappers=(),
        seed=args.seed,
        steps=args.warmup + args.steps,
        groups_per_step=args.groups_per_step,
        group_size=args.group_size,
        rollout_batch_size=batch,
        micro_batch_size=args.micro_batch_size,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        **EQUAL_SETTINGS,
        epsilon_low=CLIP_RANGE[0],
        epsilon_high=CLIP_RANGE[1],
        device=device_type(),
        bf16=True,
        gradient_checkpointing=False,
        eval_every=0,
        eval_episodes=1,
        save_every=0,
        tensorboard=False,
        share_prefix=share_prefix,
    )
    train(config)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = sorted((r for r in rows if r["stage"] == "train"), key=lambda r: r["step"])[
        args.warmup :
    ]
    result = step_summary(
        [r["step_time_s"] for r in rows], [r["completion_tokens_mean"] * batch for r in rows]
    )
    rollout = [r["rollout_time_s"] for r in rows]
    result.update(
        # Per step as well as the means: on the GPU the first timed step has been the slow one
        # (benchmarks/results/gpu_h200/run6), and these say which half of it is.
        rollout_time_s=rollout,
        update_time_s=[r["update_time_s"] for r in rows],
        cuda_max_memory_gib=[r.get("cuda_max_memory_gib") for r in rows],
        rollout_time_mean_s=statistics.fmean(rollout),
        update_time_mean_s=statistics.fmean(r["update_time_s"] for r in rows),
        rollout_tokens_per_s=sum(result["generated_tokens"]) / sum(rollout),
        reward_mean=statistics.fmean(r["reward_mean"] for r in rows),
        zero_variance_fraction=statistics.fmean(r["zero_variance_fraction"] for r in rows),
        skipped_updates=sum(r.get("skipped_update", 0.0) for r in rows),
        loss_tokens=[r.get("loss_tokens", 0.0) for r in rows],
    )
    return result


def roofline_prompts(args: Config, tokenizer: Any) -> list[list[int]]:
    """Token ids ``[P]`` of the first ``--decode-batch`` tasks' prompts, rendered as the
    trainers render them (``ChatTokenizer.prompt`` with the generation prompt)."""
    chat = ChatTokenizer(tokenizer)
    conversations = task_conversations(args, args.decode_batch)
    return [chat.prompt(messages, tools=info.get("tools")) for _, messages, info in conversations]


def decode_roofline(args: Config) -> dict[str, Any]:
    """Decode tokens/s of ``HFPolicy.generate`` as a fraction of the memory-bandwidth ceiling.

    CUDA only; this path has only run where CUDA exists. Decode time = time of a
    ``max_new_tokens`` run minus a 1-token run (prefill + one step) on the same prompts; decode
    tokens = batch x (steps - 1), counting rows that finished early since ``generate`` still
    computes them. Ceiling = batch x bandwidth / (weight bytes + KV bytes per step at the mean
    context length, prompt width + steps / 2).
    """
    from textgym.models import load_model
    from textgym.policies.hf import HFPolicy

    device = torch.device("cuda")
    model, tokenizer = load_model(args.model, device=device)
    batch, length = args.decode_batch, args.max_new_tokens
    prompts = roofline_prompts(args, tokenizer)

    def timed(max_new_tokens: int) -> tuple[float, list[Any]]:
        policy = HFPolicy(
            model,
            tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=1.0,
            batch_size=batch,
            seed=args.seed,
        )
        policy.generate(prompts[:8])  # warm-up
        torch.cuda.synchronize(device)
        began = time.perf_counter()
        completions = policy.generate(prompts)
        torch.cuda.synchronize(device)
        return time.perf_counter() - began, completions

    prefill_s, _ = timed(1)
    wall_s, completions = timed(length)
    steps = max(len(c.completion_ids or ()) for c in completions)
    decode_tokens_per_s = batch * (steps - 1) / max(wall_s - prefill_s, 1e-9)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dtype_bytes = next(model.parameters()).element_size()
    context = max(len(p) for p in prompts) + steps / 2
    step_bytes = weight_bytes + batch * kv_bytes_per_row(model.config, context, dtype_bytes)
    bandwidth = copy_bandwidth(device)
    ceiling = batch * bandwidth / step_bytes
    return {
        "batch": batch,
        "max_new_tokens": length,
        "steps": steps,
        "wall_s": wall_s,
        "prefill_s": prefill_s,
        "useful_tokens_per_s": sum(len(c.completion_ids or ()) for c in completions) / wall_s,
        "decode_tokens_per_s": decode_tokens_per_s,
        "weight_bytes": weight_bytes,
        "kv_bytes_per_step": step_bytes - weight_bytes,
        "mean_context_tokens": context,
        "measured_bandwidth_bytes_per_s": bandwidth,
        "ceiling_tokens_per_s": ceiling,
        "fraction_of_ceiling": decode_tokens_per_s / ceiling,
        "goal_at_least_25pct": decode_tokens_per_s / ceiling >= 0.25,
    }


def child(args: Config) -> None:
    """Run one trainer (or the decode roofline) in this process and write its JSON."""
    from textgym.random_weights import random_weights_loading

    torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    if args.only == "trl_no_cudnn":
        torch.backends.cuda.enable_cudnn_sdp(False)
    weights = random_weights_loading() if args.random_weights else contextlib.nullcontext()
    profiling = profiler() if args.profile_output else contextlib.nullcontext()
    with weights, tempfile.TemporaryDirectory(prefix=f"grpo_vs_trl_{args.only}_") as scratch:
        runner = {
            "ours": run_ours,
            "trl": run_trl,
            "trl_no_cudnn": run_trl,
            "ours_no_sharing": lambda a, o: run_ours(a, o, share_prefix=False),
        }.get(args.only)
        with profiling as prof:
            result = runner(args, Path(scratch)) if runner else decode_roofline(args)
    if args.profile_output:
        summary = {"benchmark": "grpo_vs_trl profile", "trainer": args.only}
        write_result(Path(args.profile_output), summary | profile_summary(prof, ranges="grpo."))
    result["peak_rss_mib"] = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )  # KiB on Linux
    result["cuda_max_memory_allocated_mib"] = (
        torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    )
    result["torch_threads"] = torch.get_num_threads()
    result["weights"] = weights_name(args)
    result = {"trainer": args.only, "provenance": provenance(args), **result}
    Path(args.child_output).write_text(json.dumps(result) + "\n")


class ChildFailed(RuntimeError):
    """A child process (one trainer, or the decode roofline) exited with an error."""

    def __init__(self, only: str, returncode: int, output: str) -> None:
        super().__init__(f"{only} failed (exit {returncode})")
        self.record = {"runner": only, "returncode": returncode, "output_tail": output[-3000:]}


def _spawn(argv: list[str], only: str) -> dict[str, Any]:
    """Run one child; its result, or :class:`ChildFailed` with the end of its output."""
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as scratch:
        path = Path(scratch) / f"{only}.json"
        began = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, __file__, *argv, "--only", only, "--child-output", str(path)],
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        print(completed.stdout[-4000:], end="", flush=True)
        if completed.returncode != 0 or not path.exists():
            raise ChildFailed(only, completed.returncode, completed.stdout)
        print(f"{only}: done in {time.perf_counter() - began:.0f} s")
        return json.loads(path.read_text())


def _pool(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One trainer's rounds: step times and token counts pooled, scalars averaged, peaks maxed."""
    pooled = step_summary(
        [t for r in rounds for t in r["step_time_s"]],
        [n for r in rounds for n in r["generated_tokens"]],
    )
    for key, value in rounds[0].items():
        if key in pooled or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        values = [r[key] for r in rounds]
        pooled[key] = (
            max(values) if "peak" in key or "max_memory" in key else statistics.fmean(values)
        )
    pooled.setdefault("cuda_max_memory_allocated_mib", None)
    for key in ("prompt_ids_match_ours", "trl_config"):
        if key in rounds[0]:
            pooled[key] = rounds[0][key]
    pooled["rounds"] = [{k: v for k, v in r.items() if k != "provenance"} for r in rounds]
    return pooled


def _ratio(
    results: dict[str, dict[str, Any]], slower: str, faster: str, stat: str = "mean"
) -> float | None:
    """Step time of ``slower`` over ``faster`` (``stat``: ``mean`` or ``median`` of the pooled
    timed steps); ``None`` when either has no result."""
    if slower not in results or faster not in results:
        return None
    key = f"step_time_{stat}_s"
    return results[slower][key] / results[faster][key]


def speedups(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """TRL's step time over ours, by the mean and by the median, for TRL as configured and for
    the faster of TRL with cuDNN attention on or off (``best_trl``)."""
    trls = [name for name in ("trl", "trl_no_cudnn") if name in results]
    best = min(trls, key=lambda name: results[name]["step_time_mean_s"]) if trls else None
    return {
        "trl_over_ours_mean": _ratio(results, "trl", "ours"),
        "trl_over_ours_median": _ratio(results, "trl", "ours", "median"),
        "trl_no_cudnn_over_ours_mean": _ratio(results, "trl_no_cudnn", "ours"),
        "best_trl": best,
        "best_trl_over_ours_mean": _ratio(results, best, "ours") if best else None,
        "best_trl_over_ours_median": _ratio(results, best, "ours", "median") if best else None,
        "ours_no_sharing_over_ours_mean": _ratio(results, "ours_no_sharing", "ours"),
    }


def _print_table(results: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    names = [name for name in TRAINERS if name in results]
    table = Table(title="GRPO step: textgym vs TRL")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    rows = [
        (
            "step time, mean ± std (s)",
            lambda r: f"{r['step_time_mean_s']:.3f} ± {r['step_time_std_s']:.3f}",
        ),
        (
            "step time, median [min, max] (s)",
            lambda r: (
                f"{r['step_time_median_s']:.3f} [{r['step_time_min_s']:.3f}, {r['step_time_max_s']:.3f}]"
            ),
        ),
        ("generated tokens / step", lambda r: f"{statistics.fmean(r['generated_tokens']):.0f}"),
        ("tokens/s (whole step)", lambda r: f"{r['tokens_per_s']:.1f}"),
        (
            "generation tokens/s",
            lambda r: f"{r.get('rollout_tokens_per_s', r.get('generate_tokens_per_s')):.1f}",
        ),
        ("reward mean", lambda r: f"{r['reward_mean']:.3f}"),
        ("peak RSS (MiB)", lambda r: f"{r['peak_rss_mib']:.0f}"),
    ]
    if torch.cuda.is_available():
        rows.append(
            ("CUDA max allocated (MiB)", lambda r: f"{r['cuda_max_memory_allocated_mib']:.0f}")
        )
    for label, cell in rows:
        table.add_row(label, *(cell(results[name]) for name in names))
    Console().print(table)
    for name, value in speedups(results).items():
        if isinstance(value, float):
            print(f"{name}: {value:.2f}x")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)  # forwarded to the child runs
    args = script_config(Config, argv, "grpo_vs_trl.py", __doc__)
    if args.trainers is None:
        cuda = torch.cuda.is_available()
        args.trainers = tuple(t for t in TRAINERS if cuda or t not in CUDA_ONLY_TRAINERS)
    if args.only:
        child(args)
        return 0

    machine = machine_info()  # before the runs: its load average is the one at the start
    trainers = [name for name in TRAINERS if name in args.trainers]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trainers}
    failures: list[dict[str, Any]] = []

    def attempt(only: str, round_: int | None) -> dict[str, Any] | None:
        try:
            return _spawn(argv, only)
        except ChildFailed as error:
            print(f"{error}; recorded under 'failures'", flush=True)
            failures.append({"round": round_, **error.record})
            return None

    for round_ in range(args.rounds):  # alternate the order so that drift in load hits both alike
        for name in trainers if round_ % 2 == 0 else trainers[::-1]:
            result = attempt(name, round_)
            if result is not None:
                runs[name].append(result)
    results = {name: _pool(rounds) for name, rounds in runs.items() if rounds}
    roofline = attempt("decode", None) if torch.cuda.is_available() and not args.no_decode else None
    if results:
        _print_table(results)
    ratios = speedups(results)
    best = ratios["best_trl_over_ours_mean"]
    record = provenance(args)
    record["machine"] = machine  # read before the runs: the load average at the start
    device = record["device"]
    record.update(
        results=results,
        speedups=ratios,
        speedup_trl_over_ours=ratios["trl_over_ours_mean"],
        speedup_from_prefix_sharing=ratios["ours_no_sharing_over_ours_mean"],
        load_avg_1m_at_end=os.getloadavg()[0],
        decode_roofline=roofline,
        decode_roofline_note="CUDA only (torch.cuda.is_available()); this code path has only "
        "run where CUDA exists",
        failures=failures,
        goals={
            # Issue 54: >= 3x TRL's GRPOTrainer (no vLLM, the better of cuDNN on/off), same run.
            "at_least_3x_best_trl": best >= 3.0 if best is not None else None,
            "decode_at_least_25pct_of_bandwidth_ceiling": roofline["goal_at_least_25pct"]
            if roofline
            else None,
        },
    )
    default = RESULTS_DIR / f"grpo_vs_trl_{device}.json"
    write_result(args.output or default, record)
    if failures:
        print(f"{len(failures)} child runs failed; see 'failures' in the JSON")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
