"""``OpponentSkill``: per-episode opponent strength, stratified across consecutive episodes."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["OpponentSkill"]


class OpponentSkill(gym.Wrapper[str, str, str, str]):
    """Draw the opponent's ``random_move_prob`` per episode from ``[low, high]``, stratified.

    The range is split into ``groups`` equal buckets. Episode ``i`` (counted by this wrapper
    from 0, or given as ``reset(options={"episode_index": i})`` by a batched rollout) draws
    uniformly inside bucket ``i % groups``, so any ``groups`` consecutive episodes span the
    whole range: a training batch never consists of only easy or only hard opponents.

    The draw uses the wrapper's own generator, re-seeded whenever ``reset`` gets a seed, so the
    copies of a GRPO group (same seed, same episode index) face the same opponent. An explicit
    ``options["random_move_prob"]`` passed to ``reset`` wins over the draw. The value used is
    reported by the env as ``info["random_move_prob"]``; this wrapper adds no reward component.

    Args:
        env: An env whose ``reset`` accepts ``options={"random_move_prob": p}``.
        low: Lower end of the range, in [0, 1].
        high: Upper end, in [low, 1].
        groups: Number of buckets, >= 1.

    Raises:
        ValueError: for a range outside [0, 1], ``low > high`` or ``groups < 1``.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = OpponentSkill(gym.make("textgym/TicTacToe-v0"), low=0.0, high=1.0, groups=4)
        >>> probs = [env.reset(seed=s)[1]["random_move_prob"] for s in range(4)]
        >>> [int(p * 4) for p in probs]   # one episode in each quarter of [0, 1]
        [0, 1, 2, 3]
    """

    def __init__(
        self, env: gym.Env[str, str], low: float = 0.0, high: float = 1.0, groups: int = 1
    ):
        super().__init__(env)
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"Expected 0 <= low <= high <= 1, got low={low}, high={high}")
        if groups < 1:
            raise ValueError(f"Expected groups >= 1, got {groups}")
        self.low, self.high, self.groups = float(low), float(high), int(groups)
        self._episode_index = 0
        self._rng = np.random.default_rng()

    def draw(self, episode_index: int) -> float:
        """Return the ``random_move_prob`` for ``episode_index`` (uses the wrapper's generator)."""
        width = (self.high - self.low) / self.groups
        bucket = episode_index % self.groups
        return float(self.low + (bucket + self._rng.random()) * width)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        index = options.pop("episode_index", self._episode_index)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ValueError(f"Expected options['episode_index'] to be an int >= 0, got {index!r}")
        self._episode_index = int(index) + 1
        prob = self.draw(int(index))
        options.setdefault("random_move_prob", prob)
        return self.env.reset(seed=seed, options=options)
