"""``textgym.card.env_card``: every registered env and the authoring guide's envs pass their
card (the oracle at its maximum, every floor below it with a standard error), and a broken env
fails the section it breaks."""

import time

import gymnasium as gym
import pytest

import textgym
from textgym.card import FLOORS, NO_OP_ACTION, SECTIONS, env_card, max_return
from textgym.check_episodes import HOSTILE_ACTIONS, hostile_actions
from textgym.env_checker import CHECKS, text_env_checks
from textgym.envs import GSM8KEnv

from .test_authoring_guide import IDS as GUIDE_IDS
from .test_authoring_guide import guide  # noqa: F401  (the fixture that loads the guide's envs)

ENV_IDS = list(textgym.ENV_DESCRIPTIONS)


def assert_sound(card, floors=FLOORS):
    assert card["status"] == "pass", card["failed"]
    assert set(card["checks"]) == set(CHECKS)
    assert all(c["status"] in ("pass", "skip") for c in card["checks"].values())
    oracle = card["oracle"]
    assert oracle["mean"] == pytest.approx(oracle["maximum"])
    assert oracle["at_maximum"] == oracle["episodes"] == card["tasks"] and not oracle["failing"]
    for name in floors:
        floor = card["floors"][name]
        assert floor["mean"] < oracle["maximum"] and floor["stderr"] is not None, name
        assert floor["episodes"] == card["tasks"]
    assert card["leakage"]["status"] in ("pass", "skip")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_registered_env_passes_its_card(env_id):
    card = env_card(env_id, tasks=8)
    assert_sound(card)
    if gym.make(env_id).unwrapped.has_gold_completion:
        assert card["leakage"]["status"] == "pass" and card["leakage"]["completions"] >= 8


@pytest.mark.parametrize("env_id", GUIDE_IDS)
def test_the_authoring_guides_envs_pass_their_card(guide, env_id):  # noqa: F811
    card = env_card(env_id, tasks=8)
    assert_sound(card, floors=("empty", "no-op"))
    # The guide's envs declare no random_action: the random floor is skipped, saying how.
    assert card["floors"]["random"]["status"] == "skip"
    assert "random_action" in card["floors"]["random"]["detail"]


def test_all_five_cards_take_under_a_minute():
    started = time.perf_counter()
    cards = [env_card(env_id) for env_id in ENV_IDS]  # the default 20 tasks, as textgym check
    assert time.perf_counter() - started < 60
    assert [c["status"] for c in cards] == ["pass"] * len(ENV_IDS)


def test_a_card_is_deterministic_for_a_seed():
    first, second = (env_card("textgym/EmailToolUse-v1", tasks=6, seed=3) for _ in range(2))
    first.pop("seconds"), second.pop("seconds")
    assert first == second


def test_the_email_floor_above_zero_is_shown():
    floors = env_card("textgym/EmailToolUse-v1", tasks=20)["floors"]
    assert floors["no-op"]["above_zero"] and 0 < floors["no-op"]["mean"] < 1
    assert floors["no-op"]["at_maximum"] >= 1  # the requests that are done by doing nothing


def test_tictactoe_maximum_follows_the_opponent():
    assert max_return(gym.make("textgym/TicTacToe-v0").unwrapped) == 0.5  # a draw
    weak = gym.make("textgym/TicTacToe-v0", random_move_prob=0.5).unwrapped
    assert max_return(weak) == 1.0
    card = env_card("textgym/TicTacToe-v0", {"random_move_prob": 0.5}, tasks=20)
    oracle = card["oracle"]
    assert oracle["status"] == "fail" and 0 < oracle["failing"] < 20  # draws listed by seed
    assert all(t["return"] < 1.0 and "seed" in t for t in oracle["failing_tasks"])
    assert card["failed"] == ["oracle"]


# -- broken envs: each fails the section it breaks ---------------------------------------


class _PaysForNothing(GSM8KEnv):
    """A verifier that returns full reward for an answer without a number."""

    def grade(self, index, action):
        found = super().grade(index, action)
        if action is not None and not any(ch.isdigit() for ch in action):
            return found._replace(components={"correct": 1.0, "format": 0.0}, invalid_reason=None)
        return found


class _WrongGold(GSM8KEnv):
    def prompt(self, index):
        question, extra = super().prompt(index)
        return question, {**extra, "gold_completion": "#### -123456"}


class _Leaky(GSM8KEnv):
    def prompt(self, index):
        question, extra = super().prompt(index)
        return f"{question}\n(worked solution: {extra['gold_completion']})", extra


class _RaisesOnBinary(GSM8KEnv):
    def step(self, action):
        if "\x00" in action:
            raise UnicodeError("cannot read a NUL")
        return super().step(action)


class _Nondeterministic(GSM8KEnv):
    made = 0

    def reset(self, *, seed=None, options=None):
        type(self).made += 1
        obs, info = super().reset(seed=seed, options=options)
        return obs + "!" * type(self).made, info


@pytest.mark.parametrize(
    ("cls", "section", "detail"),
    [
        (_PaysForNothing, "floors", None),
        (_WrongGold, "oracle", None),
        (_Leaky, "leakage", None),
        (_RaisesOnBinary, "hostile", "UnicodeError: cannot read a NUL"),
        (_Nondeterministic, "determinism", "differ at step 0"),
    ],
)
def test_a_broken_env_fails_the_section_it_breaks(cls, section, detail):
    env_id = f"card/{cls.__name__}-v0"
    gym.register(id=env_id, entry_point=cls)
    try:
        card = env_card(env_id, tasks=4)
    finally:
        gym.registry.pop(env_id)
    assert card["status"] == "fail" and section in card["failed"], card["failed"]
    if section in CHECKS:
        assert detail in card["checks"][section]["detail"]
    if section == "floors":
        assert card["floors"]["empty"]["status"] == "fail"
        assert card["floors"]["no-op"]["solved"] == 4 and card["floors"]["no-op"]["mean"] == 1.0
    if section == "oracle":
        assert card["oracle"]["failing"] == 4 and len(card["oracle"]["failing_tasks"]) == 4
    if section == "leakage":
        assert card["leakage"]["leaks"] == 4 and card["leakage"]["leaked"][0]["task"]


def test_checks_report_skips_and_the_sections_are_named():
    report = text_env_checks("textgym/TicTacToe-v0")
    assert list(report) == list(CHECKS)
    assert report["gold"]["status"] == "skip" and "gold" in report["gold"]["detail"]
    assert SECTIONS[: len(CHECKS)] == CHECKS and NO_OP_ACTION == "Done."


@pytest.mark.parametrize("name", [*HOSTILE_ACTIONS, "huge", "template only"])
def test_the_hostile_corpus_never_raises_and_keeps_the_reward_in_range(name):
    for env_id in ENV_IDS:
        env = gym.make(env_id)
        actions = hostile_actions(env.unwrapped)
        if name not in actions:
            continue  # template only: an env without an action_template
        env.reset(seed=0)
        _, reward, _, _, info = env.step(actions[name])
        assert 0.0 <= reward <= max_return(env.unwrapped), (env_id, name, reward)
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
