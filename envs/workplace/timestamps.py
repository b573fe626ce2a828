"""Timestamps as the workplace tools read them, and the search bounds built from them.

Every timestamp a tool reads (``event_start``, a search bound, a stored date it is compared
with) goes through :func:`parse_timestamp`: the year-first numeric part of what NeMo Gym's
``workplace_assistant`` tools (a port of WorkBench, Styles et al. 2024) read with
``pandas.Timestamp``. Search bounds are compared as dates or times, never as strings; a bound
that does not parse is a :class:`~.records.ToolError`, and a stored value that is empty or does
not parse lies within no bound (the reference's NaN). ``docs/tool_envs.md`` (section "Agreement
with NeMo Gym's workplace_assistant") gives the reasons.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone
from typing import Any

from textgym.envs.workplace.records import ToolError

__all__ = ["day_bounds", "parse_timestamp", "read_bound", "stored_day", "stored_time", "within"]

#: The timestamps the tools read (``event_start``, search bounds, stored dates): a year-first
#: numeric date, optionally a time, optionally (after a time) a UTC offset. See :func:`parse_timestamp`.
_TIMESTAMP = re.compile(
    r"(?P<y>[0-9]{4})(?:(?P<sep>[-/.])(?P<m>[0-9]{1,2})(?P=sep)(?P<d>[0-9]{1,2})"
    r"|(?P<bm>[0-9]{2})(?P<bd>[0-9]{2}))"
    r"(?:(?:T|\s+)(?:(?P<H>[0-9]{1,2})(?::(?P<M>[0-9]{2})(?::(?P<S>[0-9]{2})"
    r"(?:\.(?P<f>[0-9]{1,9}))?)?)?|(?P<bH>[0-9]{2})(?P<bM>[0-9]{2})(?P<bS>[0-9]{2})?)"
    r"(?:\s*(?P<ampm>[AaPp][Mm]))?"
    r"(?:\s*(?P<tz>Z|UTC|GMT|[+-][0-9]{2}(?::?[0-9]{2})?))?)?"
)
_MAX_TIMESTAMP_CHARS = 64


def parse_timestamp(text: str) -> datetime | None:
    """Read a timestamp the way the workplace tools do; ``None`` if ``text`` is not one.

    Accepted (surrounding whitespace ignored): a year-first numeric date, ``YYYY-MM-DD``,
    ``YYYY/MM/DD`` or ``YYYY.MM.DD`` (one-digit month and day allowed) or ``YYYYMMDD``;
    optionally followed, after ``T`` or spaces, by a time ``HH``, ``H:MM``, ``H:MM:SS`` or
    ``H:MM:SS.fffffffff`` (or ``HHMM[SS]``), an optional ``AM``/``PM`` (then the hour is 0-12,
    and a one-digit hour may stand alone),
    and an optional UTC offset (``Z``, ``UTC``, ``GMT``, ``+HH``, ``+HHMM``, ``+HH:MM``). A date
    alone is its midnight; fractions beyond microseconds are dropped.

    This is the year-first numeric part of what NeMo Gym's reference tools accept
    (``pandas.Timestamp``; ``tests/envs/workplace/test_timestamps.py`` checks the two agree on
    it). Refused although pandas reads them: ISO week and ordinal dates (``2023-W48-5`` is
    refused by pandas too), month- or day-first dates (``12/01/2023``: which is the month
    depends on a convention), month names, a year or month alone, a time without a date and
    ``now``/``today`` (these depend on the real clock, which the workplace freezes).

    Returns:
        A :class:`datetime`, timezone-aware when an offset was given, else naive.
    """
    if not isinstance(text, str) or len(text) > _MAX_TIMESTAMP_CHARS:
        return None
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        return None
    g = m.groupdict()
    if g["H"] and len(g["H"]) == 1 and g["M"] is None and not g["ampm"]:
        return None  # "2023-12-01 9": an hour alone has two digits, or an AM/PM
    if g["ampm"] and g["tz"] and g["tz"][0].isalpha() and m.start("tz") == m.end("ampm"):
        return None  # "10 AMZ" (pandas refuses it; "10 AM Z" and "10:00Z" are read)
    hour = int(g["H"] or g["bH"] or 0)
    if g["ampm"]:
        if hour > 12:
            return None
        hour = hour % 12 + (12 if g["ampm"].lower() == "pm" else 0)
    micro = int((g["f"] or "0")[:6].ljust(6, "0"))
    tz = None
    if g["tz"]:
        sign, digits = g["tz"][0], g["tz"][1:].replace(":", "")
        offset = (
            timedelta(0)
            if sign not in "+-"
            else timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        )
        if offset >= timedelta(hours=24):
            return None
        tz = timezone(-offset if sign == "-" else offset)
    try:
        return datetime(
            int(g["y"]),
            int(g["m"] or g["bm"]),
            int(g["d"] or g["bd"]),
            hour,
            int(g["M"] or g["bM"] or 0),
            int(g["S"] or g["bS"] or 0),
            micro,
            tzinfo=tz,
        )
    except ValueError:  # month 13, February 30th, hour 24, ...
        return None


def read_bound(value: str | None, name: str) -> datetime | None:
    """A search bound (``date_min``, ``time_max``, ...) as a local timestamp; ``None`` if not given.

    Read by :func:`parse_timestamp` (a date alone is its midnight).

    Raises:
        ToolError: for text that is not a timestamp, or that carries a UTC offset (the
            workplace clock has no time zone; the reference crashes comparing such a bound
            with the stored local times).
    """
    if not value:
        return None
    example = "a date such as '2023-11-22' or a timestamp such as '2023-11-22 10:00:00'"
    moment = parse_timestamp(value)
    if moment is None:
        raise ToolError(f"Invalid {name} {value[:80]!r}: expected {example}.")
    if moment.tzinfo is not None:
        raise ToolError(f"Invalid {name} {value[:80]!r}: expected {example}, without a UTC offset.")
    return moment


def day_bounds(low: str | None, high: str | None, names: tuple[str, str]) -> tuple[Any, Any]:
    """Two search bounds as dates (their date part, as WorkBench's ``.dt.date``), else ``None``."""
    bounds = (read_bound(low, names[0]), read_bound(high, names[1]))
    return tuple(None if b is None else b.date() for b in bounds)


def stored_time(value: str) -> datetime | None:
    """A stored timestamp (wall-clock time, any offset dropped), or ``None`` if it does not parse.

    An empty stored value (a CRM customer without a follow-up date) is ``None`` too, so it never
    lies within a bound, as in the reference, where the empty CSV field is NaN.
    """
    moment = parse_timestamp(value)
    return None if moment is None else moment.replace(tzinfo=None)


def stored_day(value: str) -> date | None:
    """The date part of :func:`stored_time`, or ``None``."""
    moment = stored_time(value)
    return None if moment is None else moment.date()


def within(value: datetime | date | None, low: Any, high: Any) -> bool:
    """Whether ``value`` lies in ``[low, high]``, a ``None`` bound being open.

    A value that did not parse (``None``) passes only when there is no bound at all.
    """
    if low is None and high is None:
        return True
    return value is not None and (low is None or value >= low) and (high is None or value <= high)
