"""textgym.registration: one table, registered by one loop, with no constructor defaults in it."""

import inspect

import gymnasium as gym
import pytest

import textgym
from textgym.registration import COMPOSITES, ENVS, register_envs


def test_the_table_is_what_is_registered():
    registered = {i for i in gym.registry if i.startswith("textgym/")}
    tasks, composites = {entry.id for entry in ENVS}, {entry.id for entry in COMPOSITES}
    assert registered == tasks | composites and tasks == set(textgym.ENV_DESCRIPTIONS)
    assert list(textgym.ENV_DESCRIPTIONS) == [entry.id for entry in ENVS]


@pytest.mark.parametrize("entry", ENVS + COMPOSITES, ids=lambda e: e.id)
def test_each_spec_carries_no_copied_defaults(entry):
    spec = gym.spec(entry.id)
    assert spec.kwargs == {}  # every default lives in the constructor's signature only
    assert spec.entry_point == entry.entry_point
    assert spec.max_episode_steps == entry.max_episode_steps
    env = gym.make(entry.id).unwrapped
    assert isinstance(env, textgym.TextEnv)
    assert f"{type(env).__module__}:{type(env).__name__}" == entry.entry_point
    assert inspect.signature(type(env)).parameters  # the defaults are there


def test_register_envs_is_idempotent():
    before = {i: gym.registry[i] for i in textgym.ENV_DESCRIPTIONS}
    register_envs()
    assert {i: gym.registry[i] for i in textgym.ENV_DESCRIPTIONS} == before


#: A reset option each env refuses (an unknown task, a board no game reaches).
REFUSED_OPTIONS = {
    "textgym/TicTacToe-v0": {"board": "garbage"},
    "textgym/ReverseText-v0": {"task_index": -5},
    "textgym/GSM8K-v0": {"task_index": 10**9},
    "textgym/EmailToolUse-v1": {"task_index": "not a number"},
    "textgym/Workplace-v1": {"task_id": "no such task"},
}


@pytest.mark.parametrize("entry", ENVS, ids=lambda e: e.id)
@pytest.mark.parametrize("first", ["refused", "refused twice"])
def test_a_refused_reset_leaves_the_made_env_usable(entry, first):
    # Gymnasium's passive checker marked its reset check done before the reset returned, so
    # after a refused first reset every step raised TypeError from the checker itself.
    env = gym.make(entry.id)
    for _ in range(2 if first == "refused twice" else 1):
        with pytest.raises(ValueError):
            env.reset(seed=0, options=REFUSED_OPTIONS[entry.id])
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step("not a valid answer")
    assert isinstance(reward, float) and env.observation_space.contains(obs)
    env.close()
