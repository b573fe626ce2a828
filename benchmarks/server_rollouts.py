"""GRPO rollouts in process against rollouts on llama.cpp's ``llama-server``, same games.

One GRPO step's rollouts of the tic-tac-toe pipeline (``--episodes`` episodes: 4 groups x 8 by
default, compact prompts, the opponent at ``random_move_prob`` 0.5, temperature 1, 16 new tokens
per turn) played twice by the same policy, Gemma 3 270M with the pipeline's LoRA adapter
(``benchmarks/results/tictactoe_pipeline_gemma-3-270m_cpu_lora_safe/league``, kept unmerged;
stored in float32):

- ``in_process``: :class:`textgym.policies.hf.HFPolicy` on the ``peft`` model, float32, as
  ``textgym train`` samples (``rollout_engine="hf"``; KV cache across turns, shared prefill);
- ``llama_server``: :class:`textgym.policies.llama_server.LlamaServerPolicy` against
  ``llama-server`` serving the packaged Q4_K_M GGUF with the same adapter written as a GGUF LoRA
  (``rollout_engine="llama-server"``), one slot per episode in flight.

Per engine and repeat: wall seconds of the rollout, generated tokens, tokens per second, the
mean episode return and the invalid-move rate (a check that both play the same policy); for the
server also the start-up with the adapter (write + start + first healthy answer), and the mean
|server - learner| log-prob per generated token over the first repeat's episodes. Each engine
runs alone on the machine (the server is stopped before the in-process rollouts).

Run: ``TEXTGYM_LLAMA_SERVER=... python benchmarks/server_rollouts.py`` (writes
benchmarks/results/server_rollouts_cpu.json).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import torch
from _provenance import (
    REPO_ROOT,
    dist_version,
    git,
    git_dirty,
    machine_info,
    write_result,
)  # sibling module

import textgym  # noqa: F401  (registers the ids)
from textgym.algos.server_rollouts import gguf_architecture, server_model_path
from textgym.cli.usage import script_config
from textgym.models import load_model
from textgym.policies.hf import HFPolicy
from textgym.policies.llama_server import LlamaServerPolicy
from textgym.rollout import rollout
from textgym.serving.llama_cpp import LlamaServer, write_lora_gguf

ADAPTER = REPO_ROOT / "benchmarks/results/tictactoe_pipeline_gemma-3-270m_cpu_lora_safe/league"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "server_rollouts_cpu.json"
ENV_KWARGS = {"prompt_style": "compact", "agent_mark": "random", "random_move_prob": 0.5}


def play(policy: Any, episodes: int, batch_size: int, seed: int) -> tuple[dict[str, float], list]:
    """Roll out ``episodes`` seeded games; return the measurements and the trajectories."""
    seeds = [seed + i // 8 for i in range(episodes)]  # groups of 8 share a task, as in GRPO
    before = policy.tokens_generated
    began = time.perf_counter()
    trajectories = rollout(
        lambda: gym.make("textgym/TicTacToe-v0", **ENV_KWARGS),
        policy,
        seeds,
        batch_size=batch_size,
        token_level=True,
    )
    seconds = time.perf_counter() - began
    tokens = policy.tokens_generated - before
    turns = sum(t.num_steps for t in trajectories)
    invalid = sum(sum(t.invalid_actions) for t in trajectories)
    return {
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "mean_return": statistics.fmean(t.episode_return for t in trajectories),
        "invalid_move_rate": invalid / max(turns, 1),
    }, trajectories


@torch.no_grad()
def logprob_gap(model: Any, trajectories: list) -> float:
    """Mean |sampler - learner| log-prob per generated token (learner: ``model``, float32)."""
    total, tokens = 0.0, 0
    for trajectory in trajectories:
        ids = torch.tensor([trajectory.token_ids])
        logits = model(input_ids=ids).logits[0, :-1].float()  # [L-1, V]
        learner = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
        sampler = torch.tensor(trajectory.token_logprobs[1:])
        total += float((learner - sampler).abs()[mask].sum())
        tokens += int(mask.sum())
    return total / max(tokens, 1)


@dataclass
class Config:
    """The command line of this benchmark."""

    episodes: int = 32
    """Episodes of the rollout, all in flight together (the server's slots)."""
    repeats: int = 3
    """Rollouts per engine; the median is reported."""
    max_new_tokens: int = 16
    """Tokens generated per turn, at most."""
    threads: int | None = None
    """llama-server's --threads (None: its own default)."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "server_rollouts.py", __doc__)
    from peft import PeftModel

    base, tokenizer = load_model("gemma-3-270m")
    model = PeftModel.from_pretrained(base, str(ADAPTER)).eval()
    sampling = dict(max_new_tokens=args.max_new_tokens, temperature=1.0, stop=["</move>"])
    record: dict[str, Any] = {
        "benchmark": "server_rollouts",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "versions": {
            "torch": dist_version("torch"),
            "transformers": dist_version("transformers"),
            "llama-cpp-python (llama.cpp sources of the server)": dist_version("llama-cpp-python"),
        },
        "settings": {
            "episodes": args.episodes,
            "repeats": args.repeats,
            "env_kwargs": ENV_KWARGS,
            "adapter": str(ADAPTER.relative_to(REPO_ROOT)),
            **sampling,
        },
        "results": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        config = SimpleNamespace(server_model="", model="gemma-3-270m")
        gguf = server_model_path(config, Path(scratch))
        began = time.perf_counter()
        adapter = write_lora_gguf(
            model, Path(scratch) / "sft.gguf", architecture=gguf_architecture(gguf)
        )
        server = LlamaServer(
            gguf, lora=adapter, parallel=args.episodes, ctx_size=2048, threads=args.threads
        )
        with server:
            startup = time.perf_counter() - began
            policy = LlamaServerPolicy(
                server.url, model, tokenizer, batch_size=args.episodes, seed=0, **sampling
            )
            runs = [
                play(policy, args.episodes, args.episodes, 1000 * r) for r in range(args.repeats)
            ]
        record["results"]["llama_server"] = summarize([r for r, _ in runs])
        record["results"]["llama_server"]["startup_with_adapter_s"] = startup
        record["results"]["llama_server"]["logprob_gap_vs_learner"] = logprob_gap(model, runs[0][1])
    policy = HFPolicy(model, tokenizer, batch_size=args.episodes, seed=0, **sampling)
    runs = [play(policy, args.episodes, args.episodes, 1000 * r) for r in range(args.repeats)]
    record["results"]["in_process"] = summarize([r for r, _ in runs])
    for engine, row in record["results"].items():
        print(
            f"{engine:13} {row['seconds']:6.1f} s  {row['tokens_per_s']:6.1f} tok/s  "
            f"return {row['mean_return']:+.3f}  invalid {row['invalid_move_rate']:.1%}",
            file=sys.stderr,
        )
    record["speedup_server_over_in_process"] = (
        record["results"]["in_process"]["seconds"] / record["results"]["llama_server"]["seconds"]
    )
    write_result(args.output, record)
    return 0


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over repeats, and every repeat."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]} | {"repeats": runs}


if __name__ == "__main__":
    sys.exit(main())
