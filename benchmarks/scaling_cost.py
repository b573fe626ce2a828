"""The cost model of docs/scaling.md: env CPU time per generated token, per task.

For each env it plays ``--episodes`` seeded episodes with the expert policy (minimax for
tic-tac-toe, the gold answers for the others) and measures, per agent turn:

- ``env_step_us``: wall time of ``env.step`` (parse, validate, run tools, verify), in
  microseconds, mean over turns (median over ``--repeats`` passes);
- ``completion_tokens``: tokens of the expert's reply, with Gemma 3's tokenizer (the bundled
  model; a trained policy writes replies of about this length);
- ``prompt_tokens``: tokens of the first prompt (system prompt, first observation, and the
  tool schemas where the chat template renders them; Gemma 3's does not, the tool envs' system
  prompts list the tools in one line each) as Gemma 3's chat template renders it.

From these, ``env_us_per_generated_token`` = env_step_us / completion_tokens: the env CPU time
that one generated token costs, so ``cores_needed = generation_tokens_per_s * that / 1e6`` for a
cluster that generates ``generation_tokens_per_s`` tokens per second in all (docs/scaling.md).

Run: ``python benchmarks/scaling_cost.py`` (writes benchmarks/results/scaling_cost.json).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from _provenance import (
    REPO_ROOT,
    dist_version,
    git,
    git_dirty,
    machine_info,
    write_result,
)  # sibling module

import textgym  # noqa: F401  (registers the ids)
from textgym.cli.usage import script_config
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.policies import GoldPolicy
from textgym.policies.base import conversation_start

SHARED = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "scaling_cost.json"


def tasks(shared: Path) -> dict[str, tuple[Any, Any, str]]:
    """env id -> (env factory, policy factory, data description)."""
    workplace = shared / "workplace"
    gsm8k = shared / "gsm8k" / "test.jsonl"
    return {
        "textgym/TicTacToe-v0": (
            functools.partial(gym.make, "textgym/TicTacToe-v0", prompt_style="compact"),
            lambda: MinimaxPolicy(seed=0, reasoning=False),
            "compact prompts, minimax opponent at random_move_prob 0.5 (default)",
        ),
        "textgym/GSM8K-v0": (
            functools.partial(gym.make, "textgym/GSM8K-v0", data_path=str(gsm8k))
            if gsm8k.is_file()
            else functools.partial(gym.make, "textgym/GSM8K-v0"),
            GoldPolicy,
            str(gsm8k) if gsm8k.is_file() else "bundled sample",
        ),
        "textgym/Workplace-v1": (
            functools.partial(gym.make, "textgym/Workplace-v1", data_dir=str(workplace))
            if workplace.is_dir()
            else functools.partial(gym.make, "textgym/Workplace-v1"),
            GoldPolicy,
            str(workplace) if workplace.is_dir() else "bundled sample",
        ),
        "textgym/EmailToolUse-v1": (
            functools.partial(gym.make, "textgym/EmailToolUse-v1"),
            GoldPolicy,
            "generator defaults",
        ),
    }


def one_pass(make_env: Any, make_policy: Any, seeds: range, tokenizer: Any) -> dict[str, float]:
    """Play one episode per seed; time each step; count reply and prompt tokens."""
    env, policy = make_env(), make_policy()
    step_s, turns, completion_tokens, prompt_tokens = 0.0, 0, 0, 0
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        messages = conversation_start(obs, info)
        prompt_tokens += len(
            tokenizer.apply_chat_template(
                messages,
                tools=info.get("tools") or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        done = False
        while not done:
            (completion,) = policy.act([messages], [info])
            completion_tokens += len(tokenizer(completion.text)["input_ids"])
            start = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(completion.text)
            step_s += time.perf_counter() - start
            turns += 1
            done = terminated or truncated
            messages += [
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": obs},
            ]
    env.close()
    return {
        "env_step_us": step_s / turns * 1e6,
        "turns_per_episode": turns / len(seeds),
        "completion_tokens": completion_tokens / turns,
        "prompt_tokens": prompt_tokens / len(seeds),
    }


@dataclass
class Config:
    """The command line of this benchmark."""

    episodes: int = 100
    """Seeded episodes per env and pass."""
    repeats: int = 3
    """Passes per env; the median is reported."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "scaling_cost.py", __doc__)
    from textgym.models import load_model

    _, tokenizer = load_model("gemma-3-270m")
    record: dict[str, Any] = {
        "benchmark": "scaling_cost",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "versions": {"gymnasium": dist_version("gymnasium"), "textgym": dist_version("textgym")},
        "episodes": args.episodes,
        "repeats": args.repeats,
        "tokenizer": "gemma-3-270m",
        "results": {},
    }
    for env_id, (make_env, make_policy, data) in tasks(SHARED).items():
        seeds = range(args.episodes)
        passes = [one_pass(make_env, make_policy, seeds, tokenizer) for _ in range(args.repeats)]
        row = {key: statistics.median(p[key] for p in passes) for key in passes[0]}
        row["env_us_per_generated_token"] = row["env_step_us"] / row["completion_tokens"]
        row["data"] = data
        record["results"][env_id] = row
        print(
            f"{env_id:26} step {row['env_step_us']:9.1f} us  reply {row['completion_tokens']:6.1f} "
            f"tok  prompt {row['prompt_tokens']:7.1f} tok  "
            f"{row['env_us_per_generated_token']:7.2f} env-us/token",
            file=sys.stderr,
        )
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
