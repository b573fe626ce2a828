"""Parsers for reverse-text completions: pure ``str -> T | None`` functions.

Format (given in the system prompt): the reversed text inside one
``<reversed_text>...</reversed_text>`` pair; text outside the pair is allowed.
"""

from __future__ import annotations

__all__ = ["CLOSE_TAG", "OPEN_TAG", "extract_reversed_text", "is_well_formed"]

OPEN_TAG = "<reversed_text>"
CLOSE_TAG = "</reversed_text>"


def extract_reversed_text(completion: str) -> str | None:
    """Return the answer: the content of the last complete tag pair, stripped of outer whitespace.

    The last ``</reversed_text>`` closes the pair and the nearest ``<reversed_text>`` before it
    opens it. Returns ``None`` when there is no such pair. Runs in linear time.
    """
    end = completion.rfind(CLOSE_TAG)
    if end < 0:
        return None
    start = completion.rfind(OPEN_TAG, 0, end)
    if start < 0:
        return None
    return completion[start + len(OPEN_TAG) : end].strip()


def is_well_formed(completion: str) -> bool:
    """True iff the completion holds exactly one opening and one closing tag, in that order."""
    return (
        completion.count(OPEN_TAG) == 1
        and completion.count(CLOSE_TAG) == 1
        and completion.find(OPEN_TAG) < completion.find(CLOSE_TAG)
    )
