"""``textgym list``: the registered environments, one line each.

textgym's own ids with their one-line descriptions, then the ids that installed packages
register through the ``textgym.envs`` entry point, with their entry points.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym

import textgym
from textgym.builder import load_entry_points
from textgym.checks import one_line
from textgym.errors import UsageError
from textgym.registration import COMPOSITES

__all__ = ["ListConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class ListConfig:
    """List the registered environments (no options)."""


Config = ListConfig


def run(config: ListConfig) -> int:
    """Print each id and its description."""
    before = set(gym.registry)
    try:
        load_entry_points()
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    rows = dict(textgym.ENV_DESCRIPTIONS)
    rows.update((entry.id, entry.description) for entry in COMPOSITES)
    for env_id in sorted(set(gym.registry) - before):
        entry_point = gym.registry[env_id].entry_point
        rows[env_id] = entry_point if isinstance(entry_point, str) else repr(entry_point)
    width = max(len(i) for i in rows)
    for env_id, description in rows.items():
        print(f"{env_id:<{width}}  {description}")
    return 0
