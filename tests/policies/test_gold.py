"""GoldPolicy: plays back the dataset's own solution; refuses envs that have none."""

import json

import gymnasium as gym
import pytest

import textgym  # noqa: F401  (registers the ids)
from textgym.builder import make_policy, policy_names
from textgym.cli import main
from textgym.policies import GoldPolicy, Policy
from textgym.rollout import rollout


def test_gold_is_a_registered_policy():
    assert "gold" in policy_names()
    policy = make_policy("gold", seed=3)
    assert isinstance(policy, GoldPolicy) and isinstance(policy, Policy) and policy.name == "gold"


def test_act_returns_the_gold_completion_per_conversation():
    infos = [{"gold_completion": "#### 1"}, {"gold_completion": "<reversed_text>a</reversed_text>"}]
    completions = GoldPolicy().act([[], []], infos)
    assert [c.text for c in completions] == ["#### 1", "<reversed_text>a</reversed_text>"]


def test_env_without_gold_is_a_clear_error():
    env = gym.make("textgym/TicTacToe-v0")
    _, info = env.reset(seed=0)
    with pytest.raises(KeyError, match="gold_completion.*reference solution"):
        GoldPolicy().act([[]], [info])


@pytest.mark.parametrize(
    ("env_id", "component"), [("textgym/ReverseText-v0", "lcs"), ("textgym/GSM8K-v0", "correct")]
)
def test_rollout_with_gold_earns_full_reward(env_id, component):
    trajectories = rollout(lambda: gym.make(env_id), GoldPolicy(), list(range(40)), batch_size=8)
    assert len(trajectories) == 40
    assert all(t.component_totals()[component] == 1.0 and t.terminated for t in trajectories)
    assert all(t.messages[-2]["role"] == "assistant" for t in trajectories)


@pytest.mark.parametrize(
    ("env_id", "component"), [("textgym/ReverseText-v0", "lcs"), ("textgym/GSM8K-v0", "correct")]
)
def test_cli_eval_gold(env_id, component, tmp_path):
    assert (
        main(
            [
                "eval",
                env_id,
                "--policy",
                "gold",
                "--episodes",
                "30",
                "--no-progress",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policy"] == "gold" and summary["reward_components"][component] == 1.0
    assert summary["mean_return"] == pytest.approx(1.1)
