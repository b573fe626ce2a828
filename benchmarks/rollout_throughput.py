"""Rollout throughput: episodes and generated tokens per second, and the env's share of wall time.

What is measured: ``textgym.rollout.rollout`` playing ``textgym/TicTacToe-v0`` with the ``tiny``
model (a randomly initialised byte-level Llama built in-process, so the run is offline and the
numbers are about the engine, not about play quality) at several batch sizes. Each episode runs
to the 10-step limit or the end of the game; completions are capped at ``--max-new-tokens``.
The env's share is the time spent inside ``reset``/``step`` of the env (timed by a thin wrapper)
divided by the wall time of the rollout; the goal is under 5%, so that generation, not the
environment, bounds RL throughput.

Usage::

    python benchmarks/rollout_throughput.py                    # batch 1, 8, 64; about 2 minutes
    python benchmarks/rollout_throughput.py --batch-sizes 8 64 --episodes 64
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from _provenance import (  # sibling module of this script
    REPO_ROOT,
    dist_version,
    git,
    git_dirty,
    machine_info,
    write_result,
)

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.cli.usage import script_config
from textgym.policies.hf import HFPolicy
from textgym.rollout import rollout

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "rollout_throughput.json"


class EnvTimer(gym.Wrapper):
    """Adds the seconds spent in the wrapped env's ``reset``/``step`` to a shared counter."""

    def __init__(self, env: gym.Env, counter: list[float]):
        super().__init__(env)
        self.counter = counter

    def reset(self, **kwargs: Any):
        start = time.perf_counter()
        try:
            return self.env.reset(**kwargs)
        finally:
            self.counter[0] += time.perf_counter() - start

    def step(self, action: str):
        start = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            self.counter[0] += time.perf_counter() - start


def measure(policy: HFPolicy, batch_size: int, episodes: int, seed: int) -> dict[str, Any]:
    counter = [0.0]
    policy.batch_size = batch_size
    tokens_before = policy.tokens_generated
    start = time.perf_counter()
    trajectories = rollout(
        lambda: EnvTimer(gym.make("textgym/TicTacToe-v0"), counter),
        policy,
        [seed + i for i in range(episodes)],
        batch_size=batch_size,
    )
    wall = time.perf_counter() - start
    tokens = policy.tokens_generated - tokens_before
    turns = sum(t.num_steps for t in trajectories)
    return {
        "batch_size": batch_size,
        "episodes": len(trajectories),
        "turns": turns,
        "generated_tokens": tokens,
        "wall_s": wall,
        "episodes_per_s": len(trajectories) / wall,
        "tokens_per_s": tokens / wall,
        "env_s": counter[0],
        "env_share": counter[0] / wall,
    }


@dataclass
class Config:
    """The command line of this benchmark."""

    batch_sizes: tuple[int, ...] = (1, 8, 64)
    """Episodes played together, one row each."""
    episodes: int = 64
    """Episodes per batch size (at least the batch size)."""
    max_new_tokens: int = 32
    """Tokens generated per turn, at most."""
    seed: int = 0
    """Seed of the model's sampling and the episodes."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "rollout_throughput.py", __doc__)

    torch.manual_seed(args.seed)
    policy = HFPolicy.from_name(
        "tiny",
        max_new_tokens=args.max_new_tokens,
        temperature=1.0,
        seed=args.seed,
        stop=["</move>"],
    )
    measure(policy, 8, 8, args.seed + 10_000)  # warm-up: allocator, kernels, caches
    rows = []
    for batch_size in args.batch_sizes:
        episodes = max(args.episodes, batch_size)
        rows.append(measure(policy, batch_size, episodes, args.seed))
        r = rows[-1]
        print(
            f"batch {batch_size:>3}: {r['episodes_per_s']:7.2f} episodes/s  {r['tokens_per_s']:9.1f} tok/s  "
            f"env share {r['env_share']:.2%}  ({r['episodes']} episodes, {r['turns']} turns, {r['wall_s']:.1f} s)"
        )

    record = {
        "benchmark": "rollout_throughput",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "versions": {
            name: dist_version(name) for name in ("textgym", "torch", "transformers", "gymnasium")
        },
        "torch_threads": torch.get_num_threads(),
        "seed": args.seed,
        "model": "tiny",
        "env_id": "textgym/TicTacToe-v0",
        "max_new_tokens": args.max_new_tokens,
        "results": rows,
        "goals": {"env_share_below_5pct": all(r["env_share"] < 0.05 for r in rows)},
    }
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
