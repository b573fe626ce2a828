"""``InvalidActionPenalty``: a negative reward component for invalid actions."""

from __future__ import annotations

import math
from typing import Any, Literal

import gymnasium as gym

from textgym.errors import SetupError
from textgym.wrappers._components import add_component

__all__ = ["InvalidActionPenalty"]


class InvalidActionPenalty(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Penalise invalid actions (``info["invalid_action"]``) with a named reward component.

    ``mode="episode"`` (default) subtracts ``penalty`` once, on the first invalid action of the
    episode. It is flat because a reasoning trace cut by the token limit is also an invalid
    action, and a per-action penalty would teach the policy to stop reasoning.
    ``mode="action"`` subtracts ``penalty`` on every invalid action until the episode's total
    penalty reaches ``cap`` (``None``: no cap).

    Args:
        env: An env that reports ``info["invalid_action"]`` on every step.
        penalty: Size of the penalty, >= 0. Default 0.1.
        mode: ``"episode"`` or ``"action"``.
        cap: Largest total penalty per episode in ``"action"`` mode, >= 0 or ``None``.
        name: Component name. Default ``"invalid_action"``.

    Raises:
        SetupError: for a negative or non-finite penalty or cap, or an unknown mode.
        KeyError: from ``step`` if the env's info has no ``invalid_action`` key.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = InvalidActionPenalty(gym.make("textgym/TicTacToe-v0"))
        >>> _ = env.reset(seed=0)
        >>> env.step("I move to the centre")[1], env.step("no tag again")[1]
        (-0.1, 0.0)
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        penalty: float = 0.1,
        mode: Literal["episode", "action"] = "episode",
        cap: float | None = None,
        name: str = "invalid_action",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, penalty=penalty, mode=mode, cap=cap, name=name
        )
        gym.Wrapper.__init__(self, env)
        if not math.isfinite(penalty) or penalty < 0:  # NaN passes `< 0`: check it first
            raise SetupError(f"Expected a finite penalty >= 0, got {penalty}")
        if mode not in ("episode", "action"):
            raise SetupError(f'Expected mode "episode" or "action", got {mode!r}')
        if cap is not None and (not math.isfinite(cap) or cap < 0):
            raise SetupError(f"Expected a finite cap >= 0 or None, got {cap}")
        self.penalty = float(penalty)
        self.mode = mode
        self.cap = cap
        self.name = name
        self._charged = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._charged = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "invalid_action" not in info:
            raise KeyError(
                f"InvalidActionPenalty needs info['invalid_action'] from {type(self.env.unwrapped).__name__}"
            )
        value = 0.0
        if info["invalid_action"]:
            if self.mode == "episode":
                limit = self.penalty
            else:
                limit = float("inf") if self.cap is None else self.cap
            value = -min(self.penalty, max(limit - self._charged, 0.0))
            self._charged -= value
        info = add_component(info, reward, self.name, value)
        return obs, float(reward) + value, terminated, truncated, info
