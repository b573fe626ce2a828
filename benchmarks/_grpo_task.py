"""The task both trainers of ``grpo_vs_trl.py`` train on, and how their steps are summarised.

``textgym-bench/ReverseTextDense-v0`` is ReverseText-v0 plus one reward component,
``dense_lcs`` (why: ``grpo_vs_trl.py``'s module docstring, "Reward signal"); task ``r`` of a run
resets with :func:`task_seed`, as ``textgym.algos.grpo`` seeds its tasks, so both trainers see
the same prompts.
"""

from __future__ import annotations

import statistics
from typing import Any

import gymnasium as gym
import torch

from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.reverse_text.parsing import extract_reversed_text
from textgym.envs.reverse_text.rewards import lcs_similarity

BASE_ENV_ID = "textgym/ReverseText-v0"
DENSE_ENV_ID = "textgym-bench/ReverseTextDense-v0"


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
