"""Summary statistics of evaluation episodes (the numbers ``textgym eval`` prints and saves)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from textgym.rollout import Trajectory

__all__ = ["OUTCOMES", "summarize"]

OUTCOMES = ("win", "draw", "loss")


def _mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Aggregate finished episodes.

    Returns:
        A dict with ``episodes``; ``mean_return`` and ``stderr_return`` (sample standard
        deviation / sqrt(n), NaN for fewer than 2 episodes); ``reward_components`` (mean per
        episode of each component's episode total); ``outcomes`` (share of episodes per
        ``win``/``draw``/``loss``; games cut by the time limit count in none and appear in
        ``truncated_rate``); ``invalid_action_rate`` (invalid actions / all actions);
        ``invalid_episode_rate`` (episodes with any invalid action); ``mean_turns`` (agent
        actions per episode); ``length_truncated_rate`` (completions that hit the token limit).
    """
    n = len(trajectories)
    mean_return, stderr_return = _mean_stderr([t.episode_return for t in trajectories])
    names = sorted({name for t in trajectories for comps in t.reward_components for name in comps})
    totals = [t.component_totals() for t in trajectories]
    components = {name: sum(tot.get(name, 0.0) for tot in totals) / n for name in names} if n else {}
    actions = sum(t.num_steps for t in trajectories)
    invalid = sum(sum(t.invalid_actions) for t in trajectories)
    length_cut = sum(r == "length" for t in trajectories for r in t.finish_reasons)
    return {
        "episodes": n,
        "mean_return": mean_return,
        "stderr_return": stderr_return,
        "reward_components": components,
        "outcomes": {o: (sum(t.outcome == o for t in trajectories) / n if n else math.nan) for o in OUTCOMES},
        # A step can be both (a time limit landing on the final move): the game still ended.
        "truncated_rate": sum(t.truncated and not t.terminated for t in trajectories) / n if n else math.nan,
        "invalid_action_rate": invalid / actions if actions else 0.0,
        "invalid_episode_rate": sum(any(t.invalid_actions) for t in trajectories) / n if n else math.nan,
        "mean_turns": actions / n if n else math.nan,
        "length_truncated_rate": length_cut / actions if actions else 0.0,
    }
