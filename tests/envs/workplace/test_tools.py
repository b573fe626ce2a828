"""Tool semantics on the bundled sample workplace: search date bounds parsed as dates and times."""

import pytest

from textgym.envs.workplace.dataset import load_workplace
from textgym.envs.workplace.tools import call_tool

TEMPLATE = load_workplace().template


def ids(result, key):
    return result if isinstance(result, str) else [row[f"{key[:-1]}_id"] for row in result[key]]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"query": "priya", "date_min": "2023-11-22 10:00:00"},
            ["00000002"],
        ),  # same day, earlier hour: by date
        ({"query": "maya", "date_min": "2023-11-28 23:59:59"}, ["00000003"]),
        ({"date_max": "2023-11-20T00:00:00"}, ["00000000"]),
        ({"date_min": "2023-11-29", "date_max": "2023-11-29"}, ["00000004"]),
        ({"date_min": "2023-11-21", "date_max": "2023-11-20"}, "No emails found."),
    ],
)
def test_email_search_compares_dates_not_strings(arguments, expected):
    """Issue 15, item 17: date_min "2023-11-22 10:00:00" missed emails of that day (string comparison)."""
    result, ok = call_tool(TEMPLATE.new(), "email_search_emails", arguments)
    assert ok and ids(result, "emails") == expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"time_min": "2023-11-27T10:00:00"},
            ["00000002", "00000001", "00000000"],
        ),  # 'T' sorted after ' '
        ({"time_max": "2023-11-27 10:00"}, ["00000000"]),
        ({"time_max": "2023-12-01"}, ["00000000"]),  # midnight: the 14:00 event is later
        ({"time_min": "2023-12-01 14:00:00", "time_max": "2023-12-01 14:00:00"}, ["00000001"]),
    ],
)
def test_calendar_search_compares_times_not_strings(arguments, expected):
    result, ok = call_tool(TEMPLATE.new(), "calendar_search_events", arguments)
    assert ok and ids(result, "events") == expected


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("calendar_search_events", {"time_max": "not a time"}, "Invalid time_max 'not a time'"),
        (
            "calendar_search_events",
            {"time_min": "2023-12-01 14:00:00+01:00"},
            "without a UTC offset",
        ),
        ("email_search_emails", {"date_min": "yesterday"}, "Invalid date_min 'yesterday'"),
        (
            "email_search_emails",
            {"query": "maya", "date_max": "2023-13-01"},
            "Invalid date_max '2023-13-01'",
        ),
    ],
)
def test_an_unparseable_bound_is_a_tool_error(tool, arguments, message):
    result, ok = call_tool(TEMPLATE.new(), tool, arguments)
    assert not ok and message in result and "2023-11-22" in result
