"""``FormatReward``: a reward component for completions that follow the task's format."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from textgym.core import TextEnv
from textgym.errors import SetupError
from textgym.spaces import TOO_LONG
from textgym.wrappers._components import add_component

__all__ = ["FormatReward"]


class FormatReward(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Add ``weight`` × (fraction of the episode's actions that are well formed) at episode end.

    The component is paid once, on the step that terminates or truncates the episode, so a
    policy cannot farm it by stalling; on every other step it is 0.0. For tic-tac-toe "well
    formed" means ``<think>...</think>`` followed by ``<move>D</move>`` and nothing else (the
    format of anakin87's verifiers environment, weight 0.2 as there).

    Args:
        env: The env to wrap. Apply it outside ``TimeLimit`` (``gymnasium.make`` does) so the
            truncating step is seen.
        weight: Component weight, >= 0. Default 0.2.
        is_well_formed: ``str -> bool`` format check. Default: the env's public
            format check (:attr:`textgym.TextEnv.is_well_formed`).
        name: Name of the component in ``info["reward_components"]``. Default ``"format"``.

    Raises:
        SetupError: if ``weight`` is negative or not finite, or if the env already pays a component of this
            ``name``: ``textgym/GSM8K-v0`` and ``textgym/ReverseText-v0`` pay their own
            ``format`` component (their ``format_weight`` argument sets it), so a second one
            would pay the format twice. Raised here rather than at the first step.
        TypeError: if no check is given and the env has no format check (it is not a
            ``textgym.TextEnv``, or its ``is_well_formed`` is ``None``).

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = FormatReward(gym.make("textgym/TicTacToe-v0", opponent="random"))
        >>> _ = env.reset(seed=0)
        >>> _, reward, terminated, _, info = env.step("<move>4</move>")   # no <think>: not well formed
        >>> info["reward_components"]["format"]
        0.0
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        weight: float = 0.2,
        is_well_formed: Callable[[str], bool] | None = None,
        name: str = "format",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, weight=weight, is_well_formed=is_well_formed, name=name
        )
        gym.Wrapper.__init__(self, env)
        if not math.isfinite(weight) or weight < 0:  # NaN passes `< 0`: check it first
            raise SetupError(f"Expected a finite weight >= 0, got {weight}")
        base = env.unwrapped
        text_env = isinstance(base, TextEnv)  # the env contract; other envs declare none of it
        own_weight = base.format_weight if text_env else None
        if name == "format" and own_weight is not None:
            raise SetupError(
                f"{type(base).__name__} already pays a 'format' reward component "
                f"(format_weight={own_weight}), so FormatReward would pay the format twice; set "
                "the env's format_weight instead (e.g. gymnasium.make(..., format_weight=0.2), "
                "or --env-kwargs '{\"format_weight\": 0.2}'), or give FormatReward another name=..."
            )
        if is_well_formed is None:
            is_well_formed = base.is_well_formed if text_env else None
            if is_well_formed is None:
                raise TypeError(
                    f"{type(base).__name__} has no is_well_formed(action) format check; "
                    "pass is_well_formed=... to FormatReward"
                )
        self.weight = float(weight)
        self.check = is_well_formed
        self.name = name
        self._actions = 0
        self._well_formed = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._actions = 0
        self._well_formed = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str):
        self._actions += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        # An action over the env's length limit is not read by the env, so not by the check.
        if info.get("invalid_reason") != TOO_LONG:
            self._well_formed += bool(isinstance(action, str) and self.check(action))
        value = 0.0
        if terminated or truncated:
            value = self.weight * self._well_formed / self._actions
        info = add_component(info, reward, self.name, value)
        return obs, float(reward) + value, terminated, truncated, info
