"""Per-tool-call diagnostics of EmailToolUse episodes, on hand-made replies and on the gold policy."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.envs.email_tool_use.diagnostics import (
    CALL_KINDS,
    diagnose_tool_calls,
    summarize_call_diagnoses,
    task_of,
)

SEND = {
    "name": "email_send_email",
    "arguments": {"recipient": "ana.li@x.co", "subject": "Hi", "body": "Yes."},
}
DELETE = {"name": "email_delete_email", "arguments": {"email_id": "00000003"}}
SEARCH = {"name": "email_search_emails", "arguments": {"query": "budget"}}
GOLD = (SEARCH, SEND, DELETE)


def call(c: dict) -> str:
    return f"<tool_call>{json.dumps(c)}</tool_call>"


def kinds(diagnosis) -> list[str]:
    return [c["kind"] for c in diagnosis.calls]


def test_a_correct_episode():
    d = diagnose_tool_calls([call(SEARCH) + call(SEND) + call(DELETE), "Done."], GOLD)
    assert kinds(d) == ["lookup", "correct", "correct"]
    assert (d.verdict, d.missing, d.gold_calls) == ("correct", 0, 2)


def test_lookups_are_not_required_and_text_compares_case_insensitively():
    shouted = {**SEND, "arguments": {**SEND["arguments"], "body": "  YES. "}}
    d = diagnose_tool_calls([call(shouted), call(DELETE)], GOLD)
    assert kinds(d) == ["correct", "correct"]
    assert d.verdict == "correct"


def test_invalid_json_rejects_the_whole_reply():
    d = diagnose_tool_calls(
        ['<tool_call>{"name": "email_send_email", </tool_call>' + call(SEND)], GOLD
    )
    assert kinds(d) == ["invalid_json", "not_run"]
    assert (d.verdict, d.missing) == ("invalid_json", 2)


def test_recovering_from_a_rejected_reply_is_correct():
    d = diagnose_tool_calls(["<tool_call>not json</tool_call>", call(SEND) + call(DELETE)], GOLD)
    assert kinds(d) == ["invalid_json", "correct", "correct"]
    assert d.verdict == "correct"
    assert d.kinds["invalid_json"] == 1


def test_wrong_tool():
    forward = {
        "name": "email_forward_email",
        "arguments": {"email_id": "00000003", "recipient": "bo@x.co"},
    }
    d = diagnose_tool_calls([call(SEND) + call(forward)], GOLD)
    assert kinds(d) == ["correct", "wrong_tool"]
    assert (d.verdict, d.missing) == ("wrong_tool", 1)


def test_unknown_tool_is_a_wrong_tool():
    d = diagnose_tool_calls([call({"name": "calendar_create_event", "arguments": {}})], GOLD)
    assert kinds(d) == ["wrong_tool"]
    assert d.verdict == "wrong_tool"


def test_wrong_arguments():
    other = {"name": "email_delete_email", "arguments": {"email_id": "00000004"}}
    d = diagnose_tool_calls([call(SEND) + call(other)], GOLD)
    assert kinds(d) == ["correct", "wrong_arguments"]
    assert (d.verdict, d.missing) == ("wrong_arguments", 1)


def test_arguments_against_the_schema_are_wrong_arguments():
    d = diagnose_tool_calls([call({"name": "email_delete_email", "arguments": {"id": 3}})], GOLD)
    assert kinds(d) == ["wrong_arguments"]


def test_right_calls_in_the_wrong_order():
    d = diagnose_tool_calls([call(DELETE), call(SEND)], GOLD)
    assert sorted(kinds(d)) == ["correct", "wrong_order"]
    assert (d.verdict, d.missing) == ("wrong_order", 0)


def test_a_repeat_is_extra_and_no_call_is_missing():
    d = diagnose_tool_calls([call(SEND) + call(SEND) + call(DELETE)], GOLD)
    assert kinds(d) == ["correct", "extra", "correct"]
    assert d.verdict == "extra"
    d = diagnose_tool_calls(["I will not do that."], GOLD)
    assert (d.calls, d.verdict, d.missing) == ((), "missing", 2)


def test_too_many_calls_run_none():
    d = diagnose_tool_calls([call(SEND) + call(DELETE)], GOLD, max_calls_per_step=1)
    assert kinds(d) == ["not_run", "not_run"]
    assert d.verdict == "missing"


def test_summary_counts_kinds_and_verdicts():
    ds = [
        diagnose_tool_calls([call(SEND) + call(DELETE)], GOLD),
        diagnose_tool_calls([call(DELETE), call(SEND)], GOLD),
        diagnose_tool_calls(["<tool_call>{</tool_call>"], GOLD),
    ]
    s = summarize_call_diagnoses(ds)
    assert s["episodes"] == 3 and s["calls"] == 5
    assert set(s["call_kinds"]) == set(CALL_KINDS)
    assert s["call_kinds"]["correct"] == 3 and s["call_kinds"]["wrong_order"] == 1
    assert s["verdicts"]["correct"] == 1 and s["verdict_rates"]["invalid_json"] == pytest.approx(
        1 / 3
    )
    assert s["missing_rate"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("kwargs", [{}, {"num_steps": 3, "distractors": 4}])
def test_the_gold_policy_is_diagnosed_correct(kwargs):
    env = gym.make("textgym/EmailToolUse-v1", **kwargs)
    for seed in range(8):
        _, info = env.reset(seed=seed)
        gold = task_of(info["task_id"], **kwargs).gold_calls
        d = diagnose_tool_calls([info["gold_completion"], "Done."], gold)
        assert d.verdict == "correct", (seed, d)
        assert all(k in ("correct", "lookup") for k in kinds(d))


def test_task_of_refuses_a_bad_task_id():
    with pytest.raises(ValueError, match="email-00000000000004d2"):
        task_of("email-12")
