"""The 27 workplace tools as plain functions over a :class:`~.sandbox.Sandbox`.

Semantics follow ``../shared/data/workplace/TOOLS.md`` (the NeMo Gym ``workplace_assistant``
port of WorkBench, Styles et al. 2024): all values are strings except ``page``/``page_size``;
search tools marked paginated return 5 items per page with a ``pagination`` block (its total
named ``total_emails``/``total_events``/``total_customers`` as there), pages out of range
clamped; the clock is frozen at 2023-11-30 23:59:00. Where textgym departs from the reference on
purpose, ``docs/tool_envs.md`` (section "Agreement with NeMo Gym's workplace_assistant") says
why; in short:

- Timestamps (``event_start``, every search bound, the stored dates they are compared with) are
  read by :func:`~.timestamps.parse_timestamp`, the year-first numeric part of what the
  reference's ``pandas.Timestamp`` reads. Search bounds are compared as dates or times, never
  as strings: ``email_search_emails``, the analytics counts and the CRM date filters compare the
  date part (WorkBench's ``.dt.date`` filter), ``calendar_search_events`` the timestamp; a
  bound that does not parse is a :class:`~.records.ToolError`; a stored value that is empty or
  does not parse lies within no bound (the reference's NaN).
- ``customer_relationship_manager_add_customer`` stores any status and product interest, as the
  reference does; only ``..._update_customer`` checks them.
- Reads never write: ``analytics_get_average_session_duration`` leaves the stored durations as
  text (the reference turns them into floats in place).
- Error results say what was expected in textgym's own words; the not-found errors and "No
  search parameters provided." keep the reference's first sentence.

The errors (``"Email not found."``, a bad enum value, a missing argument) are raised as
:class:`~.records.ToolError` *before* anything is written, so a failed call never changes the
tables; any other exception is a bug and propagates.

The module is split by job: :mod:`~.records` holds the generic machinery (argument checks,
pagination, schemas, and the get/delete/update/create tools built from a :class:`~.records.Record`
row), :mod:`~.domains` the per-domain table of records and the tools written out per domain,
:mod:`~.timestamps` timestamp reading. This module is the registry: :data:`TOOLS` maps each name
to ``(function, is_write)``; :data:`TOOL_SCHEMAS` are project-written OpenAI function schemas
with the same names, parameters and types as NeMo Gym's, used when a data folder brings no
``schemas/tool_schemas.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textgym.envs.workplace import domains as d
from textgym.envs.workplace.domains import CUSTOMER, EMAIL, EVENT, TASK
from textgym.envs.workplace.records import (
    Tool,
    ToolError,
    create_tool,
    delete_tool,
    get_tool,
    string,
    update_tool,
)
from textgym.envs.workplace.sandbox import Sandbox

__all__ = ["TOOLS", "TOOL_SCHEMAS", "WRITE_TOOLS", "call_tool"]

_PAGE = {
    "page": {"type": "integer", "description": "Page number, from 1 (default 1)"},
    "page_size": {"type": "integer", "description": "Results per page (default 5)"},
}
_RANGE = {
    "time_min": string("First day, YYYY-MM-DD (inclusive)"),
    "time_max": string("Last day, YYYY-MM-DD (inclusive)"),
}


def _one_of(values: tuple[str, ...]) -> dict[str, str]:
    return string("One of: " + ", ".join(values))


#: Every tool with its schema: the reads, then the writes (the order of TOOLS and TOOL_SCHEMAS).
_TABLE: tuple[Tool, ...] = (
    Tool.of(
        d.company_directory_find_email_address,
        False,
        "Find the directory email addresses that contain a name (case-insensitive).",
        {"name": string("A name or part of one")},
    ),
    get_tool(EMAIL),
    Tool.of(
        d.email_search_emails,
        False,
        "Search emails whose subject, body or sender/recipient contain every word of the query, "
        "newest first, 5 per page.",
        {
            "query": string("Words to search for"),
            "date_min": string("Earliest date, YYYY-MM-DD"),
            "date_max": string("Latest date, YYYY-MM-DD"),
            **_PAGE,
        },
    ),
    get_tool(EVENT),
    Tool.of(
        d.calendar_search_events,
        False,
        "Search events whose name or participant contains the query, latest first, 5 per page.",
        {
            "query": string("Text to search for"),
            "time_min": string("Earliest start, YYYY-MM-DD HH:MM:SS"),
            "time_max": string("Latest start, YYYY-MM-DD HH:MM:SS"),
            **_PAGE,
        },
    ),
    Tool.of(
        d.analytics_get_visitor_information_by_id,
        False,
        "Get every website visit of one visitor.",
        {"visitor_id": string("4-digit visitor id")},
        ["visitor_id"],
    ),
    Tool.of(d.analytics_total_visits_count, False, "Number of visits per day.", dict(_RANGE)),
    Tool.of(
        d.analytics_engaged_users_count, False, "Number of engaged visits per day.", dict(_RANGE)
    ),
    Tool.of(
        d.analytics_traffic_source_count,
        False,
        "Number of visits per day from one traffic source.",
        {**_RANGE, "traffic_source": _one_of(d.TRAFFIC_SOURCES)},
    ),
    Tool.of(
        d.analytics_get_average_session_duration,
        False,
        "Mean session duration (seconds) per day.",
        dict(_RANGE),
    ),
    get_tool(TASK),
    Tool.of(
        d.project_management_search_tasks,
        False,
        "Search tasks; give at least one filter.",
        {
            "task_name": string("Part of the task name"),
            "assigned_to_email": string("Assignee email address"),
            "list_name": _one_of(d.LISTS),
            "due_date": string("YYYY-MM-DD"),
            "board": _one_of(d.BOARDS),
        },
    ),
    Tool.of(
        d.customer_relationship_manager_search_customers,
        False,
        "Search customers; give at least one filter. 5 per page.",
        {
            "customer_name": string("Part of the name"),
            "customer_email": string("Part of the email"),
            "product_interest": _one_of(d.PRODUCTS),
            "status": _one_of(d.STATUSES),
            "assigned_to_email": string("Assignee email"),
            **{
                f"{k}_{end}": string("YYYY-MM-DD")
                for k in ("last_contact_date", "follow_up_by")
                for end in ("min", "max")
            },
            **_PAGE,
        },
    ),
    # ---- writes
    Tool.of(
        d.email_send_email,
        True,
        "Send an email.",
        {
            "recipient": string("Recipient email address"),
            "subject": string("Subject"),
            "body": string("Body"),
        },
        ["recipient", "subject", "body"],
    ),
    delete_tool(EMAIL),
    Tool.of(
        d.email_forward_email,
        True,
        "Forward an email.",
        {**EMAIL.id_schema(), "recipient": string("Recipient email address")},
        ["email_id", "recipient"],
    ),
    Tool.of(
        d.email_reply_email,
        True,
        "Reply to an email.",
        {**EMAIL.id_schema(), "body": string("Body")},
        ["email_id", "body"],
    ),
    create_tool(EVENT),
    delete_tool(EVENT),
    update_tool(EVENT),
    Tool.of(
        d.analytics_create_plot,
        True,
        "Plot a website metric over a date range; returns the file path.",
        {
            **_RANGE,
            "value_to_plot": _one_of(d.PLOT_VALUES),
            "plot_type": _one_of(d.PLOT_TYPES),
        },
        ["time_min", "time_max", "value_to_plot", "plot_type"],
    ),
    create_tool(TASK),
    delete_tool(TASK),
    update_tool(TASK),
    update_tool(CUSTOMER),
    Tool.of(
        d.customer_relationship_manager_add_customer,
        True,
        "Add a customer; returns the id.",
        {
            "customer_name": string("Name"),
            "assigned_to_email": string("Assignee email"),
            "status": _one_of(d.STATUSES),
            "customer_email": string("Email"),
            "customer_phone": string("Phone"),
            "last_contact_date": string("YYYY-MM-DD"),
            "product_interest": _one_of(d.PRODUCTS),
            "notes": string("Notes"),
            "follow_up_by": string("YYYY-MM-DD"),
        },
        ["customer_name", "assigned_to_email", "status"],
    ),
    delete_tool(CUSTOMER),
)

#: Tool name -> (function, whether it writes).
TOOLS: dict[str, tuple[Callable[..., Any], bool]] = {
    t.schema["name"]: (t.function, t.writes) for t in _TABLE
}
WRITE_TOOLS = frozenset(name for name, (_, writes) in TOOLS.items() if writes)
#: Project-written OpenAI (Responses API) function schemas, one per tool, in :data:`TOOLS` order.
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = tuple(t.schema for t in _TABLE)


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
