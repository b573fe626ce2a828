"""``textgym eval`` / ``collect`` as a pass over the tasks.

On an env that lists its tasks, every task is played exactly once, in order, unless
``--limit``, ``--task-ids``, ``--rollouts-per-task`` or ``--sample-tasks`` say otherwise;
``--rollouts-per-task k`` reports pass@k and mean@k and writes one row per task.
"""

import json
from pathlib import Path

import gymnasium as gym
import pytest

import textgym.cli
import textgym.cli.building
from textgym.cli import main
from textgym.policies import GoldPolicy
from textgym.types import Completion

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
GSM8K_TEST = SHARED / "gsm8k" / "test.jsonl"
WORKPLACE = SHARED / "workplace"
needs_gsm8k = pytest.mark.skipif(
    not GSM8K_TEST.is_file(),
    reason=(f"the GSM8K test split is not at {GSM8K_TEST} (../shared/data beside the repository)"),
)
needs_workplace = pytest.mark.skipif(
    not (WORKPLACE / "workbench" / "tasks.jsonl").is_file(),
    reason=(f"the WorkBench data is not at {WORKPLACE} (../shared/data beside the repository)"),
)
QUIET = ["--no-progress"]


def eval_run(tmp_path, *argv):
    out = tmp_path / "run"
    # --overwrite: a test may evaluate into the same directory again (refused without it).
    assert main(["eval", *argv, *QUIET, "--output-dir", str(out), "--overwrite"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    ids = [
        json.loads(line)["task_id"]
        for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    rows_path = out / "per_task.jsonl"
    rows = (
        [json.loads(line) for line in rows_path.read_text().splitlines()]
        if rows_path.exists()
        else None
    )
    return summary, ids, rows


def env_task_ids(env_id, **kwargs):
    env = gym.make(env_id, **kwargs)
    try:
        return list(env.unwrapped.task_ids)
    finally:
        env.close()


@needs_gsm8k
def test_gold_eval_plays_each_of_the_1319_test_problems_exactly_once(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # run from the repository, the data path relative to it
    summary, ids, rows = eval_run(
        tmp_path,
        "textgym/GSM8K-v0",
        "--policy",
        "gold",
        "--env-kwargs",
        '{"data_path": "../shared/data/gsm8k/test.jsonl"}',
    )
    assert len(ids) == len(set(ids)) == 1319
    assert ids == env_task_ids("textgym/GSM8K-v0", data_path=str(GSM8K_TEST))  # in order
    assert summary["episodes"] == summary["episodes_requested"] == 1319
    assert summary["tasks"] == {
        "available": 1319,
        "selected": 1319,
        "played": 1319,
        "complete": 1319,
        "rollouts_per_task": 1,
        "success": "correct >= 1",
        "success_threshold": 1.0,
        "pass@1": 1.0,
        "mean@1": pytest.approx(1.1),
    }
    assert [r["task_id"] for r in rows] == ids and all(
        r["returns"] == [pytest.approx(1.1)] for r in rows
    )


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [("textgym/GSM8K-v0", {}), ("textgym/ReverseText-v0", {}), ("textgym/Workplace-v1", {})],
)
def test_default_eval_walks_every_bundled_task_once_in_order(env_id, kwargs, tmp_path):
    summary, ids, rows = eval_run(tmp_path, env_id, "--policy", "gold", "--rollout-batch-size", "7")
    assert ids == env_task_ids(env_id) and len(rows) == len(ids)
    assert summary["tasks"]["played"] == summary["tasks"]["available"] == len(ids)
    assert summary["tasks"]["pass@1"] == 1.0


@needs_workplace
def test_workplace_gold_eval_walks_the_first_tasks_of_the_real_data(tmp_path):
    kwargs = json.dumps({"data_dir": str(WORKPLACE)})
    summary, ids, _ = eval_run(
        tmp_path,
        "textgym/Workplace-v1",
        "--policy",
        "gold",
        "--env-kwargs",
        kwargs,
        "--limit",
        "25",
    )
    assert ids == env_task_ids("textgym/Workplace-v1", data_dir=str(WORKPLACE))[:25]
    assert summary["tasks"]["available"] == 690 and summary["tasks"]["pass@1"] == 1.0


@needs_workplace
@pytest.mark.slow
def test_workplace_gold_eval_covers_all_690_tasks(tmp_path):
    kwargs = json.dumps({"data_dir": str(WORKPLACE)})
    summary, ids, rows = eval_run(
        tmp_path, "textgym/Workplace-v1", "--policy", "gold", "--env-kwargs", kwargs
    )
    assert len(ids) == len(set(ids)) == 690 and len(rows) == 690
    assert summary["tasks"]["pass@1"] == 1.0 and summary["reward_components"] == {"outcome": 1.0}


def test_limit_task_ids_and_episodes_choose_the_walk(tmp_path):
    all_ids = env_task_ids("textgym/GSM8K-v0")
    _, ids, _ = eval_run(tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--limit", "5")
    assert ids == all_ids[:5]
    chosen = [all_ids[7], all_ids[2], all_ids[11]]
    summary, ids, rows = eval_run(
        tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--task-ids", ",".join(chosen)
    )
    assert (
        ids == chosen
        and [r["task_id"] for r in rows] == chosen
        and summary["tasks"]["selected"] == 3
    )
    _, ids, _ = eval_run(
        tmp_path,
        "textgym/GSM8K-v0",
        "--policy",
        "gold",
        "--task-ids",
        ",".join(chosen),
        "--limit",
        "2",
    )
    assert ids == chosen[:2]
    summary, ids, rows = eval_run(
        tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--episodes", "30"
    )
    assert ids == all_ids + all_ids[:12]  # in order, from the first again after the last
    assert [r["rollouts"] for r in rows] == [2] * 12 + [1] * 6 and summary["tasks"]["pass@1"] == 1.0


def test_sample_tasks_draws_with_replacement_as_before(tmp_path):
    summary, ids, rows = eval_run(
        tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--sample-tasks", "--episodes", "40"
    )
    assert len(ids) == 40 and len(set(ids)) < 18  # 40 draws from 18 problems repeat some
    assert summary["tasks"] is None and rows is None
    summary, ids, _ = eval_run(tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--sample-tasks")
    assert len(ids) == summary["episodes"] == 100


def test_task_ids_on_an_env_that_makes_tasks_from_their_id(tmp_path):
    chosen = ["email-00000000000004d2", "email-0000000000000007"]
    summary, ids, rows = eval_run(
        tmp_path,
        "textgym/EmailToolUse-v1",
        "--policy",
        "gold",
        "--task-ids",
        ",".join(chosen),
        "--rollouts-per-task",
        "2",
    )
    assert ids == [chosen[0], chosen[0], chosen[1], chosen[1]]
    assert (
        summary["tasks"]["available"] is None
        and summary["tasks"]["pass@2"] == 1.0
        and len(rows) == 2
    )


class EveryFourthRight:
    """Gold on episodes 0, 4, 8, ... (played one at a time), a wrong number otherwise; the
    answers of episodes 1, 5, 9, ... were cut at the token limit."""

    name = "every-fourth"
    tokens_generated = None  # a scripted policy: no tokens

    def __init__(self):
        self.gold, self.calls = GoldPolicy(), 0

    def act(self, conversations, infos):
        (gold,) = self.gold.act(conversations, infos)
        call, self.calls = self.calls, self.calls + 1
        text = gold.text if call % 4 == 0 else "#### -1"
        return [Completion(text, finish_reason="length" if call % 4 == 1 else "stop")]


def test_rollouts_per_task_reports_pass_at_k_and_mean_at_k(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        textgym.cli.building, "build_policy", lambda name, kwargs, make=None: EveryFourthRight()
    )
    summary, ids, rows = eval_run(
        tmp_path,
        "textgym/GSM8K-v0",
        "--policy",
        "gold",
        "--limit",
        "3",
        "--rollouts-per-task",
        "4",
        "--rollout-batch-size",
        "1",
    )
    assert ids == [i for i in env_task_ids("textgym/GSM8K-v0")[:3] for _ in range(4)]
    tasks = summary["tasks"]
    assert tasks["rollouts_per_task"] == 4 and tasks["complete"] == 3
    assert tasks["pass@1"] == pytest.approx(0.25) and tasks["pass@4"] == 1.0  # one right in four
    assert tasks["mean@4"] == pytest.approx((1.1 + 3 * 0.1) / 4)
    assert summary["length_truncated_rate"] == 0.25
    assert [r["rollouts"] for r in rows] == [4, 4, 4] and rows[0]["success"] == [
        True,
        False,
        False,
        False,
    ]
    assert rows[0]["returns"] == pytest.approx([1.1, 0.1, 0.1, 0.1])
    assert rows[0]["reward_components"] == {
        "correct": [1.0, 0.0, 0.0, 0.0],
        "format": pytest.approx([0.1] * 4),
    }
    out = capsys.readouterr().out
    table = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert table["tasks"] == "3 of 18, 4 rollouts each"
    assert table["pass@1 (success: correct >= 1)"] == "25.0%"
    assert table["pass@4 (success: correct >= 1)"] == "100.0%"
    assert table["mean@4 (mean return per task)"] == "0.3500"
    assert table["completions cut at --max-new-tokens"] == "25.0%"
    assert "pass@1 25%, pass@4 100% over 3 tasks" in out
    assert f"wrote {tmp_path / 'run' / 'summary.json'}, " in out and "per_task.jsonl" in out


def test_success_threshold(tmp_path):
    summary, _, rows = eval_run(
        tmp_path,
        "textgym/ReverseText-v0",
        "--policy",
        "gold",
        "--limit",
        "2",
        "--success-threshold",
        "1.01",
    )  # lcs never exceeds 1
    assert summary["tasks"]["pass@1"] == 0.0 and summary["tasks"]["success"] == "lcs >= 1.01"
    assert rows[0]["success"] == [False]


def test_collect_walks_the_tasks_too(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert (
        main(
            [
                "collect",
                "textgym/GSM8K-v0",
                "--policy",
                "gold",
                "--limit",
                "4",
                "--rollouts-per-task",
                "2",
                *QUIET,
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert len(out.read_text().splitlines()) == 8
    printed = capsys.readouterr().out
    assert "4 of 18, 2 rollouts each" in printed and "pass@2 (success: correct >= 1)" in printed


def test_a_stale_per_task_file_is_removed(tmp_path):
    eval_run(tmp_path, "textgym/GSM8K-v0", "--policy", "gold", "--limit", "2")
    _, _, rows = eval_run(tmp_path, "textgym/TicTacToe-v0", "--policy", "random", "--episodes", "2")
    assert rows is None  # no task list: no per-task rows, and not the old ones


def test_rollouts_of_a_task_share_its_seed(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "eval",
                "textgym/GSM8K-v0",
                "--policy",
                "gold",
                "--limit",
                "2",
                "--rollouts-per-task",
                "3",
                "--seed",
                "10",
                *QUIET,
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    first, second = env_task_ids("textgym/GSM8K-v0")[:2]
    assert [(r["task_id"], r["seed"]) for r in records] == [
        (first, 10),
        (first, 10),
        (first, 10),
        (second, 11),
        (second, 11),
        (second, 11),
    ]


# seeds are tasks too, so --rollouts-per-task works on every env


def test_rollouts_per_seed_on_an_env_without_a_task_list(tmp_path):
    summary, _, rows = eval_run(
        tmp_path,
        "textgym/TicTacToe-v0",
        "--policy",
        "random",
        "--limit",
        "4",
        "--rollouts-per-task",
        "3",
        "--seed",
        "5",
    )
    records = [
        json.loads(line)
        for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert [r["seed"] for r in records] == [5, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8]
    assert [(r["task_id"], r["rollouts"]) for r in rows] == [
        ("seed=5", 3),
        ("seed=6", 3),
        ("seed=7", 3),
        ("seed=8", 3),
    ]
    tasks = summary["tasks"]
    assert tasks["rollouts_per_task"] == 3 and tasks["played"] == 4 and tasks["complete"] == 4
    assert 0.0 <= tasks["pass@1"] <= tasks["pass@3"] <= 1.0
    assert summary["rollouts_per_task"] == 3 and "group_size" not in summary


def test_rollouts_per_seed_default_to_100_seeds(tmp_path):
    summary, _, rows = eval_run(
        tmp_path, "textgym/TicTacToe-v0", "--policy", "random", "--rollouts-per-task", "2"
    )
    assert summary["episodes"] == 200 and len(rows) == 100
    assert rows[-1]["task_id"] == "seed=99"


def test_rollouts_per_seed_of_a_generated_tool_task_replay_one_task(tmp_path):
    summary, ids, rows = eval_run(
        tmp_path,
        "textgym/EmailToolUse-v1",
        "--policy",
        "gold",
        "--limit",
        "2",
        "--rollouts-per-task",
        "2",
    )
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]  # the seed makes the task
    assert summary["tasks"]["pass@2"] == 1.0 and [r["successes"] for r in rows] == [2, 2]


def test_sampled_tasks_in_rollouts_of_one_seed(tmp_path):
    summary, ids, rows = eval_run(
        tmp_path,
        "textgym/GSM8K-v0",
        "--policy",
        "gold",
        "--sample-tasks",
        "--limit",
        "3",
        "--rollouts-per-task",
        "2",
    )
    assert len(ids) == 6 and all(ids[2 * g] == ids[2 * g + 1] for g in range(3))
    assert [r["task_id"] for r in rows] == ["seed=0", "seed=1", "seed=2"]
    assert summary["tasks"]["available"] is None and summary["tasks"]["pass@2"] == 1.0
