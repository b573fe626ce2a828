"""Every registered textgym env fills in the TextEnv contract truthfully (textgym/core.py).

The generic checks (declared types, task ids, gold completions, opponent and evaluation
settings, random actions, expert policies) are :func:`textgym.env_checker.check_text_env`,
run over every id in ``tests/test_registry.py``; here are the values particular envs declare.
"""

import gymnasium as gym
import pytest

import textgym


@pytest.mark.parametrize("env_id", list(textgym.ENV_DESCRIPTIONS))
def test_declared_types(env_id):
    env = gym.make(env_id).unwrapped
    assert isinstance(env, textgym.TextEnv)
    assert env.action_template is None or env.action_template.format(4) != env.action_template
    assert env.format_weight is None or type(env.format_weight) is float
    assert type(env.has_gold_completion) is bool and type(env.has_opponent) is bool


def test_tictactoe_names_its_two_opponents():
    env = gym.make("textgym/TicTacToe-v0").unwrapped
    assert dict(env.evaluation_settings) == {
        "random": {"opponent": "random", "random_move_prob": 1.0},
        "optimal": {"opponent": "minimax", "random_move_prob": 0.0},
    }
    # ... and the "optimal" setting is the minimax even for an env made with a mix of styles
    mixed = gym.make("textgym/TicTacToe-v0", opponent=["fork", "greedy_edge"])
    for seed in range(5):
        _, info = mixed.reset(seed=seed, options=dict(env.evaluation_settings["optimal"]))
        assert info["opponent"] == "minimax"
    assert env.has_opponent and env.stop_strings == ("</move>",)
    assert env.is_well_formed("<think>x</think><move>4</move>")
    assert not gym.make("textgym/GSM8K-v0").unwrapped.has_opponent


@pytest.mark.parametrize(
    ("env_id", "expert"),
    [
        ("textgym/TicTacToe-v0", "minimax"),
        ("textgym/GSM8K-v0", "gold"),
        ("textgym/ReverseText-v0", "gold"),
        ("textgym/EmailToolUse-v1", "lookup_expert"),
        ("textgym/Workplace-v1", "gold"),
    ],
)
def test_each_env_names_its_expert_policy(env_id, expert):
    assert gym.make(env_id).unwrapped.expert_policy == expert
