"""The workplace's four domains: their record table, enumerations and hand-written tools.

WorkBench (Styles et al. 2024; NeMo Gym's ``workplace_assistant`` port) keeps emails, calendar
events, project tasks and CRM customers as records with an id. :data:`EMAIL`, :data:`EVENT`,
:data:`TASK` and :data:`CUSTOMER` are the table :mod:`~.records` builds their get, delete,
update and create tools from: tool names, labels, which fields may be updated, the checks a new
value must pass and the fields stored lowercased. The tools that differ per domain (the
searches, the email writes, analytics, ``add_customer``) are written out here. Semantics and the
reasons for textgym's departures from the reference are in :mod:`~.tools`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from textgym.envs.workplace.records import (
    Record,
    ToolError,
    choice,
    is_email,
    next_id,
    paginate,
    require,
)
from textgym.envs.workplace.sandbox import TABLE_COLUMNS, Sandbox
from textgym.envs.workplace.timestamps import (
    day_bounds,
    parse_timestamp,
    read_bound,
    stored_day,
    stored_time,
    within,
)

__all__ = [
    "BOARDS",
    "CUSTOMER",
    "EMAIL",
    "EVENT",
    "LISTS",
    "NOW",
    "PAGE_SIZE",
    "PLOT_TYPES",
    "PLOT_VALUES",
    "PRODUCTS",
    "STATUSES",
    "TASK",
    "TRAFFIC_SOURCES",
    "analytics_create_plot",
    "analytics_engaged_users_count",
    "analytics_get_average_session_duration",
    "analytics_get_visitor_information_by_id",
    "analytics_total_visits_count",
    "analytics_traffic_source_count",
    "calendar_search_events",
    "company_directory_find_email_address",
    "customer_relationship_manager_add_customer",
    "customer_relationship_manager_search_customers",
    "email_forward_email",
    "email_reply_email",
    "email_search_emails",
    "email_send_email",
    "project_management_search_tasks",
]

#: The frozen clock of the workplace (TOOLS.md, section 1).
NOW = "2023-11-30 23:59:00"
PAGE_SIZE = 5

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


def _one_of(allowed: tuple[str, ...], what: str) -> Callable[[Sandbox, str], None]:
    return lambda sb, value: choice(value, allowed, what)


def _check_start(sb: Sandbox, value: str) -> None:
    if parse_timestamp(value) is None:
        raise ToolError(
            f"Invalid event start {value[:80]!r}: expected a timestamp such as "
            "'2023-12-01 13:00:00' (year first)."
        )


def _check_duration(sb: Sandbox, value: str) -> None:
    try:
        ok = int(value) > 0
    except ValueError:
        ok = False
    if not ok:
        raise ToolError(f"Invalid duration {value!r}: expected a positive whole number of minutes.")


def _check_event_id(event_id: str) -> None:
    if not (len(event_id) == 8 and event_id.isdecimal()):
        raise ToolError("Invalid event ID format: expected 8 digits, such as '00000042'.")


def _check_assignee(sb: Sandbox, email: str) -> None:
    if email.lower() not in {a.lower() for a in sb.column("project_tasks", "assigned_to_email")}:
        raise ToolError(
            f"Assignee {email!r} not found: choose someone who already has tasks on the board."
        )


# ---------------------------------------------------------------- the records kept by id

#: Emails are read, deleted and written by the email tools below, never updated.
EMAIL = Record(domain="email", table="emails", noun="email", label="Email", article="an email")
EVENT = Record(
    domain="calendar",
    table="calendar_events",
    noun="event",
    label="Event",
    article="a calendar event",
    updatable=TABLE_COLUMNS["calendar_events"][1:],
    check_id=_check_event_id,
    checks={"event_start": _check_start, "duration": _check_duration},
    lowercase=("participant_email",),
    create_what="Event name, participant email, start or duration",
    create_params={
        "event_name": "Event name",
        "participant_email": "Participant email address",
        "event_start": "Start, YYYY-MM-DD HH:MM:SS",
        "duration": "Duration in minutes",
    },
)
TASK = Record(
    domain="project_management",
    table="project_tasks",
    noun="task",
    label="Task",
    article="a task",
    updatable=TABLE_COLUMNS["project_tasks"],  # task_id too, as in the reference
    checks={
        "assigned_to_email": _check_assignee,
        "list_name": _one_of(LISTS, "list name"),
        "board": _one_of(BOARDS, "board"),
    },
    lowercase=("assigned_to_email",),
    create_what="Task name, assignee, list, due date or board",
    create_params={
        "task_name": "Task name",
        "assigned_to_email": "Assignee email address",
        "list_name": "One of: " + ", ".join(LISTS),
        "due_date": "YYYY-MM-DD",
        "board": "One of: " + ", ".join(BOARDS),
    },
)
#: Customers are created by add_customer below (optional fields, no enum check).
CUSTOMER = Record(
    domain="customer_relationship_manager",
    table="customer_relationship_manager",
    noun="customer",
    label="Customer",
    article="a customer",
    updatable=TABLE_COLUMNS["customer_relationship_manager"],  # customer_id too
    field_error="Field not valid",  # the reference's words for this domain
    checks={
        "status": _one_of(STATUSES, "status"),
        "product_interest": _one_of(PRODUCTS, "product interest"),
    },
    lowercase=("customer_email", "assigned_to_email"),
)


def _text_matches(row: dict[str, str], filters: dict[str, str | None]) -> bool:
    """Whether every given filter is a case-insensitive substring of its field."""
    return all(not v or v.lower() in row[k].lower() for k, v in filters.items())


# ---------------------------------------------------------------- company directory and email


def company_directory_find_email_address(sb: Sandbox, name: str = "") -> Any:
    """The directory addresses containing ``name`` (case-insensitive); error if it is empty."""
    if not name:
        raise ToolError("Name not provided.")
    return [a for a in sb.directory if name.lower() in a.lower()]


def email_search_emails(
    sb: Sandbox,
    query: str = "",
    date_min: str | None = None,
    date_max: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Any:
    """Emails holding every query word in subject, body or address, sent within the dates."""
    words = query.lower().split()
    low, high = day_bounds(date_min, date_max, ("date_min", "date_max"))  # WorkBench: .dt.date
    found = []
    for row in sb.rows("emails"):
        text = " ".join((row["subject"], row["body"], row["sender/recipient"])).lower()
        if all(w in text for w in words) and within(stored_day(row["sent_datetime"]), low, high):
            found.append(row)
    if not found:
        return "No emails found."
    found.sort(key=lambda r: r["sent_datetime"], reverse=True)
    return paginate(found, "emails", page, page_size)


def _append_email(sb: Sandbox, recipient: str, subject: str, body: str) -> None:
    if not is_email(recipient):
        raise ToolError(f"Invalid recipient {recipient!r}: expected an email address.")
    row = {
        "email_id": str(next_id(sb, "emails", "email_id")),
        "inbox/outbox": "outbox",
        "sender/recipient": recipient.lower(),
        "subject": subject,
        "sent_datetime": NOW,
        "body": body,
    }
    sb.insert("emails", row)


def email_send_email(
    sb: Sandbox, recipient: str | None = None, subject: str | None = None, body: str | None = None
) -> Any:
    """Append an outbox email, sent :data:`NOW`; the recipient must look like an address."""
    require("Recipient, subject or body", recipient, subject, body)
    _append_email(sb, recipient, subject, body)
    return "Email sent successfully."


def email_forward_email(
    sb: Sandbox, email_id: str | None = None, recipient: str | None = None
) -> Any:
    """Send an email's subject (``FW: ``) and body to ``recipient``."""
    require("Email ID or recipient", email_id, recipient)
    row = EMAIL.find(sb, email_id)
    _append_email(sb, recipient, "FW: " + row["subject"], row["body"])
    return "Email forwarded successfully."


def email_reply_email(sb: Sandbox, email_id: str | None = None, body: str | None = None) -> Any:
    """Send ``body`` to an email's sender/recipient, its subject prefixed ``RE: ``."""
    require("Email ID or body", email_id, body)
    row = EMAIL.find(sb, email_id)
    _append_email(sb, row["sender/recipient"], "RE: " + row["subject"], body)
    return "Email replied successfully."


# ---------------------------------------------------------------- calendar


def calendar_search_events(
    sb: Sandbox,
    query: str = "",
    time_min: str | None = None,
    time_max: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Any:
    """Events whose name or participant contains ``query``, starting within the times."""
    q = query.lower()
    low, high = read_bound(time_min, "time_min"), read_bound(time_max, "time_max")
    found = [
        r
        for r in sb.rows("calendar_events")
        if (q in r["event_name"].lower() or q in r["participant_email"].lower())
        and within(stored_time(r["event_start"]), low, high)
    ]
    if not found:
        return "No events found."
    # Latest first by the time each start stands for ("2023/12/04 13:30:00" is a valid start).
    found.sort(key=lambda r: (stored_time(r["event_start"]) or datetime.min, r["event_start"]))
    found.reverse()
    return paginate(found, "events", page, page_size)


# ---------------------------------------------------------------- analytics


def _per_day(
    sb: Sandbox,
    time_min: str | None,
    time_max: str | None,
    value: Callable[[dict[str, str]], float],
) -> dict[str, list[float]]:
    """``value`` of each visit whose date lies within the bounds' dates, grouped by day."""
    low, high = day_bounds(time_min, time_max, ("time_min", "time_max"))
    rows = [
        r for r in sb.rows("analytics_data") if within(stored_day(r["date_of_visit"]), low, high)
    ]
    days: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: r["date_of_visit"]):
        days.setdefault(r["date_of_visit"], []).append(value(r))
    return days


def analytics_get_visitor_information_by_id(sb: Sandbox, visitor_id: str | None = None) -> Any:
    """Every visit of one visitor; ``user_engaged`` a boolean, as the reference loads it."""
    require("Visitor ID", visitor_id)
    rows = sb.rows("analytics_data", '"visitor_id" = ?', (visitor_id,))
    if not rows:
        raise ToolError("Visitor not found.")
    return [dict(r, user_engaged=r["user_engaged"] == "True") for r in rows]


def analytics_total_visits_count(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    """Visits per day, ``{date: count}``."""
    return {d: len(v) for d, v in _per_day(sb, time_min, time_max, lambda r: 1).items()}


def analytics_engaged_users_count(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    """Engaged visits per day, ``{date: count}``."""
    days = _per_day(sb, time_min, time_max, lambda r: r["user_engaged"] == "True")
    return {d: int(sum(v)) for d, v in days.items()}


def analytics_traffic_source_count(
    sb: Sandbox,
    time_min: str | None = None,
    time_max: str | None = None,
    traffic_source: str | None = None,
) -> Any:
    """Visits per day from one traffic source (every visit if none is given)."""
    if traffic_source:
        choice(traffic_source, TRAFFIC_SOURCES, "traffic source")
    days = _per_day(
        sb,
        time_min,
        time_max,
        lambda r: not traffic_source or r["traffic_source"] == traffic_source,
    )
    return {d: int(sum(v)) for d, v in days.items()}


def analytics_get_average_session_duration(
    sb: Sandbox, time_min: str | None = None, time_max: str | None = None
) -> Any:
    """Mean session duration (seconds, float) per day."""
    days = _per_day(sb, time_min, time_max, lambda r: float(r["session_duration_seconds"]))
    return {d: sum(v) / len(v) for d, v in days.items()}


def analytics_create_plot(
    sb: Sandbox,
    time_min: str | None = None,
    time_max: str | None = None,
    value_to_plot: str | None = None,
    plot_type: str | None = None,
) -> Any:
    """Record a plot's file path (``plots/<min>_<max>_<value>_<type>.png``) and return it."""
    require(
        "Start date, end date, value to plot or plot type",
        time_min,
        time_max,
        value_to_plot,
        plot_type,
    )
    choice(value_to_plot, PLOT_VALUES, "value to plot")
    choice(plot_type, PLOT_TYPES, "plot type")
    path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    sb.insert("plots", {"file_path": path})
    return path


# ---------------------------------------------------------------- project management and CRM


def project_management_search_tasks(
    sb: Sandbox,
    task_name: str | None = None,
    assigned_to_email: str | None = None,
    list_name: str | None = None,
    due_date: str | None = None,
    board: str | None = None,
) -> Any:
    """Tasks matching every filter given (substrings; the assignee exactly); unpaginated."""
    filters = {"task_name": task_name, "list_name": list_name, "due_date": due_date, "board": board}
    if not any(filters.values()) and not assigned_to_email:
        raise ToolError("No search parameters provided.")
    if assigned_to_email and not is_email(assigned_to_email):
        raise ToolError(f"Invalid assignee {assigned_to_email!r}: expected an email address.")
    return [
        r
        for r in sb.rows("project_tasks")
        if (not assigned_to_email or r["assigned_to_email"].lower() == assigned_to_email.lower())
        and _text_matches(r, filters)
    ]


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
    """Customers matching every text filter (substrings) and date range given, in row order."""
    text = {
        "customer_name": customer_name,
        "customer_email": customer_email,
        "product_interest": product_interest,
        "status": status,
        "assigned_to_email": assigned_to_email,
    }
    dates = {
        "last_contact_date": (last_contact_date_min, last_contact_date_max),
        "follow_up_by": (follow_up_by_min, follow_up_by_max),
    }
    if not any(text.values()) and not any(any(pair) for pair in dates.values()):
        raise ToolError("No search parameters provided.")
    ranges = {
        column: day_bounds(low, high, (column + "_min", column + "_max"))
        for column, (low, high) in dates.items()
    }
    found = [
        r
        for r in sb.rows("customer_relationship_manager")
        if _text_matches(r, text)
        and all(within(stored_day(r[k]), low, high) for k, (low, high) in ranges.items())
    ]
    if not found:
        return "No customers found."
    return paginate(found, "customers", page, page_size)


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
    """Append a customer (fields not given are empty) and return its new 8-digit id.

    No enum check here: WorkBench's and NeMo Gym's add_customer store any status and product
    interest (only update_customer checks them); the two emails are lowercased as there.
    """
    require("Customer name, assignee or status", customer_name, assigned_to_email, status)
    given = dict(locals())  # the arguments by name
    row = {k: "" if given[k] is None else CUSTOMER.stored(k, given[k]) for k in CUSTOMER.fields[1:]}
    row["customer_id"] = f"{next_id(sb, CUSTOMER.table, CUSTOMER.id_field):08d}"
    sb.insert(CUSTOMER.table, row)
    return row["customer_id"]
