"""Tool-call parsing, schema validation and response rendering (pure functions)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.workplace.tools import TOOL_SCHEMAS, TOOLS
from textgym.toolcalls import (
    TOO_MANY_CALLS,
    build_validators,
    format_tool_calls,
    parse_tool_calls,
    rejection_message,
    render_responses,
    validate_call,
    validate_reply,
)

VALIDATORS = build_validators(TOOL_SCHEMAS)


def test_project_schemas_cover_the_27_tools():
    assert len(TOOLS) == 27 and [s["name"] for s in TOOL_SCHEMAS] == list(TOOLS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no calls here", []),
        (
            '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "1"}}</tool_call>',
            [("email_delete_email", {"email_id": "1"}, None)],
        ),
        (
            '<tool_call>{"name": "a", "arguments": "{\\"x\\": \\"1\\"}"}</tool_call>',
            [("a", {"x": "1"}, None)],
        ),
        ('<tool_call>{"name": "a"}</tool_call>', [("a", {}, None)]),
        ("<tool_call>{not json}</tool_call>", [(None, {}, "malformed_tool_call")]),
        ('<tool_call>["a"]</tool_call>', [(None, {}, "malformed_tool_call")]),
        (
            '<tool_call>{"name": "a", "arguments": 3}</tool_call>',
            [("a", {}, "malformed_tool_call")],
        ),
        ('x <tool_call>{"name": "a", "arguments": {}}', [("a", {}, None)]),  # unclosed last block
        (
            (
                '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {}}'
                "</tool_call>"
            ),
            [("a", {}, None), ("b", {}, None)],
        ),
    ],
)
def test_parse_table(text, expected):
    assert [(c.name, c.arguments, c.reason) for c in parse_tool_calls(text)] == expected


@pytest.mark.parametrize(
    ("name", "arguments", "reason"),
    [
        ("email_send_email", {"recipient": "a@b.c", "subject": "s", "body": "b"}, None),
        ("no_such_tool", {}, "unknown_tool"),
        (
            "email_send_email",
            {"recipient": "a@b.c", "subject": "s"},
            "invalid_arguments",
        ),  # missing
        (
            "calendar_create_event",
            {
                "event_name": "x",
                "participant_email": "a@b.c",
                "event_start": "2023-12-01 10:00:00",
                "duration": 30,
            },
            "invalid_arguments",
        ),
        ("email_search_emails", {"page": "2"}, "invalid_arguments"),
        ("email_delete_email", {"email_id": "1", "extra": "x"}, "invalid_arguments"),
    ],
)
def test_validate_table(name, arguments, reason):
    from textgym.toolcalls import ToolCall

    assert validate_call(ToolCall(name, arguments), VALIDATORS).reason == reason


@given(st.text())
def test_parse_never_raises(text):
    for call in parse_tool_calls(text):
        validate_call(call, VALIDATORS)


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(sorted(TOOLS)),
                "arguments": st.dictionaries(st.text(), st.text(), max_size=3),
            }
        ),
        max_size=4,
    )
)
def test_format_then_parse_round_trips(calls):
    parsed = parse_tool_calls(format_tool_calls(calls))
    assert [(c.name, c.arguments) for c in parsed] == [(c["name"], c["arguments"]) for c in calls]


def test_render_one_block_per_result_in_order():
    text = render_responses(["ok", {"a": 1}, [1, 2]])
    assert text.count("<tool_response>") == 3
    assert text.index("ok") < text.index(json.dumps({"a": 1})) < text.index("[1, 2]")


GOOD = '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "1"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
BAD_ARGS = '<tool_call>{"name": "email_delete_email", "arguments": {}}</tool_call>'


@pytest.mark.parametrize(
    ("text", "max_calls", "reason"),
    [
        ("", 2, None),
        (GOOD * 2, 2, None),
        (GOOD * 3, 2, TOO_MANY_CALLS),
        (UNKNOWN * 3, 2, TOO_MANY_CALLS),  # the count is checked first
        (GOOD + UNKNOWN + BAD_ARGS, 3, "unknown_tool"),  # the first invalid call's reason
        (GOOD + BAD_ARGS + "<tool_call>{", 3, "invalid_arguments"),
        (GOOD + "<tool_call>{", 3, "malformed_tool_call"),
    ],
)
def test_validate_reply_table(text, max_calls, reason):
    calls, got = validate_reply(parse_tool_calls(text), VALIDATORS, max_calls)
    assert got == reason and len(calls) == text.count("<tool_call>")


def test_rejection_message_names_the_invalid_calls():
    calls, reason = validate_reply(
        parse_tool_calls(GOOD + UNKNOWN + GOOD + BAD_ARGS), VALIDATORS, 4
    )
    text = rejection_message(calls, reason, 4)
    blocks = text.split("</tool_response>")
    assert len(blocks) == 5 and "Not run: call 2 of this reply is invalid" in blocks[0] + blocks[2]
    assert "Error: Unknown tool 'nope'" in blocks[1] and "Error: Invalid arguments" in blocks[3]
    assert "(invalid: calls 2, 4)" in blocks[4]
    calls, reason = validate_reply(parse_tool_calls(GOOD * 1000), VALIDATORS, 4)
    text = rejection_message(calls, reason, 4)
    assert "1000 tool calls, more than the 4" in text and len(text) < 200


def test_validators_keep_their_own_copy_of_the_schemas():
    schemas = json.loads(json.dumps(TOOL_SCHEMAS))
    schemas[0]["description"] += " (a content no other test caches)"
    validators = build_validators(schemas)
    for s in schemas:  # the caller changes its schemas afterwards
        s["parameters"]["required"].append("zzz")
    call = parse_tool_calls(
        '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "1"}}'
    )[0]
    for v in (validators, build_validators(TOOL_SCHEMAS)):
        assert validate_call(call, v).error is None
