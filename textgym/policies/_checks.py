"""Argument checks shared by the LLM policies (internal).

Each raises ``ValueError`` with the expected range and the value seen, and returns the value.
"""

from __future__ import annotations

import math
from typing import Any

from textgym import checks

__all__ = ["check_int", "check_sampling"]


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` must be an ``int`` (not a ``bool``) >= ``minimum``: :func:`textgym.checks.check_int`."""
    return checks.check_int(name, value, low=minimum)


def check_sampling(temperature: Any, top_p: Any) -> tuple[float, float]:
    """Temperature must be finite and >= 0 (0 = greedy); ``top_p`` in (0, 1]."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(f"Expected temperature >= 0, got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"Expected top_p in (0, 1], got {top_p!r}")
    return float(temperature), float(top_p)
