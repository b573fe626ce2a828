"""The 27 workplace tools as plain functions over a :class:`~.sandbox.Sandbox`.

Semantics follow ``../shared/data/workplace/TOOLS.md`` (the NeMo Gym ``workplace_assistant``
port of WorkBench, Styles et al. 2024): all values are strings except ``page``/``page_size``;
search tools marked paginated return 5 items per page with a ``pagination`` block (its total
named ``total_emails``/``total_events``/``total_customers`` as there), pages out of range
clamped; the clock is frozen at 2023-11-30 23:59:00. Where textgym departs from the reference on
purpose, ``docs/tool_envs.md`` (section "Agreement with NeMo Gym's workplace_assistant") says
why; in short:

- Timestamps (``event_start``, every search bound, the stored dates they are compared with) are
  read by :func:`parse_timestamp`, the year-first numeric part of what the reference's
  ``pandas.Timestamp`` reads. Search bounds are compared as dates or times, never as strings:
  ``email_search_emails``, the analytics counts and the CRM date filters compare the date part
  (WorkBench's ``.dt.date`` filter), ``calendar_search_events`` the timestamp; a bound that does
  not parse is a :class:`ToolError`; a stored value that is empty or does not parse lies within
  no bound (the reference's NaN).
- ``customer_relationship_manager_add_customer`` stores any status and product interest, as the
  reference does; only ``..._update_customer`` checks them.
- Reads never write: ``analytics_get_average_session_duration`` leaves the stored durations as
  text (the reference turns them into floats in place).
- Error results say what was expected in textgym's own words; the not-found errors and "No
  search parameters provided." keep the reference's first sentence.

The errors (``"Email not found."``, a bad enum value, a missing argument) are raised as
:class:`ToolError` *before* anything is written, so a failed call never changes the tables; any
other exception is a bug and propagates.

:data:`TOOLS` maps each name to ``(function, is_write)``; :data:`TOOL_SCHEMAS` are project-written
OpenAI function schemas with the same names, parameters and types as NeMo Gym's, used when a data
folder brings no ``schemas/tool_schemas.json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from typing import Any

from textgym.envs.workplace.sandbox import TABLE_COLUMNS, Sandbox

__all__ = [
    "NOW",
    "TOOLS",
    "TOOL_SCHEMAS",
    "WRITE_TOOLS",
    "ToolError",
    "call_tool",
    "parse_timestamp",
]

#: The frozen clock of the workplace (TOOLS.md, section 1).
NOW = "2023-11-30 23:59:00"
PAGE_SIZE = 5

# The columns live in one table, the sandbox's schema.
EMAIL_FIELDS = TABLE_COLUMNS["emails"]
EVENT_FIELDS = TABLE_COLUMNS["calendar_events"]
TASK_FIELDS = TABLE_COLUMNS["project_tasks"]
CRM_FIELDS = TABLE_COLUMNS["customer_relationship_manager"]
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
TRAFFIC_SOURCES = ("direct", "referral", "search engine", "social media")
PLOT_VALUES = (
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")


class ToolError(Exception):
    """An error result defined by the tool's semantics; the call changed nothing."""


# ---------------------------------------------------------------- helpers


def _next_id(sb: Sandbox, table: str, column: str) -> int:
    ids = [
        int(v) for v in sb.column(table, column) if v.isdecimal() and len(v) < 1000
    ]  # int() caps digits
    return max(ids, default=-1) + 1


def _is_email(value: str) -> bool:
    return "@" in value and "." in value


def _paginate(items: list[Any], key: str, page: Any, page_size: Any) -> dict[str, Any]:
    """One page of ``items`` under ``key``, with the reference's ``pagination`` block.

    The total is named after the items (``total_emails``, ``total_events``,
    ``total_customers``), as NeMo Gym's tools name it. A ``page_size`` below 1 counts as 1 and
    ``page`` is clamped to the pages there are (the reference divides by zero, or returns an
    empty page, instead).
    """
    size = max(1, int(page_size))
    total_pages = max(1, math.ceil(len(items) / size))
    page = min(max(1, int(page)), total_pages)
    chunk = items[(page - 1) * size : page * size]
    return {
        key: chunk,
        "pagination": {
            f"total_{key}": len(items),
            "page": page,
            "page_size": size,
            "total_pages": total_pages,
        },
    }


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


def _parse_start(value: str) -> None:
    if parse_timestamp(value) is None:
        raise ToolError(
            f"Invalid event start {value[:80]!r}: expected a timestamp such as "
            "'2023-12-01 13:00:00' (year first)."
        )


def _parse_duration(value: str) -> None:
    try:
        ok = int(value) > 0
    except ValueError:
        ok = False
    if not ok:
        raise ToolError(f"Invalid duration {value!r}: expected a positive whole number of minutes.")


def _bound(value: str | None, name: str) -> datetime | None:
    """A search bound (``date_min``, ``time_max``, ...) as a local timestamp; ``None`` if not given.

    Read by :func:`parse_timestamp` (a date alone is its midnight). Raises :class:`ToolError`
    for text that is not a timestamp, or that carries a UTC offset (the workplace clock has no
    time zone; the reference crashes comparing such a bound with the stored local times).
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


def _day_bounds(low: str | None, high: str | None, names: tuple[str, str]) -> tuple[Any, Any]:
    """Two search bounds as dates (their date part), ``None`` where not given."""
    bounds = (_bound(low, names[0]), _bound(high, names[1]))
    return tuple(None if b is None else b.date() for b in bounds)


def _stored_time(value: str) -> datetime | None:
    """A stored timestamp (wall-clock time, any offset dropped), or ``None`` if it does not parse.

    An empty stored value (a CRM customer without a follow-up date) is ``None`` too, so it never
    lies within a bound, as in the reference, where the empty CSV field is NaN.
    """
    moment = parse_timestamp(value)
    return None if moment is None else moment.replace(tzinfo=None)


def _stored_day(value: str) -> date | None:
    moment = _stored_time(value)
    return None if moment is None else moment.date()


def _within(value: datetime | None, low: Any, high: Any) -> bool:
    """Whether ``value`` lies in ``[low, high]``, a ``None`` bound being open.

    A value that did not parse (``None``) passes only when there is no bound at all.
    """
    if low is None and high is None:
        return True
    return value is not None and (low is None or value >= low) and (high is None or value <= high)


def _check_event_id(event_id: str) -> None:
    if not (len(event_id) == 8 and event_id.isdecimal()):
        raise ToolError("Invalid event ID format: expected 8 digits, such as '00000042'.")


def _choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ToolError(f"Invalid {what} {value!r}: expected one of {', '.join(allowed)}.")


def _require(what: str, *values: Any) -> None:
    if any(v is None or v == "" for v in values):
        raise ToolError(f"{what} not provided.")


# ---------------------------------------------------------------- company directory


def company_directory_find_email_address(sb: Sandbox, name: str = "") -> Any:
    if not name:
        raise ToolError("Name not provided.")
    return [a for a in sb.directory if name.lower() in a.lower()]


# ---------------------------------------------------------------- email


def _email(sb: Sandbox, email_id: str) -> dict[str, str]:
    row = sb.find("emails", "email_id", email_id)
    if row is None:
        raise ToolError("Email not found.")
    return row


def email_get_email_information_by_id(
    sb: Sandbox, email_id: str | None = None, field: str | None = None
) -> Any:
    _require("Email ID or field", email_id, field)
    row = _email(sb, email_id)
    if field not in EMAIL_FIELDS:
        raise ToolError(f"Field not found: expected one of {', '.join(EMAIL_FIELDS)}.")
    return {field: row[field]}


def email_search_emails(
    sb: Sandbox,
    query: str = "",
    date_min: str | None = None,
    date_max: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Any:
    words = query.lower().split()
    low, high = _day_bounds(date_min, date_max, ("date_min", "date_max"))  # WorkBench: .dt.date
    found = []
    for row in sb.rows("emails"):
        text = " ".join((row["subject"], row["body"], row["sender/recipient"])).lower()
        if all(w in text for w in words) and _within(_stored_day(row["sent_datetime"]), low, high):
            found.append(row)
    if not found:
        return "No emails found."
    found.sort(key=lambda r: r["sent_datetime"], reverse=True)
    return _paginate(found, "emails", page, page_size)


def _append_email(sb: Sandbox, recipient: str, subject: str, body: str) -> None:
    if not _is_email(recipient):
        raise ToolError(f"Invalid recipient {recipient!r}: expected an email address.")
    sb.insert(
        "emails",
        {
            "email_id": str(_next_id(sb, "emails", "email_id")),
            "inbox/outbox": "outbox",
            "sender/recipient": recipient.lower(),
            "subject": subject,
            "sent_datetime": NOW,
            "body": body,
        },
    )


def email_send_email(
    sb: Sandbox, recipient: str | None = None, subject: str | None = None, body: str | None = None
) -> Any:
    _require("Recipient, subject or body", recipient, subject, body)
    _append_email(sb, recipient, subject, body)
    return "Email sent successfully."


def email_delete_email(sb: Sandbox, email_id: str | None = None) -> Any:
    _require("Email ID", email_id)
    _email(sb, email_id)
    sb.delete("emails", "email_id", email_id)
    return "Email deleted successfully."


def email_forward_email(
    sb: Sandbox, email_id: str | None = None, recipient: str | None = None
) -> Any:
    _require("Email ID or recipient", email_id, recipient)
    row = _email(sb, email_id)
    _append_email(sb, recipient, "FW: " + row["subject"], row["body"])
    return "Email forwarded successfully."


def email_reply_email(sb: Sandbox, email_id: str | None = None, body: str | None = None) -> Any:
    _require("Email ID or body", email_id, body)
    row = _email(sb, email_id)
    _append_email(sb, row["sender/recipient"], "RE: " + row["subject"], body)
    return "Email replied successfully."


# ---------------------------------------------------------------- calendar


def _event(sb: Sandbox, event_id: str) -> dict[str, str]:
    _check_event_id(event_id)
    row = sb.find("calendar_events", "event_id", event_id)
    if row is None:
        raise ToolError("Event not found.")
    return row


def calendar_get_event_information_by_id(
    sb: Sandbox, event_id: str | None = None, field: str | None = None
) -> Any:
    _require("Event ID or field", event_id, field)
    row = _event(sb, event_id)
    if field not in EVENT_FIELDS:
        raise ToolError(f"Field not found: expected one of {', '.join(EVENT_FIELDS)}.")
    return {field: row[field]}


def calendar_search_events(
    sb: Sandbox,
    query: str = "",
    time_min: str | None = None,
    time_max: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Any:
    q = query.lower()
    low, high = _bound(time_min, "time_min"), _bound(time_max, "time_max")
    found = [
        r
        for r in sb.rows("calendar_events")
        if (q in r["event_name"].lower() or q in r["participant_email"].lower())
        and _within(_stored_time(r["event_start"]), low, high)
    ]
    if not found:
        return "No events found."
    # Latest first by the time each start stands for ("2023/12/04 13:30:00" is a valid start).
    found.sort(key=lambda r: (_stored_time(r["event_start"]) or datetime.min, r["event_start"]))
    found.reverse()
    return _paginate(found, "events", page, page_size)


def calendar_create_event(
    sb: Sandbox,
    event_name: str | None = None,
    participant_email: str | None = None,
    event_start: str | None = None,
    duration: str | None = None,
) -> Any:
    _require(
        "Event name, participant email, start or duration",
        event_name,
        participant_email,
        event_start,
        duration,
    )
    _parse_start(event_start)
    _parse_duration(duration)
    event_id = f"{_next_id(sb, 'calendar_events', 'event_id'):08d}"
    sb.insert(
        "calendar_events",
        {
            "event_id": event_id,
            "event_name": event_name,
            "participant_email": participant_email.lower(),
            "event_start": event_start,
            "duration": duration,
        },
    )
    return event_id


def calendar_delete_event(sb: Sandbox, event_id: str | None = None) -> Any:
    _require("Event ID", event_id)
    _event(sb, event_id)
    sb.delete("calendar_events", "event_id", event_id)
    return "Event deleted successfully."


def calendar_update_event(
    sb: Sandbox, event_id: str | None = None, field: str | None = None, new_value: str | None = None
) -> Any:
    _require("Event ID, field or new value", event_id, field, new_value)
    _event(sb, event_id)
    if field not in EVENT_FIELDS[1:]:
        raise ToolError(f"Field not found: expected one of {', '.join(EVENT_FIELDS[1:])}.")
    if field == "event_start":
        _parse_start(new_value)
    elif field == "duration":
        _parse_duration(new_value)
    elif field == "participant_email":
        new_value = new_value.lower()
    sb.update("calendar_events", "event_id", event_id, field, new_value)
    return "Event updated successfully."


# ---------------------------------------------------------------- analytics


def _visits(sb: Sandbox, time_min: str | None, time_max: str | None) -> list[dict[str, str]]:
    """The visits whose date lies within the bounds' dates (parsed, never compared as strings)."""
    low, high = _day_bounds(time_min, time_max, ("time_min", "time_max"))
    return [
        r for r in sb.rows("analytics_data") if _within(_stored_day(r["date_of_visit"]), low, high)
    ]


def _per_day(
    rows: list[dict[str, str]], value: Callable[[dict[str, str]], float]
) -> dict[str, list[float]]:
    days: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: r["date_of_visit"]):
        days.setdefault(r["date_of_visit"], []).append(value(r))
    return days


def analytics_get_visitor_information_by_id(sb: Sandbox, visitor_id: str | None = None) -> Any:
    _require("Visitor ID", visitor_id)
    rows = sb.rows("analytics_data", '"visitor_id" = ?', (visitor_id,))
    if not rows:
        raise ToolError("Visitor not found.")
    # user_engaged is a boolean, as the reference loads it (``== "True"``); the rest stays text.
    return [dict(r, user_engaged=r["user_engaged"] == "True") for r in rows]


def analytics_total_visits_count(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    return {d: len(v) for d, v in _per_day(_visits(sb, time_min, time_max), lambda r: 1).items()}


def analytics_engaged_users_count(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    days = _per_day(_visits(sb, time_min, time_max), lambda r: r["user_engaged"] == "True")
    return {d: int(sum(v)) for d, v in days.items()}


def analytics_traffic_source_count(
    sb: Sandbox,
    time_min: str | None = None,
    time_max: str | None = None,
    traffic_source: str | None = None,
) -> Any:
    if traffic_source:
        _choice(traffic_source, TRAFFIC_SOURCES, "traffic source")
    days = _per_day(
        _visits(sb, time_min, time_max),
        lambda r: not traffic_source or r["traffic_source"] == traffic_source,
    )
    return {d: int(sum(v)) for d, v in days.items()}


def analytics_get_average_session_duration(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    days = _per_day(_visits(sb, time_min, time_max), lambda r: float(r["session_duration_seconds"]))
    return {d: sum(v) / len(v) for d, v in days.items()}


def analytics_create_plot(
    sb: Sandbox,
    time_min: str | None = None,
    time_max: str | None = None,
    value_to_plot: str | None = None,
    plot_type: str | None = None,
) -> Any:
    _require(
        "Start date, end date, value to plot or plot type",
        time_min,
        time_max,
        value_to_plot,
        plot_type,
    )
    _choice(value_to_plot, PLOT_VALUES, "value to plot")
    _choice(plot_type, PLOT_TYPES, "plot type")
    path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    sb.insert("plots", {"file_path": path})
    return path


# ---------------------------------------------------------------- project management


def _task(sb: Sandbox, task_id: str) -> dict[str, str]:
    row = sb.find("project_tasks", "task_id", task_id)
    if row is None:
        raise ToolError("Task not found.")
    return row


def _check_assignee(sb: Sandbox, email: str) -> None:
    if email.lower() not in {a.lower() for a in sb.column("project_tasks", "assigned_to_email")}:
        raise ToolError(
            f"Assignee {email!r} not found: choose someone who already has tasks on the board."
        )


def project_management_get_task_information_by_id(
    sb: Sandbox, task_id: str | None = None, field: str | None = None
) -> Any:
    _require("Task ID or field", task_id, field)
    row = _task(sb, task_id)
    if field not in TASK_FIELDS:
        raise ToolError(f"Field not found: expected one of {', '.join(TASK_FIELDS)}.")
    return {field: row[field]}


def project_management_search_tasks(
    sb: Sandbox,
    task_name: str | None = None,
    assigned_to_email: str | None = None,
    list_name: str | None = None,
    due_date: str | None = None,
    board: str | None = None,
) -> Any:
    filters = {"task_name": task_name, "list_name": list_name, "due_date": due_date, "board": board}
    if not any(filters.values()) and not assigned_to_email:
        raise ToolError("No search parameters provided.")
    if assigned_to_email and not _is_email(assigned_to_email):
        raise ToolError(f"Invalid assignee {assigned_to_email!r}: expected an email address.")
    return [
        r
        for r in sb.rows("project_tasks")
        if (not assigned_to_email or r["assigned_to_email"].lower() == assigned_to_email.lower())
        and all(not v or v.lower() in r[k].lower() for k, v in filters.items())
    ]


def project_management_create_task(
    sb: Sandbox,
    task_name: str | None = None,
    assigned_to_email: str | None = None,
    list_name: str | None = None,
    due_date: str | None = None,
    board: str | None = None,
) -> Any:
    _require(
        "Task name, assignee, list, due date or board",
        task_name,
        assigned_to_email,
        list_name,
        due_date,
        board,
    )
    _check_assignee(sb, assigned_to_email)
    _choice(list_name, LISTS, "list name")
    _choice(board, BOARDS, "board")
    task_id = f"{_next_id(sb, 'project_tasks', 'task_id'):08d}"
    sb.insert(
        "project_tasks",
        {
            "task_id": task_id,
            "task_name": task_name,
            "assigned_to_email": assigned_to_email.lower(),
            "list_name": list_name,
            "due_date": due_date,
            "board": board,
        },
    )
    return task_id


def project_management_delete_task(sb: Sandbox, task_id: str | None = None) -> Any:
    _require("Task ID", task_id)
    _task(sb, task_id)
    sb.delete("project_tasks", "task_id", task_id)
    return "Task deleted successfully."


def project_management_update_task(
    sb: Sandbox, task_id: str | None = None, field: str | None = None, new_value: str | None = None
) -> Any:
    _require("Task ID, field or new value", task_id, field, new_value)
    _task(sb, task_id)
    if field not in TASK_FIELDS:
        raise ToolError(f"Field not found: expected one of {', '.join(TASK_FIELDS)}.")
    if field == "list_name":
        _choice(new_value, LISTS, "list name")
    elif field == "board":
        _choice(new_value, BOARDS, "board")
    elif field == "assigned_to_email":
        _check_assignee(sb, new_value)
        new_value = new_value.lower()
    sb.update("project_tasks", "task_id", task_id, field, new_value)
    return "Task updated successfully."


# ---------------------------------------------------------------- customer relationship manager


def _customer(sb: Sandbox, customer_id: str) -> dict[str, str]:
    row = sb.find("customer_relationship_manager", "customer_id", customer_id)
    if row is None:
        raise ToolError("Customer not found.")
    return row


def _crm_value(field: str, value: str) -> str:
    if field == "status":
        _choice(value, STATUSES, "status")
    elif field == "product_interest":
        _choice(value, PRODUCTS, "product interest")
    elif field in ("customer_email", "assigned_to_email"):
        return value.lower()
    return value


def customer_relationship_manager_search_customers(
    sb: Sandbox,
    customer_name: str | None = None,
    customer_email: str | None = None,
    product_interest: str | None = None,
    status: str | None = None,
    assigned_to_email: str | None = None,
    last_contact_date_min: str | None = None,
    last_contact_date_max: str | None = None,
    follow_up_by_min: str | None = None,
    follow_up_by_max: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Any:
    text = {
        "customer_name": customer_name,
        "customer_email": customer_email,
        "product_interest": product_interest,
        "status": status,
        "assigned_to_email": assigned_to_email,
    }
    dates = {
        "last_contact_date": ("last_contact_date_min", last_contact_date_min),
        "follow_up_by": ("follow_up_by_min", follow_up_by_min),
    }
    highs = {"last_contact_date": last_contact_date_max, "follow_up_by": follow_up_by_max}
    if not any(text.values()) and not any(v for _, v in dates.values()) and not any(highs.values()):
        raise ToolError("No search parameters provided.")
    ranges = {
        column: _day_bounds(low, highs[column], (low_name, low_name[:-3] + "max"))
        for column, (low_name, low) in dates.items()
    }
    found = [
        r
        for r in sb.rows("customer_relationship_manager")
        if all(not v or v.lower() in r[k].lower() for k, v in text.items())
        and all(_within(_stored_day(r[k]), low, high) for k, (low, high) in ranges.items())
    ]
    if not found:
        return "No customers found."
    return _paginate(found, "customers", page, page_size)


def customer_relationship_manager_update_customer(
    sb: Sandbox,
    customer_id: str | None = None,
    field: str | None = None,
    new_value: str | None = None,
) -> Any:
    _require("Customer ID, field or new value", customer_id, field, new_value)
    _customer(sb, customer_id)
    if field not in CRM_FIELDS:
        raise ToolError(f"Field not valid: expected one of {', '.join(CRM_FIELDS)}.")
    sb.update(
        "customer_relationship_manager",
        "customer_id",
        customer_id,
        field,
        _crm_value(field, new_value),
    )
    return "Customer updated successfully."


def customer_relationship_manager_add_customer(
    sb: Sandbox,
    customer_name: str | None = None,
    assigned_to_email: str | None = None,
    status: str | None = None,
    customer_email: str | None = None,
    customer_phone: str | None = None,
    last_contact_date: str | None = None,
    product_interest: str | None = None,
    notes: str | None = None,
    follow_up_by: str | None = None,
) -> Any:
    _require("Customer name, assignee or status", customer_name, assigned_to_email, status)
    given = {
        "customer_name": customer_name,
        "assigned_to_email": assigned_to_email,
        "status": status,
        "customer_email": customer_email,
        "customer_phone": customer_phone,
        "last_contact_date": last_contact_date,
        "product_interest": product_interest,
        "notes": notes,
        "follow_up_by": follow_up_by,
    }
    # No enum check here: WorkBench's and NeMo Gym's add_customer store any status and product
    # interest (only update_customer checks them); the two emails are lowercased as there.
    row = {k: "" if v is None else v for k, v in given.items()}
    for k in ("assigned_to_email", "customer_email"):
        row[k] = row[k].lower()
    row["customer_id"] = f"{_next_id(sb, 'customer_relationship_manager', 'customer_id'):08d}"
    sb.insert("customer_relationship_manager", row)
    return row["customer_id"]


def customer_relationship_manager_delete_customer(
    sb: Sandbox, customer_id: str | None = None
) -> Any:
    _require("Customer ID", customer_id)
    _customer(sb, customer_id)
    sb.delete("customer_relationship_manager", "customer_id", customer_id)
    return "Customer deleted successfully."


# ---------------------------------------------------------------- registry

_READ = (
    company_directory_find_email_address,
    email_get_email_information_by_id,
    email_search_emails,
    calendar_get_event_information_by_id,
    calendar_search_events,
    analytics_get_visitor_information_by_id,
    analytics_total_visits_count,
    analytics_engaged_users_count,
    analytics_traffic_source_count,
    analytics_get_average_session_duration,
    project_management_get_task_information_by_id,
    project_management_search_tasks,
    customer_relationship_manager_search_customers,
)
_WRITE = (
    email_send_email,
    email_delete_email,
    email_forward_email,
    email_reply_email,
    calendar_create_event,
    calendar_delete_event,
    calendar_update_event,
    analytics_create_plot,
    project_management_create_task,
    project_management_delete_task,
    project_management_update_task,
    customer_relationship_manager_update_customer,
    customer_relationship_manager_add_customer,
    customer_relationship_manager_delete_customer,
)

#: Tool name -> (function, whether it writes).
TOOLS: dict[str, tuple[Callable[..., Any], bool]] = {
    **{f.__name__: (f, False) for f in _READ},
    **{f.__name__: (f, True) for f in _WRITE},
}
WRITE_TOOLS = frozenset(f.__name__ for f in _WRITE)


def call_tool(sb: Sandbox, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    """Run one validated call; return ``(result, ok)``, ``ok`` False for a :class:`ToolError`.

    Raises:
        KeyError: for an unknown tool name (validate calls first).
    """
    fn, _ = TOOLS[name]
    try:
        return fn(sb, **arguments), True
    except ToolError as exc:
        return str(exc), False


# ---------------------------------------------------------------- schemas (project-written)


def _s(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


_PAGE = {
    "page": {"type": "integer", "description": "Page number, from 1 (default 1)"},
    "page_size": {"type": "integer", "description": "Results per page (default 5)"},
}
_RANGE = {
    "time_min": _s("First day, YYYY-MM-DD (inclusive)"),
    "time_max": _s("Last day, YYYY-MM-DD (inclusive)"),
}

_SPECS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "company_directory_find_email_address": (
        "Find the directory email addresses that contain a name (case-insensitive).",
        {"name": _s("A name or part of one")},
        [],
    ),
    "email_get_email_information_by_id": (
        "Get one field of an email.",
        {"email_id": _s("8-digit email id"), "field": _s("One of: " + ", ".join(EMAIL_FIELDS))},
        ["email_id", "field"],
    ),
    "email_search_emails": (
        (
            "Search emails whose subject, body or sender/recipient contain every word of the query, "
            "newest first, 5 per page."
        ),
        {
            "query": _s("Words to search for"),
            "date_min": _s("Earliest date, YYYY-MM-DD"),
            "date_max": _s("Latest date, YYYY-MM-DD"),
            **_PAGE,
        },
        [],
    ),
    "email_send_email": (
        "Send an email.",
        {"recipient": _s("Recipient email address"), "subject": _s("Subject"), "body": _s("Body")},
        ["recipient", "subject", "body"],
    ),
    "email_delete_email": ("Delete an email.", {"email_id": _s("8-digit email id")}, ["email_id"]),
    "email_forward_email": (
        "Forward an email.",
        {"email_id": _s("8-digit email id"), "recipient": _s("Recipient email address")},
        ["email_id", "recipient"],
    ),
    "email_reply_email": (
        "Reply to an email.",
        {"email_id": _s("8-digit email id"), "body": _s("Body")},
        ["email_id", "body"],
    ),
    "calendar_get_event_information_by_id": (
        "Get one field of a calendar event.",
        {"event_id": _s("8-digit event id"), "field": _s("One of: " + ", ".join(EVENT_FIELDS))},
        ["event_id", "field"],
    ),
    "calendar_search_events": (
        "Search events whose name or participant contains the query, latest first, 5 per page.",
        {
            "query": _s("Text to search for"),
            "time_min": _s("Earliest start, YYYY-MM-DD HH:MM:SS"),
            "time_max": _s("Latest start, YYYY-MM-DD HH:MM:SS"),
            **_PAGE,
        },
        [],
    ),
    "calendar_create_event": (
        "Create a calendar event; returns its id.",
        {
            "event_name": _s("Event name"),
            "participant_email": _s("Participant email address"),
            "event_start": _s("Start, YYYY-MM-DD HH:MM:SS"),
            "duration": _s("Duration in minutes"),
        },
        ["event_name", "participant_email", "event_start", "duration"],
    ),
    "calendar_delete_event": (
        "Delete a calendar event.",
        {"event_id": _s("8-digit event id")},
        ["event_id"],
    ),
    "calendar_update_event": (
        "Update one field of a calendar event.",
        {
            "event_id": _s("8-digit event id"),
            "field": _s("One of: " + ", ".join(EVENT_FIELDS[1:])),
            "new_value": _s("New value"),
        },
        ["event_id", "field", "new_value"],
    ),
    "analytics_get_visitor_information_by_id": (
        "Get every website visit of one visitor.",
        {"visitor_id": _s("4-digit visitor id")},
        ["visitor_id"],
    ),
    "analytics_create_plot": (
        "Plot a website metric over a date range; returns the file path.",
        {
            **_RANGE,
            "value_to_plot": _s("One of: " + ", ".join(PLOT_VALUES)),
            "plot_type": _s("One of: " + ", ".join(PLOT_TYPES)),
        },
        ["time_min", "time_max", "value_to_plot", "plot_type"],
    ),
    "analytics_total_visits_count": ("Number of visits per day.", dict(_RANGE), []),
    "analytics_engaged_users_count": ("Number of engaged visits per day.", dict(_RANGE), []),
    "analytics_traffic_source_count": (
        "Number of visits per day from one traffic source.",
        {**_RANGE, "traffic_source": _s("One of: " + ", ".join(TRAFFIC_SOURCES))},
        [],
    ),
    "analytics_get_average_session_duration": (
        "Mean session duration (seconds) per day.",
        dict(_RANGE),
        [],
    ),
    "project_management_get_task_information_by_id": (
        "Get one field of a task.",
        {"task_id": _s("8-digit task id"), "field": _s("One of: " + ", ".join(TASK_FIELDS))},
        ["task_id", "field"],
    ),
    "project_management_search_tasks": (
        "Search tasks; give at least one filter.",
        {
            "task_name": _s("Part of the task name"),
            "assigned_to_email": _s("Assignee email address"),
            "list_name": _s("One of: " + ", ".join(LISTS)),
            "due_date": _s("YYYY-MM-DD"),
            "board": _s("One of: " + ", ".join(BOARDS)),
        },
        [],
    ),
    "project_management_create_task": (
        "Create a task; returns its id.",
        {
            "task_name": _s("Task name"),
            "assigned_to_email": _s("Assignee email address"),
            "list_name": _s("One of: " + ", ".join(LISTS)),
            "due_date": _s("YYYY-MM-DD"),
            "board": _s("One of: " + ", ".join(BOARDS)),
        },
        ["task_name", "assigned_to_email", "list_name", "due_date", "board"],
    ),
    "project_management_delete_task": (
        "Delete a task.",
        {"task_id": _s("8-digit task id")},
        ["task_id"],
    ),
    "project_management_update_task": (
        "Update one field of a task.",
        {
            "task_id": _s("8-digit task id"),
            "field": _s("One of: " + ", ".join(TASK_FIELDS)),
            "new_value": _s("New value"),
        },
        ["task_id", "field", "new_value"],
    ),
    "customer_relationship_manager_search_customers": (
        "Search customers; give at least one filter. 5 per page.",
        {
            "customer_name": _s("Part of the name"),
            "customer_email": _s("Part of the email"),
            "product_interest": _s("One of: " + ", ".join(PRODUCTS)),
            "status": _s("One of: " + ", ".join(STATUSES)),
            "assigned_to_email": _s("Assignee email"),
            "last_contact_date_min": _s("YYYY-MM-DD"),
            "last_contact_date_max": _s("YYYY-MM-DD"),
            "follow_up_by_min": _s("YYYY-MM-DD"),
            "follow_up_by_max": _s("YYYY-MM-DD"),
            **_PAGE,
        },
        [],
    ),
    "customer_relationship_manager_update_customer": (
        "Update one field of a customer.",
        {
            "customer_id": _s("8-digit customer id"),
            "field": _s("One of: " + ", ".join(CRM_FIELDS)),
            "new_value": _s("New value"),
        },
        ["customer_id", "field", "new_value"],
    ),
    "customer_relationship_manager_add_customer": (
        "Add a customer; returns the id.",
        {
            "customer_name": _s("Name"),
            "assigned_to_email": _s("Assignee email"),
            "status": _s("One of: " + ", ".join(STATUSES)),
            "customer_email": _s("Email"),
            "customer_phone": _s("Phone"),
            "last_contact_date": _s("YYYY-MM-DD"),
            "product_interest": _s("One of: " + ", ".join(PRODUCTS)),
            "notes": _s("Notes"),
            "follow_up_by": _s("YYYY-MM-DD"),
        },
        ["customer_name", "assigned_to_email", "status"],
    ),
    "customer_relationship_manager_delete_customer": (
        "Delete a customer.",
        {"customer_id": _s("8-digit customer id")},
        ["customer_id"],
    ),
}

#: Project-written OpenAI (Responses API) function schemas, one per tool, in :data:`TOOLS` order.
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "name": name,
        "description": _SPECS[name][0],
        "parameters": {
            "type": "object",
            "properties": _SPECS[name][1],
            "required": _SPECS[name][2],
            "additionalProperties": False,
        },
        "strict": False,
    }
    for name in TOOLS
)
