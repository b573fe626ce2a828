"""``StratifiedOpponent``: per-episode opponent strength, stratified across consecutive episodes."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from textgym.checks import check_int, check_probability
from textgym.core import TextEnv

__all__ = ["OpponentSkill", "StratifiedOpponent"]


class StratifiedOpponent(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Draw the opponent's ``random_move_prob`` per episode from a range, stratified.

    ``random_move_prob`` is the probability that the opponent plays a uniformly random move
    instead of its chosen one, so the high end of the range is the *weaker* opponent. The range
    ``(low, high)`` is split into ``groups`` equal buckets. Episode ``i`` (counted by this
    wrapper from 0, or given as ``reset(options={"episode_index": i})`` by a batched rollout)
    draws uniformly inside bucket ``i % groups``, so any ``groups`` consecutive episodes span
    the whole range: a training batch never consists of only easy or only hard opponents.

    The draw uses the wrapper's own generator, re-seeded whenever ``reset`` gets a seed, so the
    copies of a GRPO group (same seed, same episode index) face the same opponent. An explicit
    ``options["random_move_prob"]`` passed to ``reset`` wins over the draw. The value used is
    reported by the env as ``info["random_move_prob"]``; this wrapper adds no reward component.

    Args:
        env: An env with a seeded opponent (:attr:`textgym.TextEnv.has_opponent`), whose
            ``reset`` accepts ``options={"random_move_prob": p}``.
        random_move_prob: ``(low, high)``, the range, ``0 <= low <= high <= 1``. Default
            ``(0.0, 1.0)``.
        groups: Number of buckets, an int >= 1. Default 1 (one uniform draw from the range).

    Raises:
        ValueError: for a range outside [0, 1], ``low > high``, ``groups < 1``, or an env
            without a seeded opponent.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = StratifiedOpponent(gym.make("textgym/TicTacToe-v0"), (0.0, 1.0), groups=4)
        >>> probs = [env.reset(seed=s)[1]["random_move_prob"] for s in range(4)]
        >>> [int(p * 4) for p in probs]   # one episode in each quarter of [0, 1]
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        random_move_prob: tuple[float, float] = (0.0, 1.0),
        groups: int = 1,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, random_move_prob=random_move_prob, groups=groups
        )
        gym.Wrapper.__init__(self, env)
        try:
            low, high = random_move_prob
            low = check_probability("random_move_prob low", low)
            high = check_probability("random_move_prob high", high)
            if low > high:
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(
                "Expected random_move_prob (low, high) with 0 <= low <= high <= 1, "
                f"got {random_move_prob!r}"
            ) from None
        base = env.unwrapped
        if not (isinstance(base, TextEnv) and base.has_opponent):
            raise ValueError(
                f"{type(base).__name__} has no seeded opponent to stratify "
                "(TextEnv.has_opponent is False); drop the opponent range for this env"
            )
        self.low, self.high = low, high
        self.groups = check_int("groups", groups, low=1)
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
        index = check_int(
            "options['episode_index']", options.pop("episode_index", self._episode_index), low=0
        )
        self._episode_index = index + 1
        options.setdefault("random_move_prob", self.draw(index))
        return self.env.reset(seed=seed, options=options)


class OpponentSkill(StratifiedOpponent):
    """Deprecated name of :class:`StratifiedOpponent`: ``OpponentSkill(env, low, high, groups)``
    is ``StratifiedOpponent(env, random_move_prob=(low, high), groups=groups)``.

    The old name read as a skill, but the range is one of random-move probability, where a
    higher value is a weaker opponent. Emits a ``DeprecationWarning``.
    """

    def __init__(
        self, env: gym.Env[str, str], low: float = 0.0, high: float = 1.0, groups: int = 1
    ):
        warnings.warn(
            "OpponentSkill(env, low, high, groups) is deprecated; use "
            "StratifiedOpponent(env, random_move_prob=(low, high), groups=groups)",
            DeprecationWarning,
            stacklevel=2,
        )
        gym.utils.RecordConstructorArgs.__init__(self, low=low, high=high, groups=groups)
        super().__init__(env, random_move_prob=(low, high), groups=groups)
