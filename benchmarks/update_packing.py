"""GRPO update time per optimizer step: padded micro-batches against packed rows.

What is compared: :func:`textgym.algos.grpo_update.update` (forward and backward over the batch,
one AdamW step) on the same batch of tic-tac-toe trajectories, in the same process, with

* ``padded_shared``: right-padded micro-batches of ``--micro-batch-size`` sequences, each
  group's shared prompt run once (``share_prefix``, the default);
* ``padded``: the same without prefix sharing (each row's prompt run on its own);
* ``packed_N``: rows of at most N tokens for each N of ``--micro-batch-tokens``, sequences
  concatenated without padding (``micro_batch_tokens``; prefix sharing does not apply). With
  sdpa the row's block-diagonal mask is dense, so attention costs the row's length squared
  (against each sequence's length squared padded): small budgets cost less attention, large
  ones fewer passes.

The modes share one model and optimizer and run in rotating order, ``--alternations`` times,
after one untimed warm-up update of each (of the first ``--warmup-modes`` modes); only their ratio within an alternation is meaningful on
a machine that other jobs load (the 1-minute load average is recorded before each update). The
learning rate is 1e-9 so that the weights stay practically equal and the modes can be compared
by their gradient norm before clipping (``grad_norm``: equal to float rounding between layouts,
to bf16's between a mode and its ``_bf16`` pair of ``--bf16-pairs``), while every update does
the full work. The loss is recorded too but compares nothing: at the first iteration over a
batch the policy ratio is 1, so it is the advantages' mean whatever the log-probs.

The batch: ``--groups`` tic-tac-toe tasks (``--prompt-style``, a random opponent) x
``--group-size`` episodes played by :class:`~textgym.policies.scripted.RandomPolicy`
(``<think>I pick a random free cell.</think><move>N</move>``), tokenized with the model's chat
template as a token-level rollout would (:func:`textgym.algos.sft_data.conversation_tokens`), so
the lengths vary with the number of turns. Each episode's return gets ``0.01 x`` its index in the
group, so no group has equal returns and every sequence is in the backward pass.

Usage::

    python benchmarks/update_packing.py                                  # tiny, ~1 minute
    python benchmarks/update_packing.py --model gemma-3-270m --lora-rank 16 0
    python benchmarks/update_packing.py --bf16-pairs --micro-batch-tokens   # float32 vs bf16
    python benchmarks/update_packing.py --model gemma-3-270m --device cuda --groups 32 \
        --micro-batch-size 32 --micro-batch-tokens 4096 16384 --output results/x.json

The padded modes run right-padded rows without an attention mask (causal attention alone is
exact there, :func:`textgym.algos.decoder_passes.padded_hidden`), so sdpa takes its ``is_causal``
kernels; ``--micro-batch-size`` is the caller's, as in training: the trainer never changes it,
and on an accelerator fewer, larger micro-batches (one or two for 256 episodes of 32 new
tokens, as memory allows) save each pass's fixed cost, while on the CPU the sum of the passes'
work is what counts. To compare with an earlier commit side by side, see
``update_before_after.py``.

On CUDA the update's one host read per optimizer step ends each timed call (no micro-batch
reads anything back before it), so no extra synchronisation is needed; the attention kernel is the model's (sdpa unless FlashAttention 2 is
installed and chosen, which runs packed rows as variable-length sequences).

``--random-weights``: the model's config and tokenizer with random weights
(:func:`textgym.random_weights.random_weights_loading`), so the update's time is measured without the
weights; the JSON says ``"weights": "random"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from typing import Any, Literal, get_args

import gymnasium as gym
import torch
from _provenance import REPO_ROOT, dist_version, git, git_dirty, machine_info, write_result

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.algos.batches import make_token_batch, micro_batch_rows
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.grpo_update import update
from textgym.algos.learner import make_learner
from textgym.algos.sft_data import conversation_tokens
from textgym.cli.usage import script_config
from textgym.models import cpu_has_fast_bf16
from textgym.policies.scripted import RandomPolicy
from textgym.random_weights import random_weights_loading
from textgym.rollout import Trajectory, rollout
from textgym.tokens import ChatTokenizer

PaddedMode = Literal["padded_shared", "padded"]
PADDED_MODES: tuple[PaddedMode, ...] = get_args(PaddedMode)


@dataclasses.dataclass
class Config:
    """The command line of this benchmark."""

    model: str = "tiny"
    """A model name or folder."""
    groups: int = 4
    """Tic-tac-toe tasks in the batch."""
    group_size: int = 8
    """Episodes per task."""
    micro_batch_size: int = 16
    """Sequences per padded micro-batch."""
    micro_batch_tokens: tuple[int, ...] = (2048, 4096)
    """Tokens per packed row, one packed_N mode each (none: no packed modes)."""
    lora_rank: tuple[int, ...] = (0,)
    """LoRA ranks, one run each (0: full fine-tuning)."""
    modes: tuple[PaddedMode, ...] = PADDED_MODES
    """The padded modes (the packed ones follow --micro-batch-tokens)."""
    alternations: int = 5
    """Rounds over the modes, in rotating order, each mode timed once a round."""
    warmup_modes: int = 99
    """Untimed updates first: of this many modes."""
    prompt_style: Literal["full", "compact"] = "full"
    """The tic-tac-toe prompts of the batch."""
    threads: int = 1
    """Torch threads."""
    device: str = "cpu"
    """cpu, or cuda (bf16 autocast there)."""
    cpu_bf16: bool = False
    """bf16 autocast on the CPU."""
    bf16_pairs: bool = False
    """Each padded mode also under bf16 autocast on the CPU (``MODE_bf16``), in the same rotation:
    the dtype's speed-up side by side (it needs a CPU with native bf16 to pay)."""
    seed: int = 0
    """Seed of the games."""
    random_weights: bool = False
    """The model's config and tokenizer, weights random (speed without the weights)."""
    output: str = str(REPO_ROOT / "benchmarks" / "results" / "update_packing_cpu.json")
    """JSON path."""
    append: bool = False
    """Add to the runs already in --output."""


def _trajectories(
    tokenizer: Any, groups: int, group_size: int, seed: int, prompt_style: str
) -> list[Trajectory]:
    """``groups x group_size`` random-policy tic-tac-toe episodes as token-level trajectories."""
    kwargs = {"opponent": "random", "prompt_style": prompt_style}
    make = lambda: gym.make("textgym/TicTacToe-v0", **kwargs)  # noqa: E731
    seeds = [seed * 10**6 + g for g in range(groups) for _ in range(group_size)]
    played = rollout(make, RandomPolicy(seed=seed), seeds, batch_size=len(seeds))
    chat, out = ChatTokenizer(tokenizer), []
    for i, traj in enumerate(played):
        ids, mask = conversation_tokens(chat, traj.messages)
        rewards = list(traj.rewards)
        rewards[-1] += 0.01 * (i % group_size)  # no group with equal returns
        out.append(
            dataclasses.replace(
                traj,
                token_ids=ids,
                loss_mask=mask,
                token_logprobs=[-0.5 * m for m in mask],
                rewards=rewards,
                finish_reasons=["stop"] * len(traj.finish_reasons),
            )
        )
    return out


def _layout(config: GRPOConfig, trajs: list[Trajectory]) -> dict[str, Any]:
    """Positions the forward passes of each layout run: padded (micro-batches x width) and
    packed (the rows' real tokens), and the number of passes."""
    batch = make_token_batch(
        [t.token_ids for t in trajs],
        [t.loss_mask for t in trajs],
        [t.token_logprobs for t in trajs],
    )
    lengths = batch.attention_mask.sum(dim=1)  # [B] long
    padded = micro_batch_rows(batch, dataclasses.replace(config, micro_batch_tokens=None))
    packed = micro_batch_rows(batch, config)
    return {
        "sequence_positions": {
            "min": int(lengths.min()),
            "mean": float(lengths.float().mean()),
            "max": int(lengths.max()),
            "total": int(lengths.sum()),
        },
        "padded_micro_batches": len(padded),
        "padded_positions": sum(len(r) * int(lengths[r].max()) for r in padded),
        "packed_rows": len(packed),
        "packed_row_positions": [int(lengths[r].sum()) for r in packed],
    }


def _configs(args: Config, lora_rank: int) -> tuple[dict[str, GRPOConfig], list[str]]:
    """The config of every mode (``padded_shared`` is the base the learner loads) and the order
    the modes are timed in."""
    base = GRPOConfig(
        model=args.model,
        output_dir="/tmp/update_packing_unused",
        env_id="textgym/TicTacToe-v0",
        groups_per_step=args.groups,
        group_size=args.group_size,
        micro_batch_size=args.micro_batch_size,
        lora_rank=lora_rank,
        learning_rate=1e-9,
        device=args.device,
        cpu_bf16=args.cpu_bf16,
        tensorboard=False,
        progress=False,
    )
    configs = {"padded_shared": base, "padded": dataclasses.replace(base, share_prefix=False)}
    paired = [m for m in args.modes if m in configs] if args.bf16_pairs else []
    for mode in paired:
        configs[f"{mode}_bf16"] = dataclasses.replace(configs[mode], cpu_bf16=True)
    for tokens in args.micro_batch_tokens:
        configs[f"packed_{tokens}"] = dataclasses.replace(base, micro_batch_tokens=tokens)
    modes = [m for m in args.modes if m in configs] + [f"{m}_bf16" for m in paired]
    modes += [m for m in configs if "packed" in m]
    return configs, modes


def _alternate(
    args: Config, learners: dict[str, Any], modes: list[str], trajs: list[Any]
) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """Warm-up, then ``--alternations`` rounds of one update per mode, each round starting one
    mode later; per mode its seconds, losses and gradient norms, and the load before each."""
    for mode in modes[: args.warmup_modes]:  # warm-up: allocator, first-call costs
        began = time.perf_counter()
        update(learners[mode], trajs)
        print(f"  warm-up {mode}: {time.perf_counter() - began:.2f} s", flush=True)
    runs = {m: {"update_s": [], "loss": [], "grad_norm": []} for m in modes}
    loads: list[float] = []
    for round_ in range(args.alternations):
        order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
        for mode in order:
            loads.append(os.getloadavg()[0])
            began = time.perf_counter()
            metrics = update(learners[mode], trajs)
            runs[mode]["update_s"].append(time.perf_counter() - began)
            runs[mode]["loss"].append(metrics["loss"])
            runs[mode]["grad_norm"].append(metrics["grad_norm"])
        print(
            f"  round {round_ + 1}: "
            + ", ".join(f"{m} {runs[m]['update_s'][-1]:.2f} s" for m in order),
            flush=True,
        )
    return runs, loads


def _measure(args: Config, lora_rank: int) -> dict[str, Any]:
    configs, modes = _configs(args, lora_rank)
    base = configs["padded_shared"]
    weights = random_weights_loading() if args.random_weights else contextlib.nullcontext()
    with weights:  # the learner loads the model from the config's name
        learner = make_learner(base, max_turns=5)
    learners = {m: dataclasses.replace(learner, config=configs[m]) for m in modes}
    trajs = _trajectories(
        learner.tokenizer, args.groups, args.group_size, args.seed, args.prompt_style
    )
    runs, loads = _alternate(args, learners, modes, trajs)
    times = {m: runs[m]["update_s"] for m in modes}
    reference = "padded_shared" if "padded_shared" in modes else modes[0]
    summary = {
        mode: {
            "update_s": times[mode],
            "median_s": statistics.median(times[mode]),
            "dtype": "bfloat16 autocast"
            if configs[mode].cpu_bf16 or args.device == "cuda"
            else "float32",
            "loss": runs[mode]["loss"],
            "grad_norm": runs[mode]["grad_norm"],
            "median_ratio_to_" + reference: statistics.median(
                t / r for t, r in zip(times[mode], times[reference])
            ),
        }
        for mode in modes
    }
    return {
        "model": args.model,
        "training": f"LoRA rank {lora_rank}" if lora_rank else "full fine-tuning",
        "sequences": len(trajs),
        "layout": {m: _layout(configs[m], trajs) for m in configs if "packed" in m},
        "modes": summary,
        "load_avg_1m_before_each_update": loads,
    }


def main() -> None:
    args = script_config(Config, None, "update_packing.py", __doc__)
    torch.set_num_threads(args.threads)
    record: dict[str, Any] = {
        "benchmark": "update_packing",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "versions": {p: dist_version(p) for p in ("torch", "transformers", "peft")},
        "machine": machine_info(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "weights": "random" if args.random_weights else "checkpoint",
        "dtype": "per mode (runs[].modes[].dtype)"
        if args.bf16_pairs
        else "bfloat16 autocast"
        if args.cpu_bf16 or args.device == "cuda"
        else "float32",
        "cpu_has_fast_bf16": cpu_has_fast_bf16(),
        "threads": args.threads,
        "settings": {
            k: v for k, v in dataclasses.asdict(args).items() if k not in ("output", "append")
        },
        "runs": [],
    }
    if args.append and os.path.exists(args.output):
        with open(args.output) as handle:
            previous = json.load(handle)
        record["runs"] = previous.get("runs", [])
        record["earlier"] = previous.get("earlier", []) + [
            {k: previous.get(k) for k in ("commit", "machine", "settings", "versions")}
        ]
    for rank in args.lora_rank:
        print(f"{args.model}, lora_rank {rank}:")
        run = _measure(args, rank)
        run["load_avg_1m_at_end"] = os.getloadavg()[0]
        record["runs"].append(run)
        for mode, result in run["modes"].items():
            ratio = next(v for k, v in result.items() if k.startswith("median_ratio"))
            print(f"  {mode:14s} median {result['median_s']:.2f} s  ratio {ratio:.3f}")
    write_result(args.output, record)


if __name__ == "__main__":
    main()
