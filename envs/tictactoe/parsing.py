"""Parsers for tic-tac-toe completions: pure ``str -> T | None`` functions.

Format (given in the system prompt): optional reasoning inside ``<think>...</think>``, then the
move as ``<move>N</move>`` with ``N`` a row-major cell index 0-8.
"""

from __future__ import annotations

import re

__all__ = ["extract_move_text", "is_well_formed", "parse_move"]

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MOVE_TAG = re.compile(r"<move>(.*?)</move>", re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+")
_WELL_FORMED = re.compile(
    r"\s*<think>(?:(?!</?think>).)*</think>\s*<move>\s*\d\s*</move>\s*", re.DOTALL
)


def extract_move_text(completion: str) -> str | None:
    """Return the stripped content of the last ``<move>`` tag outside ``<think>`` blocks.

    Moves mentioned while reasoning do not count. Returns ``None`` when there is no such tag.
    """
    visible = _THINK_BLOCK.sub(" ", completion)
    found = _MOVE_TAG.findall(visible)
    return found[-1].strip() if found else None


def parse_move(completion: str) -> int | None:
    """Return the move as an int (any range), or ``None`` if no tag holds a plain integer.

    Range and occupancy are checked by the environment, which explains the error.
    """
    text = extract_move_text(completion)
    if text is None or not _INTEGER.fullmatch(text):
        return None
    return int(text)


def is_well_formed(completion: str) -> bool:
    """True iff the completion is exactly ``<think>...</think>`` then ``<move>D</move>``.

    Whitespace around the blocks is allowed; ``D`` is a single digit. This is the format the
    ``FormatReward`` wrapper rewards by default.
    """
    return _WELL_FORMED.fullmatch(completion) is not None
