"""Tool semantics on the bundled sample workplace: search bounds parsed as dates and times, and
the behaviours that follow NeMo Gym's workplace_assistant."""

import inspect

import pytest

from textgym.envs.workplace.dataset import load_workplace
from textgym.envs.workplace.sandbox import TABLE_COLUMNS, SandboxTemplate
from textgym.envs.workplace.tools import TOOL_SCHEMAS, TOOLS, WRITE_TOOLS, call_tool

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
    """date_min "2023-11-22 10:00:00" is compared as a date: that day's emails match at any hour."""
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


# ---------------------------------------------------------------- agreement with NeMo Gym
# Each test below names the reference behaviour it pins; docs/tool_envs.md gives the rules.


def crm_template(*dates):
    """The sample tables with one CRM customer per (last_contact_date, follow_up_by) pair."""
    rows = [
        (
            f"{i:08d}",
            "maya.okafor@atlas.com",
            f"Customer {i}",
            f"c{i}@x.example",
            "",
            last,
            "Software",
            "Lead",
            follow,
            "",
        )
        for i, (last, follow) in enumerate(dates)
    ]
    return SandboxTemplate({"customer_relationship_manager": rows}, ())


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"last_contact_date_max": "2023-11-30"}, ["00000000"]),
        ({"follow_up_by_max": "2023-12-31"}, ["00000001"]),
        ({"last_contact_date_min": "2023-01-01"}, ["00000000"]),
        ({"customer_name": "customer"}, ["00000000", "00000001"]),  # no date bound: both
        ({"last_contact_date_max": "2023-11-20 08:00:00"}, ["00000000"]),  # the day, not the string
        ({"last_contact_date_min": "2023-11-20 08:00:00"}, ["00000000"]),
    ],
)
def test_crm_customers_with_an_empty_date_match_no_date_bound(arguments, expected):
    """Before: '' <= '2023-11-30' held, so a customer without a date matched every *_max filter.

    The reference reads the empty CSV field as NaN, which no bound admits.
    """
    sb = crm_template(("2023-11-20", ""), ("", "2023-12-10")).new()
    result, ok = call_tool(sb, "customer_relationship_manager_search_customers", arguments)
    assert ok and ids(result, "customers") == expected


def test_crm_date_bound_that_does_not_parse_is_a_tool_error():
    args = {"follow_up_by_max": "next week"}
    result, ok = call_tool(TEMPLATE.new(), "customer_relationship_manager_search_customers", args)
    assert not ok and "Invalid follow_up_by_max 'next week'" in result


@pytest.mark.parametrize(
    ("status", "product_interest"), [("Active", "Gadgets"), ("won", "software"), ("Lead", "")]
)
def test_add_customer_stores_any_status_and_product_interest_as_the_reference_does(
    status, product_interest
):
    """Before: an undocumented enum check refused them, so an extra add changed no table."""
    sb = TEMPLATE.new()
    args = {"customer_name": "Zed", "assigned_to_email": "Maya.Okafor@atlas.com", "status": status}
    args.update(product_interest=product_interest, customer_email="Zed@Zed.example")
    result, ok = call_tool(sb, "customer_relationship_manager_add_customer", args)
    assert ok and result == "00000003"
    row = sb.find("customer_relationship_manager", "customer_id", "00000003")
    assert (row["status"], row["product_interest"]) == (status, product_interest)
    assert (row["assigned_to_email"], row["customer_email"]) == (
        "maya.okafor@atlas.com",
        "zed@zed.example",
    )


def test_update_customer_still_checks_the_enums_as_the_reference_does():
    args = {"customer_id": "00000000", "field": "status", "new_value": "Active"}
    result, ok = call_tool(TEMPLATE.new(), "customer_relationship_manager_update_customer", args)
    assert not ok and "Invalid status 'Active'" in result


EVENT = {"event_name": "sync", "participant_email": "Maya.Okafor@atlas.com", "duration": "30"}


@pytest.mark.parametrize(
    ("start", "accepted"),
    [
        ("2023-12-01 10:00:00", True),
        ("2023/12/01 10:00:00", True),  # before: refused (datetime.fromisoformat)
        ("2023.12.01 10:00", True),
        ("2023-12-01T10:00:00", True),
        ("2023-12-01 10:00 PM", True),
        ("2023-W48-5", False),  # before: accepted (an ISO week date); pandas refuses it
        ("2023-W48-5T10:00", False),
        ("12/01/2023 10:00", False),  # month first: pandas reads it, textgym refuses (docs)
        ("December 1, 2023 10:00", False),
        ("10:00", False),  # the real clock's date in the reference
        ("now", False),
        ("2023-02-29 10:00", False),
    ],
)
def test_event_start_is_read_like_the_reference(start, accepted):
    for tool, args in (
        ("calendar_create_event", dict(EVENT, event_start=start)),
        (
            "calendar_update_event",
            {"event_id": "00000000", "field": "event_start", "new_value": start},
        ),
    ):
        sb = TEMPLATE.new()
        before = sb.snapshot()
        result, ok = call_tool(sb, tool, args)
        assert ok is accepted, (tool, result)
        if accepted:  # stored exactly as given: the verifier compares the text
            assert start in sb.column("calendar_events", "event_start")
        else:
            assert "Invalid event start" in result and sb.snapshot() == before


def test_calendar_search_orders_by_time_not_text_and_reads_slash_starts():
    sb = TEMPLATE.new()
    call_tool(sb, "calendar_create_event", dict(EVENT, event_start="2023/12/02 09:00:00"))
    result, ok = call_tool(sb, "calendar_search_events", {"time_min": "2023-12-01 15:00:00"})
    # '2023/12/02' sorts after '2023-12-04' as text; as a time it is earlier.
    assert ok and ids(result, "events") == ["00000002", "00000003"]


@pytest.mark.parametrize(
    ("tool", "arguments", "key", "total"),
    [
        ("email_search_emails", {"query": "roadmap"}, "emails", 2),
        ("calendar_search_events", {}, "events", 3),
        ("customer_relationship_manager_search_customers", {"status": "Lead"}, "customers", 1),
    ],
)
def test_pagination_totals_are_named_after_the_items(tool, arguments, key, total):
    """Before: ``total``; the reference: ``total_emails``, ``total_events``, ``total_customers``."""
    result, ok = call_tool(TEMPLATE.new(), tool, arguments)
    assert ok and result["pagination"] == {
        f"total_{key}": total,
        "page": 1,
        "page_size": 5,
        "total_pages": 1,
    }


def test_visitor_information_gives_user_engaged_as_a_boolean():
    """Before: the string "True"; the reference loads the column as booleans."""
    result, ok = call_tool(
        TEMPLATE.new(), "analytics_get_visitor_information_by_id", {"visitor_id": "0101"}
    )
    assert ok and [r["user_engaged"] for r in result] == [True, False]
    assert [r["session_duration_seconds"] for r in result] == ["35", "20"]  # the rest stays text


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"time_min": "2023-11-28 10:00:00"}, {"2023-11-28": 1, "2023-11-29": 1, "2023-11-30": 1}),
        ({"time_max": "2023-11-27 23:00"}, {"2023-11-27": 2}),
        ({"time_min": "2023/11/29", "time_max": "2023-11-29"}, {"2023-11-29": 1}),
    ],
)
def test_analytics_bounds_compare_dates_not_strings(arguments, expected):
    """Before: '2023-11-28' >= '2023-11-28 10:00:00' was false, so the 28th was left out."""
    result, ok = call_tool(TEMPLATE.new(), "analytics_total_visits_count", arguments)
    assert ok and result == expected


def test_analytics_bound_that_does_not_parse_is_a_tool_error():
    result, ok = call_tool(TEMPLATE.new(), "analytics_engaged_users_count", {"time_max": "soon"})
    assert not ok and "Invalid time_max 'soon'" in result


def test_average_session_duration_is_a_read_that_changes_nothing():
    """The reference converts the stored durations to floats in place; textgym's read is pure."""
    sb = TEMPLATE.new()
    before = sb.snapshot(tuple(TABLE_COLUMNS))
    result, ok = call_tool(sb, "analytics_get_average_session_duration", {})
    assert ok and result == {
        "2023-11-27": 20.0,
        "2023-11-28": 120.0,
        "2023-11-29": 20.0,
        "2023-11-30": 60.0,
    }
    assert sb.snapshot(tuple(TABLE_COLUMNS)) == before
    visits, _ = call_tool(sb, "analytics_get_visitor_information_by_id", {"visitor_id": "0103"})
    assert visits[0]["session_duration_seconds"] == "120"


@pytest.mark.parametrize(
    ("tool", "arguments", "first_sentence"),
    [
        ("email_delete_email", {"email_id": "99"}, "Email not found."),
        ("calendar_delete_event", {"event_id": "00000099"}, "Event not found."),
        ("analytics_get_visitor_information_by_id", {"visitor_id": "9"}, "Visitor not found."),
        ("project_management_delete_task", {"task_id": "9"}, "Task not found."),
        (
            "customer_relationship_manager_delete_customer",
            {"customer_id": "9"},
            "Customer not found.",
        ),
        ("customer_relationship_manager_search_customers", {}, "No search parameters provided."),
        ("project_management_search_tasks", {}, "No search parameters provided."),
        ("company_directory_find_email_address", {}, "Name not provided."),
    ],
)
def test_errors_agents_act_on_keep_the_references_first_sentence(tool, arguments, first_sentence):
    result, ok = call_tool(TEMPLATE.new(), tool, arguments)
    assert not ok and result.startswith(first_sentence)


def test_every_tool_takes_exactly_its_schema_parameters_in_order():
    """The record tools are built from a table (``records.py``): their signatures must still be
    what the data loader checks a schema file against, in the schema's order."""
    for schema in TOOL_SCHEMAS:
        fn, writes = TOOLS[schema["name"]]
        params = list(inspect.signature(fn).parameters)
        assert fn.__name__ == schema["name"] and fn.__doc__
        assert params == ["sb", *schema["parameters"]["properties"]]
        assert writes == (schema["name"] in WRITE_TOOLS)


@pytest.mark.parametrize("tool", ["calendar_update_event", "email_send_email"])
def test_an_unknown_argument_is_a_type_error_naming_the_tool(tool):
    """A built tool refuses an argument its schema lacks as a ``def`` would (a bug, not a result)."""
    with pytest.raises(TypeError, match=rf"^{tool}\(\) got an unexpected keyword argument 'x'$"):
        call_tool(TEMPLATE.new(), tool, {"x": "1"})


def test_record_tools_check_every_value_before_writing():
    """create_task checks the assignee, list and board (in field order) before inserting."""
    sb = TEMPLATE.new()
    before = sb.snapshot()
    arguments = {
        "task_name": "t",
        "assigned_to_email": sb.rows("project_tasks")[0]["assigned_to_email"].upper(),
        "list_name": "Backlog",
        "due_date": "2023-12-01",
        "board": "nope",
    }
    result, ok = call_tool(sb, "project_management_create_task", arguments)
    assert not ok and result.startswith("Invalid board 'nope'") and sb.snapshot() == before
    task_id, ok = call_tool(sb, "project_management_create_task", {**arguments, "board": "Design"})
    assert ok and sb.find("project_tasks", "task_id", task_id)["assigned_to_email"] == (
        arguments["assigned_to_email"].lower()
    )
