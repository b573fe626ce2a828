"""textgym.registration: one table, registered by one loop, with no constructor defaults in it."""

import inspect

import gymnasium as gym
import pytest

import textgym
from textgym.registration import ENVS, register_envs


def test_the_table_is_what_is_registered():
    registered = {i for i in gym.registry if i.startswith("textgym/")}
    assert registered == {entry.id for entry in ENVS} == set(textgym.ENV_DESCRIPTIONS)
    assert list(textgym.ENV_DESCRIPTIONS) == [entry.id for entry in ENVS]


@pytest.mark.parametrize("entry", ENVS, ids=lambda e: e.id)
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
