"""Workplace-v1 on the bundled sample workplace: gold, do-nothing, errors, isolation, fuzzing."""

import copy
import csv
import json
import pickle
import shutil

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.workplace import WorkplaceEnv
from textgym.envs.workplace.dataset import SAMPLE_DIR
from textgym.envs.workplace.tools import TOOL_SCHEMAS
from textgym.envs.workplace.verify import replay
from textgym.toolcalls import format_tool_calls

ENV = WorkplaceEnv()
N_TASKS = len(ENV.data.tasks)


def play(env, completions):
    steps = []
    for text in completions:
        steps.append(env.step(text))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


@pytest.mark.parametrize("index", range(N_TASKS))
def test_gold_earns_one_and_do_nothing_earns_the_noop_flag(index):
    env = WorkplaceEnv()
    _, info = env.reset(options={"task_index": index})
    rewards = []
    while True:
        _, reward, terminated, truncated, info = env.step(info["gold_completion"])
        rewards.append(reward)
        if terminated or truncated:
            break
    assert rewards[-1] == 1.0 and info["success"] is True and info["total_tool_errors"] == 0
    assert len(rewards) == (1 if info["noop_task"] else 2)
    _, info = env.reset(options={"task_index": index})
    _, reward, terminated, _, _ = env.step("Nothing to do.")
    assert terminated and reward == (1.0 if info["noop_task"] else 0.0)


def test_noop_flag_matches_empty_gold_on_the_sample():
    for i, task in enumerate(ENV.data.tasks):
        _, info = ENV.reset(options={"task_index": i})
        assert info["noop_task"] == (not task.gold_calls)


def test_changed_argument_of_a_gold_write_earns_zero():
    env = WorkplaceEnv()
    for i, task in enumerate(env.data.tasks):
        if not task.gold_calls:
            continue
        for key in task.gold_calls[0]["arguments"]:
            calls = [dict(c, arguments=dict(c["arguments"])) for c in task.gold_calls]
            calls[0]["arguments"][key] += "x"
            env.reset(options={"task_index": i})
            env.step(format_tool_calls(calls))
            assert env.step("done")[1] == 0.0, (task.task_id, key)


BAD_CALLS = [
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"name": "email_delete_everything", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "email_send_email", "arguments": {"recipient": "maya.okafor@atlas.com"}}</tool_call>',
    (
        '<tool_call>{"name": "calendar_create_event", "arguments": {"event_name": "x", "participant_email": '
        '"maya.okafor@atlas.com", "event_start": "2023-12-01 10:00:00", "duration": 30}}</tool_call>'
    ),
    '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": 3}}</tool_call>',
    '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "00000003", "x": "y"}}</tool_call>',
    '<tool_call>{"name": "email_delete_email", "arguments": "not an object"}</tool_call>',
]


@pytest.mark.parametrize("text", BAD_CALLS)
def test_bad_calls_give_errors_and_leave_tables_unchanged(text):
    env = WorkplaceEnv()
    env.reset(seed=0)
    before = env.tables()
    obs, reward, terminated, truncated, info = env.step(text + "\n" + text)
    assert env.tables() == before
    assert obs.count("<tool_response>\nError: ") == 2
    assert info["invalid_action"] and info["tool_errors"] == 2 and info["tool_calls"] == 2
    assert (reward, terminated, truncated) == (0.0, False, False)


DELETE_3 = (
    '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "00000003"}}</tool_call>'
)


@pytest.mark.parametrize("bad", BAD_CALLS)
@pytest.mark.parametrize("bad_first", [False, True])
def test_a_reply_with_one_invalid_call_runs_no_call(bad, bad_first):
    """All or nothing per reply: a valid write beside an invalid call does not run."""
    env = WorkplaceEnv()
    env.reset(seed=0)
    before = env.tables()
    obs, reward, terminated, truncated, info = env.step(
        bad + DELETE_3 if bad_first else DELETE_3 + bad
    )
    assert env.tables() == before
    assert info["invalid_action"] is True and info["invalid_reason"] is not None
    assert info["tool_calls"] == info["tool_errors"] == 2 and (reward, terminated, truncated) == (
        0.0,
        False,
        False,
    )
    blocks = obs.split("</tool_response>")[:2]
    bad_block, good_block = blocks if bad_first else blocks[::-1]
    assert "Error: " in bad_block and "Not run: " in good_block
    assert f"call {1 if bad_first else 2} of this reply is invalid" in good_block
    assert "No call of this reply was run and nothing changed" in obs
    *_, info = env.step(DELETE_3)  # the corrected reply runs
    assert not info["invalid_action"] and info["tool_errors"] == 0 and env.tables() != before


def test_more_calls_than_the_limit_run_none():
    env = WorkplaceEnv(max_calls_per_step=4)
    env.reset(seed=0)
    before = env.tables()
    send = {
        "name": "email_send_email",
        "arguments": {"recipient": "maya.okafor@atlas.com", "subject": "s", "body": "b"},
    }
    obs, *_, info = env.step(format_tool_calls([send] * 5))
    assert env.tables() == before and "<tool_response>" not in obs
    assert "5 tool calls, more than the 4" in obs and "none was run" in obs
    assert (
        info["invalid_reason"] == "too_many_calls"
        and info["tool_calls"] == info["tool_errors"] == 5
    )
    *_, info = env.step(format_tool_calls([send] * 4))
    assert not info["invalid_action"] and len(env.tables()["emails"]) == len(before["emails"]) + 4


def test_a_tool_error_is_a_result_and_the_other_calls_run():
    env = WorkplaceEnv()
    env.reset(seed=0)
    before = env.tables()
    missing = (
        '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "99"}}</tool_call>'
    )
    obs, *_, info = env.step(missing + DELETE_3)
    assert "Email not found." in obs and "Email deleted successfully." in obs
    assert (
        not info["invalid_action"] and info["invalid_reason"] is None and info["tool_errors"] == 1
    )
    assert len(env.tables()["emails"]) == len(before["emails"]) - 1


def _restore(obj, snapshot):
    """Put ``obj`` (nested dicts and lists) back to ``snapshot`` in place, keeping every object's identity."""
    if isinstance(obj, dict):
        for key in list(obj):
            if key not in snapshot:
                del obj[key]
        for key, value in snapshot.items():
            if key in obj and isinstance(value, dict | list) and type(obj[key]) is type(value):
                _restore(obj[key], value)
            else:
                obj[key] = copy.deepcopy(value)
    else:
        obj[:] = copy.deepcopy(snapshot)


@pytest.fixture
def guarded_schemas():
    """Undo any change to the global schemas (only needed while info["tools"] still shares them)."""
    snapshot = copy.deepcopy(list(TOOL_SCHEMAS))
    yield snapshot
    for schema, saved in zip(TOOL_SCHEMAS, snapshot):
        _restore(schema, saved)


def vandalize(tools):
    for tool in tools:
        tool["name"] = "renamed"
        params = tool["parameters"]
        params["required"].append("zzz")
        params["properties"]["zzz"] = {"type": "integer"}
        params["properties"].get("email_id", {})["type"] = "integer"


def test_mutating_info_tools_deeply_changes_no_validation(guarded_schemas):
    """info["tools"] shares no nested dict with the schemas or the cached validators."""
    env = WorkplaceEnv()
    _, info = env.reset(seed=0)
    vandalize(info["tools"])
    assert list(TOOL_SCHEMAS) == guarded_schemas and env.schemas == guarded_schemas
    fresh = WorkplaceEnv()
    _, fresh_info = fresh.reset(seed=0)
    assert fresh_info["tools"] == guarded_schemas
    for e in (fresh, env):
        *_, step = e.step(DELETE_3)
        assert step["invalid_action"] is False and step["tool_errors"] == 0
    _, again = env.reset(seed=0)
    assert again["tools"] == guarded_schemas and again["tools"] is not info["tools"]


def test_tool_error_strings_change_nothing_and_are_not_invalid_actions():
    env = WorkplaceEnv()
    env.reset(seed=0)
    before = env.tables()
    obs, *_, info = env.step(
        '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "99"}}</tool_call>'
    )
    assert "Email not found." in obs and env.tables() == before
    assert info["tool_errors"] == 1 and not info["invalid_action"]


def test_info_tools_are_the_schemas_and_reads_are_paginated():
    env = WorkplaceEnv()
    _, info = env.reset(seed=0)
    assert len(info["tools"]) == 27 and all(t["type"] == "function" for t in info["tools"])
    obs, *_ = env.step(
        '<tool_call>{"name": "email_search_emails", "arguments": {"query": "roadmap", '
        '"page_size": 1, "page": 9}}</tool_call>'
    )
    body = json.loads(obs.split("\n")[1])
    # the total is named after the items, as in NeMo Gym
    assert body["pagination"] == {"total_emails": 2, "page": 2, "page_size": 1, "total_pages": 2}
    assert body["emails"][0]["email_id"] == "00000000"  # newest first, last page


def big_workplace(root, n_emails=200, n_tasks=20):
    """The sample workplace with ``n_emails`` more 1,000-character emails and ``n_tasks`` delete tasks."""
    shutil.copytree(SAMPLE_DIR, root)
    with open(root / "processed" / "emails.csv", "a", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        for i in range(n_emails):
            writer.writerow(
                [
                    f"{100 + i:08d}",
                    "inbox",
                    "maya.okafor@atlas.com",
                    f"subject {i}",
                    "2023-11-01 09:00:00",
                    f"{i} " + "x" * 1000,
                ]
            )
    first = json.loads((root / "tasks.jsonl").read_text().splitlines()[0])
    with open(root / "tasks.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n_tasks):
            calls = [
                {
                    "name": "email_delete_email",
                    "arguments": json.dumps({"email_id": f"{100 + i:08d}"}),
                }
            ]
            fh.write(json.dumps(dict(first, id=f"big-{i}", ground_truth=calls)) + "\n")
    return root


def test_the_gold_outcome_cache_stays_small(tmp_path):
    """The cache keeps digests, not each task's whole gold tables (546 MiB for WorkBench's 690)."""
    env = WorkplaceEnv(data_dir=str(big_workplace(tmp_path / "big")))
    n = len(env.data.tasks)
    for i in range(n):
        _, info = env.reset(options={"task_index": i})
        assert info["noop_task"] is False
    assert len(env.data.gold_states) == n
    # 20 tasks over 200 KB of emails: whole tables would pickle to megabytes; digests to ~50 bytes each.
    assert len(pickle.dumps(env.data.gold_states)) < 128 * n
    env.reset(
        options={"task_index": 3}
    )  # the cached outcome still grades: gold wins, a wrong delete loses
    env.step(
        format_tool_calls([{"name": "email_delete_email", "arguments": {"email_id": "00000103"}}])
    )
    assert env.step("done")[1] == 1.0
    env.reset(options={"task_index": 3})
    env.step(
        format_tool_calls([{"name": "email_delete_email", "arguments": {"email_id": "00000104"}}])
    )
    assert env.step("done")[1] == 0.0


def test_step_limit_truncates_and_grades():
    env = gym.make("textgym/Workplace-v1")
    env.reset(options={"task_index": 0})
    read = '<tool_call>{"name": "company_directory_find_email_address", "arguments": {"name": "m"}}</tool_call>'
    steps = play(env, [read] * 20)
    assert len(steps) == 10 and steps[-1][3] and steps[-1][4]["success"] is False


def test_domains_filter():
    env = WorkplaceEnv(domains=["email"])
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert ids == {"sample-email-0000", "sample-email-0001"}
    with pytest.raises(ValueError, match="Unknown domains"):
        WorkplaceEnv(domains=["mail"])


def test_pickle_mid_episode_keeps_the_sandbox():
    env = WorkplaceEnv()
    env.reset(options={"task_index": 0})
    env.step(
        '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "00000003"}}</tool_call>'
    )
    clone = pickle.loads(pickle.dumps(env))
    assert clone.tables() == env.tables()
    assert clone.step("done")[1] == env.step("done")[1] == 1.0


@given(st.text())
def test_arbitrary_text_never_raises(text):
    env = ENV
    env.reset(seed=0)
    obs, reward, *_ = env.step(text)
    assert reward in (0.0, 1.0) and isinstance(obs, str)


WRITES = st.sampled_from(
    [
        ("email_send_email", {"recipient": "jonah.weiss@atlas.com", "subject": "s{}", "body": "b"}),
        ("email_delete_email", {"email_id": "0000000{}"}),
        (
            "calendar_create_event",
            {
                "event_name": "e{}",
                "participant_email": "maya.okafor@atlas.com",
                "event_start": "2023-12-01 10:00:00",
                "duration": "30",
            },
        ),
        (
            "analytics_create_plot",
            {
                "time_min": "2023-11-2{}",
                "time_max": "2023-11-30",
                "value_to_plot": "total_visits",
                "plot_type": "line",
            },
        ),
        ("customer_relationship_manager_delete_customer", {"customer_id": "0000000{}"}),
        (
            "project_management_update_task",
            {"task_id": "0000000{}", "field": "list_name", "new_value": "Completed"},
        ),
    ]
)


@given(st.lists(st.tuples(st.integers(0, 15), WRITES, st.integers(0, 4)), min_size=1, max_size=40))
def test_sixteen_interleaved_episodes_never_see_each_others_writes(schedule):
    envs = [WorkplaceEnv(max_turns=100) for _ in range(16)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    own: list[list[dict]] = [[] for _ in envs]
    for which, (name, template), k in schedule:
        args = {key: value.format(k) for key, value in template.items()}
        envs[which].step(format_tool_calls([{"name": name, "arguments": args}]))
        own[which].append({"name": name, "arguments": args})
    for env, calls in zip(envs, own):
        expected = env.data.template.new()
        replay(expected, calls)
        assert env.tables() == expected.snapshot(tuple(env.tables()))


ARG_VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "00000001",
            "00000003",
            "maya.okafor@atlas.com",
            "2023-12-01 10:00:00",
            "2023-11-27",
            "30",
            "0",
            "-5",
            "Backlog",
            "Won",
            "Software",
            "bar",
            "total_visits",
            "status",
            "list_name",
            "duration",
            "event_start",
            "participant_email",
            "assigned_to_email",
            "task_id",
            "x@y.z",
            "",
        ]
    ),
    st.integers(-3, 10**6),
    st.none(),
    st.booleans(),
)


@st.composite
def tool_calls(draw):
    from textgym.envs.workplace.tools import TOOL_SCHEMAS

    schema = draw(st.sampled_from(TOOL_SCHEMAS))
    params = list(schema["parameters"]["properties"])
    keys = draw(st.lists(st.sampled_from(params), unique=True))
    return {"name": schema["name"], "arguments": {k: draw(ARG_VALUES) for k in keys}}


@given(st.lists(tool_calls(), min_size=1, max_size=6))
def test_well_formed_calls_with_arbitrary_arguments_never_raise(calls):
    env = ENV
    env.reset(seed=1)
    before = env.tables()
    obs, _, _, _, info = env.step(format_tool_calls(calls))
    assert obs.count("<tool_response>") == len(calls) and info["tool_calls"] == len(calls)
    if info["invalid_action"]:  # a rejected reply changes nothing
        assert env.tables() == before and info["tool_errors"] == len(calls)
    assert env.step("done")[1] in (0.0, 1.0)
