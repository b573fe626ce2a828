"""Summary statistics of evaluation episodes (the numbers ``textgym eval`` prints and saves)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from textgym.rollout import Trajectory

__all__ = ["OUTCOMES", "RunningSummary", "summarize"]

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


class RunningSummary:
    """The statistics of :func:`summarize`, gathered one finished episode at a time.

    Keeps counts and sums, and one float per episode (its return, for the two-pass variance),
    never the trajectories: an evaluation that streams its episodes to disk holds no more.
    """

    def __init__(self) -> None:
        self.returns = array("d")
        self.component_sums: dict[str, float] = {}
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.truncated = 0
        self.actions = 0
        self.invalid = 0
        self.invalid_episodes = 0
        self.length_cut = 0

    def add(self, trajectory: Trajectory) -> None:
        """Count one finished episode."""
        t = trajectory
        self.returns.append(t.episode_return)
        for name, total in t.component_totals().items():
            self.component_sums[name] = self.component_sums.get(name, 0.0) + total
        if t.outcome in self.outcomes:
            self.outcomes[t.outcome] += 1
        # A step can be both (a time limit landing on the final move): the game still ended.
        self.truncated += bool(t.truncated and not t.terminated)
        self.actions += t.num_steps
        self.invalid += sum(t.invalid_actions)
        self.invalid_episodes += any(t.invalid_actions)
        self.length_cut += sum(r == "length" for r in t.finish_reasons)

    def result(self) -> dict[str, Any]:
        """The summary of the episodes added so far (see :func:`summarize`)."""
        n = len(self.returns)
        mean_return, stderr_return = _mean_stderr(self.returns)
        names = sorted(self.component_sums)
        return {
            "episodes": n,
            "mean_return": mean_return,
            "stderr_return": stderr_return,
            "reward_components": {name: self.component_sums[name] / n for name in names} if n else {},
            "outcomes": {o: (self.outcomes[o] / n if n else math.nan) for o in OUTCOMES},
            "truncated_rate": self.truncated / n if n else math.nan,
            "invalid_action_rate": self.invalid / self.actions if self.actions else 0.0,
            "invalid_episode_rate": self.invalid_episodes / n if n else math.nan,
            "mean_turns": self.actions / n if n else math.nan,
            "length_truncated_rate": self.length_cut / self.actions if self.actions else 0.0,
        }


def summarize(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
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
    running = RunningSummary()
    for trajectory in trajectories:
        running.add(trajectory)
    return running.result()
