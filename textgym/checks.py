"""Argument checks shared by textgym's envs, wrappers, builder and command line, and
:func:`one_line`, the one-line form of an error message they and the command line print.

Each check returns the value (converted to the plain Python type) or raises ``ValueError`` with
one line that names the argument, says what was expected and shows what was seen, e.g.
``Expected random_move_prob in [0, 1], got 1.5``. A ``bool`` is never accepted as a number
(``True`` is an ``int`` to Python, never a count or a weight to a user); NumPy integers and
floats are.

Example:
    >>> check_int("groups", 4, low=1)
    4
    >>> check_probability("random_move_prob", 1.5)
    Traceback (most recent call last):
    ...
    textgym.errors.SetupError: Expected random_move_prob in [0, 1], got 1.5
"""

from __future__ import annotations

import math
import reprlib
import urllib.parse
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from textgym.errors import SetupError

__all__ = [
    "check_choice",
    "check_int",
    "check_number",
    "check_probability",
    "check_seed",
    "check_stop_strings",
    "check_urls",
    "excerpt",
    "is_finite_number",
    "is_number",
    "one_line",
    "MAX_SEED",
    "SEED_RANGE",
]

_T = TypeVar("_T")


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


#: The largest seed a textgym command accepts: 2**32 - 1, NumPy's legacy seed range, so the
#: derived seeds (a trainer's task ``seed * 10**6 + row``, an evaluation's ``10**9 + seed *
#: 10**6 + i``) stay below 2**63 for torch, NumPy and Gymnasium alike.
MAX_SEED = 2**32 - 1
#: The accepted range as the ``--help`` of every subcommand states it.
SEED_RANGE = f"an integer in [0, {MAX_SEED}] (2**32 - 1)"


#: The most characters of a user's value an error message quotes (:func:`excerpt`).
EXCERPT_CHARS = 200


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (strings with their length, nested
    values by :mod:`reprlib`): what an error message quotes of a user's input, so a
    1M-character value gives a short message.

    Example:
        >>> excerpt("X" * 1_000_000, 30)
        "'XXXXXXX... (1,000,000 chars)"
        >>> excerpt([1, 2])
        '[1, 2]'
    """
    if isinstance(value, str) and len(value) > limit:
        note = f"... ({len(value):,} chars)"
        return repr(value[: max(limit - len(note) - 2, 1)])[:-1] + note
    shown = reprlib.Repr()  # keyword arguments only from Python 3.12
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlong = 4, limit, limit, limit
    try:
        text = shown.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not replace the message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_seed(name: str, value: Any) -> int:
    """The one seed rule of every subcommand: an ``int`` (not a ``bool``) in ``[0, MAX_SEED]``.

    Raises:
        ValueError: ``Expected {name} to be an int in [0, 4294967295] ..., got {value!r}``.
    """
    return check_int(name, value, low=0, high=MAX_SEED, hint="the seed range of every command")


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number: a Python or NumPy ``int`` or ``float``, never a
    ``bool``. NaN and infinities are numbers here; the checks below refuse them.

    Example:
        >>> is_number(3), is_number(np.float32(0.5)), is_number(True), is_number("3")
        (True, True, False, False)
    """
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def is_finite_number(value: Any) -> bool:
    """:func:`is_number` and neither NaN nor infinite: what a table or a curve can show."""
    return is_number(value) and math.isfinite(value)


def check_int(
    name: str, value: Any, *, low: int | None = None, high: int | None = None, hint: str = ""
) -> int:
    """``value`` must be an integer (not a ``bool``) in ``[low, high]`` (``None``: unbounded).

    Args:
        name: The argument's name, as the user wrote it.
        value: What was given.
        low: Smallest allowed value, inclusive, or ``None``.
        high: Largest allowed value, inclusive, or ``None``.
        hint: Added in parentheses after the expectation (why the bound is what it is).

    Raises:
        ValueError: ``Expected {name} to be an int >= {low}, got {value!r}``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        why = f" ({hint})" if hint else ""
        raise SetupError(
            f"Expected {name} to be an int{_bounds(low, high)}{why}, got {excerpt(value)}"
        )
    return int(value)


def check_number(
    name: str, value: Any, *, low: float | None = None, high: float | None = None
) -> float:
    """``value`` must be a finite real number (not a ``bool``) in ``[low, high]``.

    Raises:
        ValueError: ``Expected {name} to be a finite float >= {low}, got {value!r}`` (NaN and
            infinities are refused even without bounds).
    """
    if (
        not is_number(value)
        or not math.isfinite(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        raise SetupError(
            f"Expected {name} to be a finite float{_bounds(low, high)}, got {excerpt(value)}"
        )
    return float(value)


def check_probability(name: str, value: Any) -> float:
    """``value`` must be a real number in [0, 1] (not a ``bool``).

    Raises:
        ValueError: ``Expected {name} in [0, 1], got {value!r}``.
    """
    if not is_number(value) or not 0.0 <= value <= 1.0:  # NaN fails both comparisons
        raise SetupError(f"Expected {name} in [0, 1], got {excerpt(value)}")
    return float(value)


def check_sampling(temperature: Any, top_p: Any) -> tuple[float, float]:
    """The sampling settings of an LLM policy: ``temperature`` finite and >= 0 (0 = greedy),
    ``top_p`` in (0, 1].

    Returns:
        ``(temperature, top_p)`` as floats.

    Raises:
        ValueError: ``Expected temperature >= 0, got {temperature!r}`` or
            ``Expected top_p in (0, 1], got {top_p!r}``.
    """
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise SetupError(f"Expected temperature >= 0, got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise SetupError(f"Expected top_p in (0, 1], got {top_p!r}")
    return float(temperature), float(top_p)


def check_choice(name: str, value: _T, allowed: Sequence[_T]) -> _T:
    """``value`` must be one of ``allowed``.

    Raises:
        ValueError: ``Expected {name} in {allowed}, got {value!r}``.
    """
    try:
        ok = value in allowed
    except TypeError:  # an unhashable value tested against a set or a dict
        ok = False
    if not ok:
        raise SetupError(f"Expected {name} in {tuple(allowed)}, got {excerpt(value)}")
    return value


def check_stop_strings(name: str, value: Any) -> tuple[str, ...]:
    """``value`` must be a sequence of non-empty strings (a single ``str`` is refused).

    Returns:
        The strings as a tuple, in order.

    Raises:
        ValueError: ``Expected {name} to be a sequence of non-empty str, got {value!r}``.
    """
    if isinstance(value, str) or not isinstance(value, Sequence):
        ok = False
    else:
        ok = all(isinstance(s, str) and s for s in value)
    if not ok:
        raise SetupError(
            f"Expected {name} to be a sequence of non-empty str (e.g. ('</answer>',)), "
            f"got {value!r}"
        )
    return tuple(value)


def check_urls(name: str, value: Sequence[str]) -> tuple[str, ...]:
    """``value`` must be server base URLs: ``http://`` or ``https://`` with a host.

    Returns:
        The URLs as a tuple, in order.

    Raises:
        ValueError: ``Expected {name} to be http(s)://HOST[:PORT] URLs, got {value!r}``.
    """
    urls = (value,) if isinstance(value, str) else tuple(value)
    for url in urls:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise SetupError(
                f"Expected {name} to be http(s)://HOST[:PORT] URLs (e.g. http://127.0.0.1:8000), "
                f"got {excerpt(url)}"
            )
    return urls


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line (whitespace collapsed), cut to ``limit`` characters;
    the exception's type name when the message is empty.

    Example:
        >>> one_line(ValueError("Expected a JSON object,\\n  got list"))
        'Expected a JSON object, got list'
        >>> one_line(KeyError())
        'KeyError'
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
