"""Untrusted actions in every env: the action-space length is enforced, parsers stay linear.

The rule (:mod:`textgym.spaces`): an action longer than the action space's ``max_length`` is an
invalid action with ``invalid_reason == "too_long"``, an explanatory observation and the state
unchanged, and it is not parsed at all. Each case below is a million characters of the text an
env's parsers find hardest (repeated opening tags, tag soup, nested braces, huge digit runs), at
the limit (parsed: it must be fast) and over it (not parsed: it must cost nothing).
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

import textgym  # noqa: F401  (registers the envs)
from textgym.envs.gsm8k.parsing import extract_final_answer, parse_final_answer
from textgym.envs.reverse_text.parsing import extract_reversed_text
from textgym.envs.reverse_text.parsing import is_well_formed as reverse_well_formed
from textgym.envs.tictactoe.parsing import is_answer, parse_move
from textgym.spaces import TOO_LONG, UnicodeText, too_long_message
from textgym.toolcalls import parse_tool_calls

MILLION = 1_000_000


def fill(pattern: str, length: int) -> str:
    """``pattern`` repeated and cut to exactly ``length`` characters."""
    return (pattern * (length // len(pattern) + 1))[:length]


def lead(prefix: str, pattern: str, length: int) -> str:
    """``prefix``, then ``pattern`` repeated, ``length`` characters in all."""
    return prefix + fill(pattern, length - len(prefix))


def nested(opening: str, closing: str, length: int) -> str:
    """As many ``opening`` as ``closing`` (nested), ``length`` characters in all."""
    k = length // (len(opening) + len(closing))
    return fill(opening * k + closing * k, length)


#: Adversarial actions per env, as functions of their length.
ADVERSARIAL = {
    "textgym/TicTacToe-v0": {
        "think": lambda n: fill("<think>", n),
        "move": lambda n: fill("<move>", n),
        "tag soup": lambda n: fill("<think><move></think>4</move><move>", n),
        "digits": lambda n: lead("<move>", "9", n - 7) + "</move>",
    },
    "textgym/ReverseText-v0": {
        "opening": lambda n: fill("<reversed_text>", n),
        "closing": lambda n: fill("</reversed_text>", n),
        "tag soup": lambda n: fill("<reversed_text>ab</reversed_text><reversed_text>", n),
    },
    "textgym/GSM8K-v0": {
        "nested boxed": lambda n: nested("\\boxed{", "}", n),
        "hashes": lambda n: fill("####", n),
        "digits": lambda n: lead("#### ", "9", n),
        "separators": lambda n: lead("#### ", "1,", n),
        "fractions": lambda n: lead("\\boxed{", "\\frac{1}{", n - 1) + "}",
    },
    "textgym/Workplace-v1": {
        "opening": lambda n: fill("<tool_call>", n),
        "many calls": lambda n: fill("<tool_call>{}</tool_call>", n),
        "deep json": lambda n: lead('<tool_call>{"name": "x", "arguments": ', "[", n),
        "digits": lambda n: lead('<tool_call>{"name": ', "1", n),
    },
    "textgym/EmailToolUse-v1": {
        "many calls": lambda n: fill(
            '<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "1"}}</tool_call>',
            n,
        ),
        "tag soup": lambda n: fill("<tool_call></tool_call><tool_call>{", n),
    },
}
CASES = [(env_id, name) for env_id, cases in ADVERSARIAL.items() for name in cases]


def make(env_id: str):
    env = gym.make(env_id)
    env.reset(seed=0)
    return env


def state(env) -> object:
    """What an invalid action must leave unchanged: the board, or the sandbox's tables."""
    unwrapped = env.unwrapped
    return unwrapped.board if env.spec.id == "textgym/TicTacToe-v0" else unwrapped.tables()


def timed_step(env, action: str):
    began = time.perf_counter()
    result = env.step(action)
    return result, time.perf_counter() - began


@pytest.mark.parametrize(("env_id", "name"), CASES, ids=[f"{e[8:]}-{n}" for e, n in CASES])
def test_a_million_character_action_is_too_long_and_not_read(env_id, name):
    env = make(env_id)
    before = None if env_id in ("textgym/ReverseText-v0", "textgym/GSM8K-v0") else state(env)
    action = ADVERSARIAL[env_id][name](MILLION)
    assert len(action) == MILLION > env.action_space.max_length
    (obs, reward, terminated, truncated, info), seconds = timed_step(env, action)
    assert seconds < 0.1  # one len() beyond the usual bookkeeping
    assert info["invalid_action"] is True and info["invalid_reason"] == TOO_LONG
    assert "1,000,000 characters" in obs and f"{env.action_space.max_length:,}" in obs
    assert env.observation_space.contains(obs)
    assert sum(info["reward_components"].values()) == reward == 0.0
    assert not truncated
    if env_id in ("textgym/ReverseText-v0", "textgym/GSM8K-v0"):
        assert terminated  # single turn: graded 0, like any invalid answer
    else:
        assert not terminated and state(env) == before  # the game or the tables go on unchanged
        _, _, _, _, info = env.step("<move>4</move>" if "TicTacToe" in env_id else "Done.")
        assert info["invalid_action"] is False  # and the next reply is read as usual


@pytest.mark.parametrize(("env_id", "name"), CASES, ids=[f"{e[8:]}-{n}" for e, n in CASES])
def test_an_adversarial_action_at_the_length_limit_is_parsed_quickly(env_id, name):
    env = make(env_id)
    action = ADVERSARIAL[env_id][name](env.action_space.max_length)
    (obs, reward, _, _, info), seconds = timed_step(env, action)
    assert seconds < 1.0
    assert info["invalid_reason"] != TOO_LONG
    assert env.observation_space.contains(obs)
    assert sum(info["reward_components"].values()) == pytest.approx(reward)


@pytest.mark.parametrize("env_id", list(ADVERSARIAL))
def test_the_limit_is_the_action_space_max_length(env_id):
    env = make(env_id)
    limit = env.action_space.max_length
    _, _, _, _, info = env.step(" " * limit)
    assert info["invalid_reason"] != TOO_LONG
    env = make(env_id)
    _, _, _, _, info = env.step(" " * (limit + 1))
    assert info["invalid_reason"] == TOO_LONG


@pytest.mark.parametrize("env_id", ["textgym/Workplace-v1", "textgym/EmailToolUse-v1"])
def test_a_too_long_reply_at_the_turn_limit_ends_the_episode_graded(env_id):
    env = gym.make(env_id, max_turns=1)
    _, first = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("x" * MILLION)
    assert truncated and not terminated and info["invalid_reason"] == TOO_LONG
    assert info["success"] is first["noop_task"] and reward == float(first["noop_task"])
    assert "step limit (1 replies) is reached" in obs


def test_too_long_message():
    space = UnicodeText(max_length=10)
    assert too_long_message("x" * 10, space) is None
    assert too_long_message("x" * 11, space) == (
        "Your reply has 11 characters, more than the 10 this task reads, so it was not read."
    )


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (parse_final_answer, nested("\\boxed{", "}", MILLION)),  # was quadratic: copied each box
        (extract_final_answer, fill("\\boxed{ }", MILLION)),
        (parse_final_answer, "#### " + fill("9", MILLION)),
        (extract_reversed_text, fill("<reversed_text>", MILLION)),
        (reverse_well_formed, fill("</reversed_text><reversed_text>", MILLION)),
        (parse_move, fill("<think><move>", MILLION)),
        (is_answer, " " * MILLION + "<move>"),
        (parse_tool_calls, fill("<tool_call>", MILLION)),
    ],
    ids=["boxed", "blank boxes", "hash digits", "rt open", "rt soup", "move", "answer", "calls"],
)
def test_parsers_are_linear_on_a_million_characters(parser, text):
    """The parsers are public (wrappers such as FormatReward call them on whole completions)."""
    began = time.perf_counter()
    parser(text)
    assert time.perf_counter() - began < 1.0
