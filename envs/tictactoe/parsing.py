"""Parsers for tic-tac-toe completions: pure ``str -> T | None`` functions.

Format (given in the system prompt): optional reasoning inside ``<think>...</think>``, then the
move as ``<move>N</move>`` with ``N`` a row-major cell index 0-8.

Completions are untrusted model output, so every parser here runs in time linear in the text:
the tags are found with ``str.find`` scans (a lazy ``<think>.*?</think>`` regex rescans the rest
of the text from every unclosed opening, which took seconds on 100k characters of repeated
``<think>``), and a move number is never converted digit by digit beyond what can be a cell.
"""

from __future__ import annotations

import re

__all__ = ["extract_move_text", "is_answer", "is_well_formed", "parse_move"]

_INTEGER = re.compile(r"[+-]?\d+")
#: Moves with more significant digits than this are reported as +-10**18: out of range either
#: way, and Python refuses to convert strings of more than 4,300 digits to int.
_MAX_DIGITS = 18


def _blocks(text: str, opening: str, closing: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each ``opening ... closing`` block, left to right, not nested: the
    leftmost opening is closed by the nearest closing after it (what a lazy regex matches).
    One pass over the text."""
    blocks: list[tuple[int, int]] = []
    position = 0
    while (start := text.find(opening, position)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break
        blocks.append((start, end + len(closing)))
        position = end + len(closing)
    return blocks


_WELL_FORMED = re.compile(
    r"\s*<think>(?:(?!</?think>).)*</think>\s*<move>\s*\d\s*</move>\s*", re.DOTALL
)
#: The move of an answer, once surrounding whitespace and the optional think block are gone.
#: (One regex for the whole answer, ``\s*(?:<think>...</think>)?\s*<move>...``, has two
#: adjacent ``\s*`` when the think block is absent: quadratic backtracking, minutes on a
#: million spaces.)
_MOVE_ONLY = re.compile(r"<move>\s*\d\s*</move>")


def extract_move_text(completion: str) -> str | None:
    """Return the stripped content of the last ``<move>`` tag outside ``<think>`` blocks.

    Moves mentioned while reasoning do not count. Returns ``None`` when there is no such tag.
    """
    pieces, position = [], 0
    for start, end in _blocks(completion, "<think>", "</think>"):
        pieces.append(completion[position:start])
        position = end
    pieces.append(completion[position:])
    visible = " ".join(pieces)
    tags = _blocks(visible, "<move>", "</move>")
    if not tags:
        return None
    start, end = tags[-1]
    return visible[start + len("<move>") : end - len("</move>")].strip()


def parse_move(completion: str) -> int | None:
    """Return the move as an int (any range), or ``None`` if no tag holds a plain integer.

    Range and occupancy are checked by the environment, which explains the error. A number of
    more than 18 significant digits comes back as ``+-10**18`` (out of range either way).
    """
    text = extract_move_text(completion)
    if text is None or not _INTEGER.fullmatch(text):
        return None
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        return sign * 10**_MAX_DIGITS
    return sign * int(digits)


def is_well_formed(completion: str) -> bool:
    """True iff the completion is exactly ``<think>...</think>`` then ``<move>D</move>``.

    Whitespace around the blocks is allowed; ``D`` is a single digit. This is the format the
    ``FormatReward`` wrapper rewards by default.
    """
    return _WELL_FORMED.fullmatch(completion) is not None


def is_answer(completion: str) -> bool:
    """True iff the completion is exactly what the prompts ask for and nothing else.

    That is one ``<move>D</move>`` (``D`` a single digit), optionally after one
    ``<think>...</think>`` block, with whitespace around the blocks allowed. Both prompt styles
    accept this: the full prompt says "you may reason inside <think>...</think>", the compact one
    "Reply <move>N</move>". :func:`is_well_formed` is the stricter check that requires reasoning.
    Runs in linear time.
    """
    text = completion.strip()
    if text.startswith("<think>"):
        end = text.find("</think>")
        if end < 0 or "<think>" in text[len("<think>") : end]:
            return False
        text = text[end + len("</think>") :].lstrip()
    return _MOVE_ONLY.fullmatch(text) is not None
