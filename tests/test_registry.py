"""Every registered textgym id passes :func:`textgym.env_checker.check_text_env` (Gymnasium's
``check_env``, twin-env determinism, pickling, types and reward sums, hostile actions, the env
contract, the gold completions, documented info keys), the checker users run on their own ids."""

import gymnasium as gym
import numpy as np
import pytest

import textgym
from textgym.env_checker import check_text_env, documented_info_keys
from textgym.registration import COMPOSITES

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("textgym/"))

#: Well-formed and malformed actions of the tasks' formats, beside each env's own random and
#: gold actions that the checker plays.
ACTIONS = [
    "<move>4</move>",
    "<think>x</think><move>0</move>",
    "<move>12</move>",
    "<move>a</move>",
    "hello",
    "#### 42",
    "\\boxed{7}",
    "<reversed_text>olleh</reversed_text>",
    '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "00000001"}}</tool_call>',
    "<tool_call>{not json}</tool_call>",
]


def test_ids_match_descriptions():
    composites = {entry.id for entry in COMPOSITES}
    assert set(ENV_IDS) == set(textgym.ENV_DESCRIPTIONS) | composites


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_text_env(env_id):
    check_text_env(env_id, ACTIONS)


@pytest.mark.parametrize("env_id", list(textgym.ENV_DESCRIPTIONS))  # a mixture: its members'
def test_every_env_documents_reset_and_step_info(env_id):
    documented = documented_info_keys(type(gym.make(env_id).unwrapped))
    assert documented["reset"] and documented["step"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_random_action_of_an_env_is_in_its_action_space(env_id):
    env = gym.make(env_id)
    sample = env.unwrapped.random_action
    if sample is None:
        pytest.skip(f"{env_id} plays random moves or tool calls from its info")
    obs, info = env.reset(seed=0)
    drawn = {sample(obs, info, np.random.default_rng(s)) for s in range(5)}
    assert len(drawn) > 1 and all(env.unwrapped.action_space.contains(a) for a in drawn)


def test_the_gold_env_list_comes_from_the_envs_themselves():
    """``--policy gold``'s error names the ids whose env class declares gold completions, and
    exactly those envs put one in their reset info (no list kept by hand)."""
    from textgym.builder import gold_env_ids
    from textgym.registration import ENVS

    gives_gold = set()
    for entry in ENVS:
        env = gym.make(entry.id)
        try:
            _, info = env.reset(seed=0)
            if "gold_completion" in info:
                gives_gold.add(entry.id)
        finally:
            env.close()
    assert set(gold_env_ids()) == gives_gold and "textgym/TicTacToe-v0" not in gives_gold
