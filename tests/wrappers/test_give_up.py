"""GiveUpPenalty: charged once when a tool-use episode ends unsolved with no write, else 0."""

import gymnasium as gym
import pytest

import textgym  # noqa: F401  (registers the envs)
from textgym.builder import EnvRecipe, env_factory
from textgym.wrappers import REWARD_WRAPPERS, GiveUpPenalty

EMAIL = "textgym/EmailToolUse-v1"


def _episode(env, replies, seed):
    env.reset(seed=seed)
    rewards, info = [], {}
    for reply in replies:
        _, reward, terminated, truncated, info = env.step(reply)
        rewards.append(reward)
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
        if terminated or truncated:
            break
    return rewards, info


def _seed_where(noop: bool) -> int:
    env = gym.make(EMAIL)
    for seed in range(200):
        if env.reset(seed=seed)[1]["noop_task"] is noop:
            return seed
    raise AssertionError(f"no seed below 200 with noop_task={noop}")


def test_a_refusal_on_a_task_that_needs_a_write_is_charged_once():
    env = GiveUpPenalty(gym.make(EMAIL), penalty=0.3)
    rewards, info = _episode(env, ["Done."], _seed_where(noop=False))
    assert rewards == [-0.3]
    assert info["reward_components"] == {"outcome": 0.0, "give_up": -0.3}
    assert info["total_writes"] == 0


def test_reads_then_truncation_without_a_write_is_giving_up():
    env = GiveUpPenalty(gym.make(EMAIL, max_turns=2))
    search = '<tool_call>{"name": "email_search_emails", "arguments": {"query": "x"}}</tool_call>'
    rewards, info = _episode(env, [search, search], _seed_where(noop=False))
    assert rewards == [0.0, -0.2]
    assert info["success"] is False


def test_the_gold_answer_and_a_noop_refusal_are_not_charged():
    env = GiveUpPenalty(gym.make(EMAIL))
    seed = _seed_where(noop=False)
    gold = env.reset(seed=seed)[1]["gold_completion"]
    rewards, info = _episode(env, [gold, "Done."], seed)
    assert rewards == [0.0, 1.0] and info["reward_components"]["give_up"] == 0.0
    rewards, info = _episode(env, ["Done."], _seed_where(noop=True))
    assert rewards == [1.0] and info["reward_components"]["give_up"] == 0.0


def test_a_wrong_write_is_an_attempt_not_a_refusal():
    env = GiveUpPenalty(gym.make(EMAIL))
    seed = _seed_where(noop=False)
    info = env.reset(seed=seed)[1]
    send = (
        '<tool_call>{"name": "email_send_email", "arguments": {"recipient": '
        '"nobody@example.com", "subject": "x", "body": "y"}}</tool_call>'
    )
    rewards, info = _episode(env, [send, "Done."], seed)
    assert info["total_writes"] == 1 and info["success"] is False
    assert rewards == [0.0, 0.0]


def test_registered_by_name_and_refused_for_an_env_without_the_keys():
    assert REWARD_WRAPPERS["give_up_penalty"] is GiveUpPenalty
    make, _ = env_factory(EnvRecipe(EMAIL, wrappers=("invalid_action_penalty", "give_up_penalty")))
    env = make()
    env.reset(seed=_seed_where(noop=False))
    assert env.step("Done.")[1] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="GiveUpPenalty needs an env that reports"):
        GiveUpPenalty(gym.make("textgym/TicTacToe-v0"))
    with pytest.raises(ValueError, match="finite penalty"):
        GiveUpPenalty(gym.make(EMAIL), penalty=float("nan"))
