"""Evaluation as a pass over the tasks: task plans, walks, per-task results and pass@k."""

import itertools
import math
from fractions import Fraction

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.evaluation import TaskResults, TaskWalk, pass_at_k, plan_tasks, task_score
from textgym.policies import GoldPolicy
from textgym.rollout import Trajectory, rollout


def brute_force_pass_at_k(n, c, k):
    """The share of the k-subsets of n samples (c of them successes) holding a success."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(samples[i] for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize(
    ("n", "c", "k"), [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)]
)
def test_pass_at_k_equals_the_share_of_k_subsets_with_a_success(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(n, c, k)), abs=1e-12)


@given(
    st.integers(1, 200).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_is_the_closed_form_and_a_probability(nck):
    n, c, k = nck
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-9)
    assert 0.0 <= pass_at_k(n, c, k) <= 1.0
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


@pytest.mark.parametrize(
    ("n", "c", "k", "error"),
    [
        (0, 0, 1, ValueError),
        (3, 4, 1, ValueError),
        (3, 1, 4, ValueError),
        (3, 1, 0, ValueError),
        (3, -1, 1, ValueError),
        (3.0, 1, 1, ValueError),
        (3, True, 1, ValueError),
    ],
)
def test_pass_at_k_refuses_impossible_counts(n, c, k, error):
    with pytest.raises(error):
        pass_at_k(n, c, k)


def test_plan_tasks_all_limit_and_ids():
    ids = ("a", "b", "c", "b")  # a repeated id (ReverseText allows them) picks its first index
    assert plan_tasks(ids) == [
        ("a", {"task_index": 0}),
        ("b", {"task_index": 1}),
        ("c", {"task_index": 2}),
        ("b", {"task_index": 3}),
    ]
    assert plan_tasks(ids, limit=2) == [("a", {"task_index": 0}), ("b", {"task_index": 1})]
    assert plan_tasks(ids, task_ids=["c", "b"]) == [
        ("c", {"task_index": 2}),
        ("b", {"task_index": 1}),
    ]
    assert plan_tasks(ids, task_ids=["c", "b"], limit=1) == [("c", {"task_index": 2})]
    assert plan_tasks(None) is None
    assert plan_tasks(None, task_ids=["email-1"]) == [("email-1", {"task_id": "email-1"})]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task_ids": ["a", "zz"]}, "Unknown task id 'zz' (1 of 2 unknown)"),
        ({"task_ids": ["a", "a"]}, "listed twice"),
        ({"task_ids": []}, "at least one task id"),
        ({"limit": 0}, "limit to be an int in [1, 3] (the tasks chosen), got 0"),
        ({"limit": 4}, "limit to be an int in [1, 3]"),
        ({"task_ids": ["b"], "limit": 2}, "limit to be an int in [1, 1]"),
    ],
)
def test_plan_tasks_refuses_what_it_cannot_play(kwargs, message):
    with pytest.raises(ValueError) as info:
        plan_tasks(("a", "b", "c"), **kwargs)
    assert message in str(info.value)


def test_task_walk_plays_each_task_k_times_consecutively_then_wraps():
    tasks = plan_tasks(("a", "b", "c"))
    walk = TaskWalk(tasks, rollouts=2)
    assert len(walk) == 6 and [walk.task_of(e) for e in range(6)] == [0, 0, 1, 1, 2, 2]
    assert list(walk) == [{"task_index": i} for i in (0, 0, 1, 1, 2, 2)]
    walk[0]["task_index"] = 99  # each episode gets its own dict
    assert walk[0] == {"task_index": 0}
    longer = TaskWalk(tasks, episodes=5)
    assert [o["task_index"] for o in longer] == [0, 1, 2, 0, 1]
    with pytest.raises(IndexError):
        longer[5]


def traj(task_id, components):
    return Trajectory(
        env_id=None,
        seed=0,
        task_id=task_id,
        rewards=[sum(components.values())],
        reward_components=[components],
    )


def test_task_score_is_the_task_component_not_the_shaping():
    assert task_score(traj("t", {"correct": 1.0, "format": 0.1})) == ("correct", 1.0)
    assert task_score(traj("t", {"lcs": 0.95, "format": 0.1})) == ("lcs", 0.95)  # return 1.05
    assert task_score(traj("t", {"outcome": 0.5, "invalid_action": -0.1})) == ("outcome", 0.5)
    assert task_score(traj("t", {"bonus": 2.0})) == ("return", 2.0)


def test_task_results_rows_and_pass_at_k():
    results = TaskResults(["a", "b", "c"], k=2)
    results.add(0, traj("a", {"lcs": 1.0, "format": 0.1}))
    results.add(0, traj("a", {"lcs": 0.9, "format": 0.1}))  # return 1.0 but not exact
    results.add(1, traj("b", {"lcs": 0.5}))  # no format component this time: 0
    results.add(1, traj("b", {"lcs": 0.4, "format": 0.1}))
    results.add(2, traj("c", {"lcs": 1.0}))  # one rollout only: not complete
    rows = list(results.rows())
    assert rows[0] == {
        "task_id": "a",
        "rollouts": 2,
        "successes": 1,
        "returns": [1.1, 1.0],
        "success": [True, False],
        "reward_components": {"format": [0.1, 0.1], "lcs": [1.0, 0.9]},
    }
    assert rows[1]["reward_components"] == {"format": [0.0, 0.1], "lcs": [0.5, 0.4]}
    assert rows[2]["rollouts"] == 1
    summary = results.result()
    assert summary["played"] == 3 and summary["complete"] == 2 and summary["rollouts_per_task"] == 2
    assert summary["success"] == "lcs >= 1"
    assert summary["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert summary["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert summary["mean@2"] == pytest.approx((2.1 / 2 + 1.0 / 2) / 2)


def test_task_results_with_the_success_threshold_and_no_complete_task():
    results = TaskResults(["a"], k=3, success_threshold=0.5)
    results.add(0, traj("a", {"outcome": 0.5}))
    summary = results.result()
    assert summary["complete"] == 0 and math.isnan(summary["pass@3"])
    assert next(results.rows())["success"] == [True]


def test_a_gold_walk_over_gsm8k_plays_every_task_once():
    env = gym.make("textgym/GSM8K-v0")
    tasks = plan_tasks(env.unwrapped.task_ids)
    walk = TaskWalk(tasks)
    trajectories = rollout(
        lambda: gym.make("textgym/GSM8K-v0"),
        GoldPolicy(),
        [0] * len(walk),
        batch_size=4,
        options=walk,
    )
    assert [t.task_id for t in trajectories] == list(env.unwrapped.task_ids)
    results = TaskResults([t for t, _ in tasks])
    for e, t in enumerate(trajectories):
        results.add(walk.task_of(e), t)
    assert results.result()["pass@1"] == 1.0 and results.result()["success"] == "correct >= 1"
