"""Workplace-v1 on the real WorkBench data in ../shared/data/workplace: the verifier on all 690 tasks."""

import json
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.envs.workplace import WorkplaceEnv
from textgym.envs.workplace.tools import WRITE_TOOLS
from textgym.toolcalls import format_tool_calls

WORKPLACE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "workplace"

pytestmark = pytest.mark.skipif(
    not (WORKPLACE / "workbench" / "tasks.jsonl").is_file(),
    reason=f"the WorkBench data is not at {WORKPLACE} (../shared/data/workplace beside the repository); "
    "the unit tests use the bundled sample workplace instead",
)


@pytest.fixture(scope="module")
def env():
    return WorkplaceEnv(data_dir=str(WORKPLACE))


def finish(env, text):
    *_, info = env.step(text)
    if info["success"] is None:
        *_, info = env.step(info["gold_completion"])
    return info


def test_gold_calls_earn_one_on_all_690_tasks(env):
    assert len(env.data.tasks) == 690 and len(env.schemas) == 27
    failed = []
    for i in range(690):
        _, info = env.reset(options={"task_index": i})
        end = finish(env, info["gold_completion"])
        if not (
            end["success"]
            and end["reward_components"] == {"outcome": 1.0}
            and end["total_tool_errors"] == 0
        ):
            failed.append(info["task_id"])
    assert failed == []


def test_do_nothing_earns_exactly_the_share_of_tasks_whose_gold_changes_nothing(env):
    wins, noop, empty = [], [], []
    for i, task in enumerate(env.data.tasks):
        _, info = env.reset(options={"task_index": i})
        wins.append(env.step("I checked and there is nothing to do.")[1])
        noop.append(info["noop_task"])
        empty.append(not task.gold_calls)
    assert sum(empty) == 122
    assert sum(wins) == sum(noop) and [w == 1.0 for w in wins] == noop
    # Two CRM tasks reassign a customer to the person already assigned: their gold calls are not
    # empty but change nothing, so under state verification doing nothing wins them too.
    extra = [t.task_id for t, n, e in zip(env.data.tasks, noop, empty) if n and not e]
    assert extra == [
        "workbench-customer_relationship_manager-0031",
        "workbench-customer_relationship_manager-0032",
    ]
    assert sum(noop) == 124


def test_changing_one_argument_of_one_gold_write_earns_zero(env):
    still_right, tried = [], 0
    for i, task in enumerate(env.data.tasks):
        writes = [j for j, c in enumerate(task.gold_calls) if c["name"] in WRITE_TOOLS]
        if not writes:
            continue
        j = writes[i % len(writes)]
        keys = sorted(task.gold_calls[j]["arguments"])
        key = keys[i % len(keys)]
        calls = [dict(c, arguments=dict(c["arguments"])) for c in task.gold_calls]
        calls[j]["arguments"][key] += "x"
        env.reset(options={"task_index": i})
        tried += 1
        if finish(env, format_tool_calls(calls))["success"]:
            still_right.append((task.task_id, calls[j]["name"], key))
    assert tried == 568 and still_right == []


def test_cli_gold_eval(tmp_path):
    kwargs = json.dumps({"data_dir": str(WORKPLACE)})
    assert (
        main(
            [
                "eval",
                "textgym/Workplace-v1",
                "--policy",
                "gold",
                "--episodes",
                "200",
                "--env-kwargs",
                kwargs,
                "--no-progress",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 200 and summary["reward_components"] == {"outcome": 1.0}
    assert summary["invalid_action_rate"] == 0.0 and summary["truncated_rate"] == 0.0


# ---------------------------------------------------------------- verdicts as in NeMo Gym


def verdict(env, task_id, extra=(), replace=None):
    """Success of the task's gold calls (or ``replace``) followed by ``extra`` calls in one reply."""
    _, info = env.reset(options={"task_id": task_id})
    task = env.data.tasks[env.task_ids.index(task_id)]
    calls = list(replace if replace is not None else task.gold_calls) + list(extra)
    return finish(env, format_tool_calls(calls))["success"]


def test_email_0033_gold_plus_an_add_with_any_status_fails_as_in_the_reference(env):
    """Before: the add was refused (enum check), so the tables still matched and it won."""
    add = {
        "name": "customer_relationship_manager_add_customer",
        "arguments": {
            "customer_name": "Anaya",
            "assigned_to_email": "sam@atlas.com",
            "status": "Active",
        },
    }
    assert verdict(env, "workbench-email-0033") is True
    assert verdict(env, "workbench-email-0033", [add]) is False


def test_calendar_0104_verdicts_follow_the_references_reading_of_event_start(env):
    """Before: a week-date start was written (a wrong extra row) and a slash start refused."""
    gold = env.data.tasks[env.task_ids.index("workbench-calendar-0104")].gold_calls
    week = {
        "name": "calendar_create_event",
        "arguments": dict(gold[0]["arguments"], event_start="2023-W48-5"),
    }
    assert verdict(env, "workbench-calendar-0104", [week]) is True  # refused: nothing written
    env.reset(options={"task_id": "workbench-calendar-0104"})
    slash = dict(gold[0]["arguments"], event_start="2023/12/04 13:30:00")
    obs, *_ = env.step(format_tool_calls([{"name": "calendar_create_event", "arguments": slash}]))
    assert "Error" not in obs and env.tables()["calendar_events"][-1][3] == "2023/12/04 13:30:00"


def test_the_ten_queries_with_a_literal_backslash_n_verify_with_it_copied(env):
    """WorkBench's eval read "\\n" in an argument as a newline; NeMo's JSON arguments do not."""
    escaped = [t for t in env.data.tasks if "\\n" in t.query]
    assert len(escaped) == 10
    for task in escaped:
        copied = [
            dict(c, arguments={k: v.replace("\n", "\\n") for k, v in c["arguments"].items()})
            for c in task.gold_calls
        ]
        assert copied != list(task.gold_calls)
        assert verdict(env, task.task_id, replace=copied) is True, task.task_id
