"""Shared helpers of the wrappers (internal): adding a named reward component, and checking
that an env reports the info keys a wrapper reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from textgym.errors import SetupError

__all__ = ["add_component", "require_info_keys"]


def add_component(info: dict[str, Any], reward: float, name: str, value: float) -> dict[str, Any]:
    """Return a copy of ``info`` whose ``reward_components`` also holds ``name: value``.

    An env that reports no components is treated as one component named ``"env"`` so that the
    components always sum to the wrapped reward.

    Raises:
        SetupError: if ``name`` is already a component (two wrappers would overwrite each other).
    """
    components = dict(info.get("reward_components", {"env": float(reward)}))
    if name in components:
        raise SetupError(
            f"Reward component {name!r} is already present ({sorted(components)}); "
            "give this wrapper another name=..."
        )
    components[name] = float(value)
    return {**info, "reward_components": components}


def require_info_keys(wrapper: str, env: gym.Env, keys: Sequence[str], example: str) -> None:
    """Refuse ``env`` unless its step info declares every one of ``keys``.

    An env declares the keys of its step info as ``info_keys`` (:attr:`textgym.TextEnv.info_keys`)
    on the unwrapped env; an env that declares none is refused.

    Args:
        wrapper: The wrapper's name, for the message (``"WinSpeedBonus"``).
        env: The env about to be wrapped.
        keys: The info keys the wrapper reads on every step.
        example: An env id that reports them, for the message (``"textgym/TicTacToe-v0"``).

    Raises:
        SetupError: one line naming the keys the env does not declare.
    """
    base = env.unwrapped
    declared = getattr(base, "info_keys", frozenset())
    missing = [key for key in keys if key not in declared]
    if missing:
        name = env.spec.id if env.spec is not None else type(base).__name__
        needs = " and ".join(f"info[{key!r}]" for key in keys)
        lacks = ", ".join(repr(key) for key in missing)
        raise SetupError(
            f"{wrapper} needs an env that reports {needs} on every step (as {example} does); "
            f"{name} does not ({type(base).__name__}.info_keys lacks {lacks}); leave this "
            "wrapper out for this env"
        )
