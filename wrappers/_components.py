"""Shared helper for wrappers that add a named reward component (internal)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_component"]


def add_component(info: dict[str, Any], reward: float, name: str, value: float) -> dict[str, Any]:
    """Return a copy of ``info`` whose ``reward_components`` also holds ``name: value``.

    An env that reports no components is treated as one component named ``"env"`` so that the
    components always sum to the wrapped reward.

    Raises:
        ValueError: if ``name`` is already a component (two wrappers would overwrite each other).
    """
    components = dict(info.get("reward_components", {"env": float(reward)}))
    if name in components:
        raise ValueError(
            f"Reward component {name!r} is already present ({sorted(components)}); "
            "give this wrapper another name=..."
        )
    components[name] = float(value)
    return {**info, "reward_components": components}
