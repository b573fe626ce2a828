"""Reverse-text reward terms: small pure functions, combined by the env as an explicit weighted sum.

``reward = lcs_similarity(answer, text[::-1]) + format_weight * format_reward(completion)``.

The similarity is a true longest-common-subsequence ratio computed by ``rapidfuzz`` (exact,
bit-parallel, microseconds for 600-character texts). ``difflib.SequenceMatcher.ratio`` is not
used: it is not an LCS, and its autojunk heuristic ignores characters that occur in more than 1%
of a sequence longer than 200 characters, which distorts exactly the texts this task uses.
"""

from __future__ import annotations

from rapidfuzz.distance import LCSseq

from textgym.envs.reverse_text.parsing import is_well_formed

__all__ = ["format_reward", "lcs_length", "lcs_similarity", "reverse"]


def reverse(text: str) -> str:
    """The exact reversal of ``text``, character (Unicode code point) by character."""
    return text[::-1]


def lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``, in code points."""
    return int(LCSseq.similarity(a, b))


def lcs_similarity(answer: str, target: str) -> float:
    """Normalised LCS similarity in [0, 1]:

        sim(a, t) = LCS(a, t) / max(len(a), len(t)),   and sim("", "") = 1.

    It is exactly 1.0 if and only if ``answer == target`` (an LCS as long as the longer string
    is both strings whole), 0.0 against an empty answer when the target is not empty, and it
    punishes both missing and extra characters. The ratio of two integers is computed directly,
    so no rounding can make an inexact answer score 1.0.
    """
    longest = max(len(answer), len(target))
    if longest == 0:
        return 1.0
    return lcs_length(answer, target) / longest


def format_reward(completion: str) -> float:
    """1.0 if the completion has exactly one well-formed tag pair, else 0.0 (before weighting)."""
    return 1.0 if is_well_formed(completion) else 0.0
