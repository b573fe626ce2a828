"""What both trainers of ``grpo_vs_trl.py`` share: the task they train on, the settings and
provenance every JSON records, and how their steps are summarised.

``textgym-bench/ReverseTextDense-v0`` is ReverseText-v0 plus one reward component,
``dense_lcs`` (why: ``grpo_vs_trl.py``'s module docstring, "Reward signal"); task ``r`` of a run
resets with :func:`task_seed`, as ``textgym.algos.grpo`` seeds its tasks, so both trainers see
the same prompts.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from _provenance import dist_version, git, git_dirty, machine_info  # sibling module

from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.reverse_text.parsing import extract_reversed_text
from textgym.envs.reverse_text.rewards import lcs_similarity
from textgym.policies import conversation_start

BASE_ENV_ID = "textgym/ReverseText-v0"
DENSE_ENV_ID = "textgym-bench/ReverseTextDense-v0"
#: Settings both trainers take under these same names (``grpo_vs_trl.py``'s docstring, "Equal
#: settings"); each config and every JSON's ``settings`` read them from here.
EQUAL_SETTINGS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "beta": 0.0,
    "num_iterations": 1,
}
#: DAPO's clip range (low, high): ours ``epsilon_low``/``epsilon_high``, TRL's
#: ``epsilon``/``epsilon_high``.
CLIP_RANGE = (0.2, 0.28)


class DenseLCS(gym.Wrapper):
    """Adds ``dense_lcs``: LCS similarity of the whole completion to the reversed text.

    Benchmark-only: it gives an untrained model rewards that differ within a group, so that
    both trainers run their backward pass (see the module docstring). The target is read from
    the public ``info["gold_completion"]`` at reset.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._target = ""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._target = extract_reversed_text(info["gold_completion"]) or ""
        return obs, info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        dense = lcs_similarity(action.strip(), self._target)
        info = dict(info, reward_components={**info["reward_components"], "dense_lcs": dense})
        return obs, float(reward) + dense, terminated, truncated, info


def _make_dense_env(**kwargs: Any) -> gym.Env:
    return DenseLCS(ReverseTextEnv(**kwargs))


if DENSE_ENV_ID not in gym.registry:
    gym.register(id=DENSE_ENV_ID, entry_point=_make_dense_env)


def task_seed(seed: int, row: int) -> int:
    """Reset seed of task ``row`` (0-based over the run), as ``textgym.algos.grpo`` sets it."""
    return seed * 10**6 + row


def task_conversations(args: Any, tasks: int) -> list[tuple[int, list[dict[str, str]], dict]]:
    """``(reset seed, first messages, reset info)`` of the run's first ``tasks`` tasks: what
    both trainers' first prompts are rendered from (and the CUDA decode roofline's)."""
    env = gym.make(env_id(args.reward), max_chars=args.max_chars)
    try:
        conversations = []
        for row in range(tasks):
            seed = task_seed(args.seed, row)
            observation, info = env.reset(seed=seed)
            conversations.append((seed, conversation_start(observation, info), info))
        return conversations
    finally:
        env.close()


def env_id(reward: str) -> str:
    """The env of ``--reward``: ``dense`` (ReverseText-v0 + ``dense_lcs``) or ``env`` (as is)."""
    return DENSE_ENV_ID if reward == "dense" else BASE_ENV_ID


def device_type() -> str:
    """``cuda`` where torch sees a GPU, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def step_summary(step_times: list[float], tokens: list[float]) -> dict[str, Any]:
    """Step time (s) over the timed steps: mean, median and their spread (standard deviation,
    min, max, interquartile range), and generated tokens/s."""
    quartiles = statistics.quantiles(step_times, n=4) if len(step_times) > 1 else step_times * 3
    return {
        "step_time_s": step_times,
        "step_time_mean_s": statistics.fmean(step_times),
        "step_time_std_s": statistics.stdev(step_times) if len(step_times) > 1 else 0.0,
        "step_time_median_s": statistics.median(step_times),
        "step_time_min_s": min(step_times),
        "step_time_max_s": max(step_times),
        "step_time_iqr_s": quartiles[2] - quartiles[0],
        "generated_tokens": tokens,
        "tokens_per_s": sum(tokens) / sum(step_times),
    }


def weights_name(args: Any) -> str:
    """``"random"``, or the model as given (a name such as ``gemma-3-270m``, or the absolute
    path of a local folder)."""
    if args.random_weights:
        return "random"
    folder = Path(args.model)
    return str(folder.resolve()) if folder.is_dir() else args.model


def _settings(args: Any) -> dict[str, Any]:
    """What both trainers were run with (recorded in every JSON, the children's included)."""
    device = device_type()
    return {
        "task": env_id(args.reward),
        "model": args.model,
        "env_id": env_id(args.reward),
        "reward": args.reward,
        "env_kwargs": {"max_chars": args.max_chars},
        "groups_per_step": args.groups_per_step,
        "group_size": args.group_size,
        "batch": args.groups_per_step * args.group_size,
        "micro_batch_size": args.micro_batch_size,
        "max_new_tokens": args.max_new_tokens,
        "learning_rate": args.learning_rate,
        **EQUAL_SETTINGS,
        "epsilon": list(CLIP_RANGE),
        "dtype": "bf16 autocast" if device == "cuda" else "float32",
        "warmup_steps_dropped": args.warmup,
        "timed_steps": args.steps,
        "rounds": args.rounds,
        "torch_threads": args.threads,
        "trainers": list(args.trainers),
        "random_weights": args.random_weights,
    }


def provenance(args: Any) -> dict[str, Any]:
    """Which code ran where, on which weights and settings: the same block in the parent's
    JSON and in every child's (a child JSON read on its own says where it came from)."""
    device = device_type()
    return {
        "benchmark": "grpo_vs_trl",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "device": device,
        "cuda_device": torch.cuda.get_device_name() if device == "cuda" else None,
        "weights": weights_name(args),
        "versions": {
            name: dist_version(name)
            for name in (
                "textgym",
                "torch",
                "transformers",
                "trl",
                "accelerate",
                "datasets",
                "gymnasium",
            )
        },
        "seed": args.seed,
        "settings": _settings(args),
    }
