"""Stop strings on decoded text: where a completion that holds one ends.

A stop string may be split across tokens, so it is looked for in the decoded text: the text is
cut right after the stop string that ends first (:func:`cut_at_stop`), and the tokens after the
first one whose prefix text holds a stop string (:func:`stop_token_end`). Every local-model
policy cuts its completions by this rule, whichever decoder sampled them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["cut_at_stop", "stop_string_list", "stop_token_end"]


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` right after the stop string that ends first, keeping the stop string.

    The stop string that *ends* first wins, because that is where generation would have halted
    (``"abcd"`` with stops ``["abc", "b"]`` gives ``"ab"``).

    Args:
        text: Decoded completion text.
        stop: Stop strings (non-empty).

    Returns:
        ``(text, found)``: the cut text and whether a stop string occurred.
    """
    ends = [index + len(s) for s in stop if (index := text.find(s)) >= 0]
    if not ends:
        return text, False
    return text[: min(ends)], True


def stop_string_list(stop: Any) -> list[str]:
    """``stop`` (a list of non-empty strings, or ``None`` for none) as a new list.

    Raises:
        ValueError: a single string (``stop=[...]`` was meant), or an item that is not a
            non-empty string.
    """
    if isinstance(stop, str):
        raise ValueError(
            f"Expected stop to be a list of strings, got the string {stop!r}; use stop=[{stop!r}]"
        )
    stop = list(stop or [])
    if not all(isinstance(s, str) and s for s in stop):
        raise ValueError(f"Expected stop strings to be non-empty strings, got {stop!r}")
    return stop


def stop_token_end(
    ids: Sequence[int], end: int, text_of: Callable[[Sequence[int]], str], stop: Sequence[str]
) -> int | None:
    """The tokens up to the first whose prefix text holds a stop string, among ``ids[:end]``.

    Prefix texts only grow, so the shortest such prefix is found by bisection.

    Args:
        ids: Generated token ids ``[S]``.
        end: Tokens of ``ids`` to look at (up to the end token, if any).
        text_of: Decodes ids to text.
        stop: Stop strings (non-empty).

    Returns:
        The length of the shortest prefix whose text holds a stop string, or ``None`` when the
        text of ``ids[:end]`` holds none.
    """
    if not cut_at_stop(text_of(ids[:end]), stop)[1]:
        return None
    low, high = 1, end
    while low < high:
        middle = (low + high) // 2
        if cut_at_stop(text_of(ids[:middle]), stop)[1]:
            high = middle
        else:
            low = middle + 1
    return low
