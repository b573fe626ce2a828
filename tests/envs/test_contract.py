"""Every registered textgym env fills in the TextEnv contract truthfully (textgym/core.py)."""

import gymnasium as gym
import pytest

import textgym
from textgym.checks import check_stop_strings

ENV_IDS = list(textgym.ENV_DESCRIPTIONS)


@pytest.fixture(params=ENV_IDS)
def env(request):
    made = gym.make(request.param)
    yield made.unwrapped
    made.close()


def test_declared_types(env):
    assert isinstance(env, textgym.TextEnv)
    assert check_stop_strings("stop_strings", env.stop_strings) == env.stop_strings
    assert env.action_template is None or env.action_template.format(4) != env.action_template
    assert env.is_well_formed is None or env.is_well_formed("") in (True, False)
    assert env.format_weight is None or type(env.format_weight) is float
    assert type(env.has_gold_completion) is bool and type(env.has_opponent) is bool


def test_task_ids_name_the_tasks_reset_plays(env):
    if env.task_ids is None:
        pytest.skip(f"{type(env).__name__} generates its tasks")
    assert env.task_ids and all(isinstance(t, str) for t in env.task_ids)
    for index in (0, len(env.task_ids) - 1):
        assert env.reset(options={"task_index": index})[1]["task_id"] == env.task_ids[index]


def test_gold_completion_is_given_when_declared(env):
    _, info = env.reset(seed=0)
    assert ("gold_completion" in info) == env.has_gold_completion


def test_opponent_and_evaluation_settings_are_reset_options(env):
    if env.has_opponent:
        assert env.reset(seed=0, options={"random_move_prob": 0.25})[1]["random_move_prob"] == 0.25
    for name, options in env.evaluation_settings.items():
        assert isinstance(name, str) and name
        env.reset(seed=0, options=dict(options))  # accepted


def test_tictactoe_names_its_two_opponents():
    env = gym.make("textgym/TicTacToe-v0").unwrapped
    assert dict(env.evaluation_settings) == {
        "random": {"random_move_prob": 1.0},
        "optimal": {"random_move_prob": 0.0},
    }
    assert env.has_opponent and env.stop_strings == ("</move>",)
    assert env.is_well_formed("<think>x</think><move>4</move>")
    assert not gym.make("textgym/GSM8K-v0").unwrapped.has_opponent
