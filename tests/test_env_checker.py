"""``textgym.env_checker.check_text_env``: it passes a good env and names the rule each broken
one breaks."""

import random
from pathlib import Path

import gymnasium as gym
import pytest

from textgym.core import TextEnvAdapter
from textgym.env_checker import TextEnvCheckError, check_text_env
from textgym.envs import GSM8KEnv, ReverseTextEnv

FIXTURES = Path(__file__).parent / "fixtures"


def registered(cls, **kwargs):
    """Register ``cls`` under a fresh id; return the id (removed by the fixture below)."""
    env_id = f"checker/{cls.__name__}-v0"
    gym.register(id=env_id, entry_point=cls, kwargs=kwargs)
    return env_id


@pytest.fixture(autouse=True)
def forget_ids():
    yield
    for env_id in [i for i in gym.registry if i.startswith("checker/")]:
        del gym.registry[env_id]


def test_a_good_env_passes_as_an_id_and_as_an_env():
    check_text_env("textgym/GSM8K-v0", ["#### 7", "no answer"])
    check_text_env(gym.make("textgym/ReverseText-v0", max_chars=200), ["<reversed_text>x"])


class _ExtraReward(GSM8KEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + 1.0, terminated, truncated, info


class _SharedState(ReverseTextEnv):
    """Each instance answers alike for one seed, but differently from its twin."""

    made = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        type(self).made += 1
        self.marks = "!" * type(self).made  # state shared through the class, not the seed

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs + self.marks, info


class _Undocumented(GSM8KEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "secret": 1}


class _WrongGold(GSM8KEnv):
    def prompt(self, index):
        question, extra = super().prompt(index)
        return question, {**extra, "gold_completion": "#### -123456"}


class _NoGold(GSM8KEnv):
    def prompt(self, index):
        question, extra = super().prompt(index)
        return question, {k: v for k, v in extra.items() if k != "gold_completion"}


class _NumpyReward(GSM8KEnv):
    def step(self, action):
        import numpy as np

        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.float64(reward), terminated, truncated, info


class _GlobalRandomAction(GSM8KEnv):
    @staticmethod
    def random_action(observation, info, rng):
        return f"#### {random.randint(0, 10**9)}"


class _RaisesOnHostile(GSM8KEnv):
    def step(self, action):
        if len(action) > 4000:
            raise ValueError("too long to parse")
        return super().step(action)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_ExtraReward, "do not sum to the reward"),
        (_SharedState, "differ at step 0; draw every random choice from self.np_random"),
        (_Undocumented, r"lists the step info keys .* but step emitted .*'secret'"),
        (_WrongGold, "the gold completions must solve the episode"),
        (_NoGold, "has_gold_completion is True, but the reset info lacks gold_completion"),
        (_NumpyReward, "expected the reward to be a finite Python float"),
        (_GlobalRandomAction, "random_action drew .* from generators of one seed"),
    ],
)
def test_a_broken_env_fails_with_the_rule_it_breaks(cls, message):
    with pytest.raises(TextEnvCheckError, match=message):
        check_text_env(registered(cls), ["#### 7"])


def test_an_optional_info_key_may_be_absent_but_a_required_one_may_not():
    # TicTacToe-v0 documents history [reset, optional]: only games started part-way have it.
    check_text_env(gym.make("textgym/TicTacToe-v0"), ["<move>4</move>"])
    check_text_env(gym.make("textgym/TicTacToe-v0", start_boards=[[4, 0, 8]]), ["<move>1</move>"])
    with pytest.raises(TextEnvCheckError, match=r"lists the reset info keys .*\(optional: \[\]\)"):
        check_text_env(registered(_NoHint), ["#### 7"])


class _NoHint(GSM8KEnv):  # no docstring: GSM8KEnv's Information: section is its contract
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {k: v for k, v in info.items() if k != "gold_answer"}


def test_an_env_that_raises_on_hostile_text_is_not_excused():
    with pytest.raises(ValueError, match="too long to parse"):
        check_text_env(registered(_RaisesOnHostile), ["#### 7"])


def test_a_plain_text_env_is_checked_through_the_adapter(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    import mypkg.plain

    env = gym.make("Plain-v0")
    check_text_env(env, ["apple", "river"])
    assert isinstance(TextEnvAdapter(env).unwrapped, TextEnvAdapter)
    with pytest.raises(ValueError, match="Counter-v0 builds CounterEnv, whose spaces are not text"):
        check_text_env("Counter-v0")
    assert mypkg.plain.WORDS
