"""Parsers for GSM8K completions: pure ``str -> T | None`` functions, no ``eval`` of model text.

Format (given in the system prompt): reasoning, then the final answer after ``####`` on the last
line, as in the dataset's own solutions (``#### 18``). ``\\boxed{18}`` is accepted too.

Two steps, each usable on its own:

1. :func:`extract_final_answer` finds the answer text: the rest of the line after the last
   ``####``, or the content of the last balanced ``\\boxed{...}``, whichever starts later.
2. :func:`parse_number` normalises that text to an exact :class:`fractions.Fraction`, so that
   ``"18.0"``, ``"$18"``, ``"18 dollars."`` and ``"The answer is 18"`` all equal 18 and
   ``"1,450,000"`` equals 1450000. Numbers are compared exactly, never as floats.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "MAX_NUMBER_CHARS",
    "extract_final_answer",
    "format_number",
    "is_well_formed",
    "parse_final_answer",
    "parse_number",
]

#: Longest number token accepted, in characters; longer digit runs are not read as numbers
#: (Python refuses to convert integers of over 4,300 digits from text; no answer needs them).
MAX_NUMBER_CHARS = 100

_HASH_ANSWER = re.compile(r"####[^\S\n]*([^\n]*)")
_BOXED = "\\boxed{"
_BRACE = re.compile(r"[\\{}]")
_PLAIN_INTEGER = re.compile(rf"-?[0-9]{{1,{MAX_NUMBER_CHARS}}}")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\{([^{}]*)\}")
_LATEX_SPACE = re.compile(r"\\[,!;: ]")
_DECORATION = re.compile(r"[$€£¥₹%\\{}]")
# A run of characters that may belong to one number (a simple class, so matching is linear).
_NUMBER_RUN = re.compile(r"[0-9.,/-]+")
_DIGIT = re.compile(r"[0-9]")
_NON_SPACE = re.compile(r"\S")
_NUMBER = re.compile(
    r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?"  # 1,450,000 and 1,450.5
    r"|[0-9]+(?:\.[0-9]+)?|\.[0-9]+"  # 18, 18.0, .5
    r"|[0-9]+/[0-9]+)"  # 3/4
)


def _boxed_spans(text: str) -> list[tuple[int, int, int]]:
    """``(start, content start, content end)`` of every balanced ``\\boxed{...}``, in one linear
    pass over the braces.

    Spans, not substrings: nested boxes (``\\boxed{`` 100,000 times, then as many ``}``) would
    otherwise copy quadratic amounts of text. Braces before the first ``\\boxed{`` cannot change
    how the later ones pair up, so the scan starts there.
    """
    found: list[tuple[int, int, int]] = []
    stack: list[tuple[int, int]] = []  # (position of "{", start of its \boxed or -1)
    skip_to = -1
    for match in _BRACE.finditer(text, max(text.find(_BOXED), 0)):
        pos = match.start()
        if pos < skip_to:
            continue
        char = text[pos]
        if char == "}":
            if stack:
                brace, start = stack.pop()
                if start >= 0:
                    found.append((start, brace + 1, pos))
        elif char == "{":
            stack.append((pos, -1))
        elif text.startswith(_BOXED, pos):
            skip_to = pos + len(_BOXED)
            stack.append((skip_to - 1, pos))
    return found


def _is_blank(text: str, lo: int, hi: int) -> bool:
    """Whether ``text[lo:hi]`` is empty or whitespace, without copying it."""
    return _NON_SPACE.search(text, lo, hi) is None


def extract_final_answer(completion: str) -> str | None:
    """Return the stripped text of the completion's final answer, or ``None`` if it has none.

    Candidates are the rest of the line after each ``####`` (empty ones are skipped) and the
    content of each balanced ``\\boxed{...}``; the one that starts last in the completion wins.
    Runs in time linear in the completion.
    """
    best: tuple[int, str] | None = None
    if "####" in completion:
        for match in _HASH_ANSWER.finditer(completion):
            content = match.group(1).strip()
            if content:
                best = (match.start(), content)
    if _BOXED in completion:
        # Latest start first; blank contents hold no brace, so they are disjoint and checking
        # them costs at most one pass.
        for start, lo, hi in sorted(_boxed_spans(completion), reverse=True):
            if best is not None and start < best[0]:
                break
            if not _is_blank(completion, lo, hi):
                best = (start, completion[lo:hi].strip())
                break
    return None if best is None else best[1]


def parse_number(text: str) -> Fraction | None:
    """Normalise an answer's text to an exact number, or ``None`` if it does not hold exactly one.

    Rules, in order:

    - LaTeX: ``\\frac{a}{b}`` becomes ``a/b``; ``\\text{...}`` (and ``\\mathrm``, ``\\textbf``,
      ``\\mbox``) keeps its content; ``{,}`` and thin spaces such as ``\\,`` inside numbers are
      dropped.
    - If the text contains ``=``, only the part after the last ``=`` counts (``x = 18``).
    - Currency signs (``$ € £ ¥ ₹``), percent signs, backslashes and braces are removed; the
      Unicode minus ``−`` reads as ``-``.
    - Everything that is not part of a number is ignored (surrounding words, ``**``, a
      trailing period), and exactly one run of ASCII digits with separators must remain, which
      must read as ``18``, ``-7``, ``18.0``, ``.5``, ``1,450,000`` (commas only as thousands
      separators) or a ratio ``3/4``. A minus sign counts only directly before the digits
      (after currency signs are removed, so ``-$5`` is -5); ``3-5`` is not a number. A number
      longer than :data:`MAX_NUMBER_CHARS` is not read.

    Examples: ``"$1,450,000."`` -> 1450000; ``"18 dollars"`` -> 18; ``"12,34"`` -> None;
    ``"5 apples and 3 pears"`` -> None.
    """
    if _PLAIN_INTEGER.fullmatch(text):  # the common case, e.g. "18" or "-7"
        return Fraction(int(text))
    s = _LATEX_FRAC.sub(r"\1/\2", text)
    s = _LATEX_TEXT.sub(r" \1 ", s)
    s = _LATEX_SPACE.sub("", s.replace("{,}", ","))
    if "=" in s:
        s = s.rsplit("=", 1)[1]
    s = _DECORATION.sub("", s).replace("\u2212", "-")
    runs = [run for run in _NUMBER_RUN.findall(s) if _DIGIT.search(run)]
    if len(runs) != 1:
        return None
    token = runs[0].rstrip(".,/-")
    if len(token) > MAX_NUMBER_CHARS or not _NUMBER.fullmatch(token):
        return None
    negative = token.startswith("-")
    token = token.lstrip("-")
    if "/" in token:
        numerator, denominator = token.split("/")
        if int(denominator) == 0:
            return None
        value = Fraction(int(numerator), int(denominator))
    else:
        value = Fraction(token.replace(",", ""))
    return -value if negative else value


def parse_final_answer(completion: str) -> Fraction | None:
    """:func:`extract_final_answer` then :func:`parse_number`; ``None`` if either fails."""
    text = extract_final_answer(completion)
    return None if text is None else parse_number(text)


def is_well_formed(completion: str) -> bool:
    """True iff the completion has a final answer that reads as a number (the ``format`` term)."""
    return parse_final_answer(completion) is not None


def format_number(value: Fraction) -> str:
    """Canonical text of a number: ``"1450000"``, ``"-7"``, ``"2.5"``, or ``"1/3"`` if not a decimal."""
    if value.denominator == 1:
        return str(value.numerator)
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    digits = 0
    scaled = value
    while scaled.denominator != 1:
        scaled *= 10
        digits += 1
    sign = "-" if scaled < 0 else ""
    magnitude = str(abs(scaled.numerator)).rjust(digits + 1, "0")
    return f"{sign}{magnitude[:-digits]}.{magnitude[-digits:]}"
