"""Untrusted completions: the tic-tac-toe parsers run in linear time, agree with the regular
expressions they replaced, and a move number of any length never raises."""

from __future__ import annotations

import re
import time

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.envs.tictactoe.parsing import extract_move_text, is_answer, is_well_formed, parse_move

# The previous implementation, kept here as the reference semantics.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MOVE = re.compile(r"<move>(.*?)</move>", re.DOTALL)


_ANSWER = re.compile(
    r"\s*(?:<think>(?:(?!</?think>).)*</think>)?\s*<move>\s*\d\s*</move>\s*", re.DOTALL
)  # quadratic on long runs of whitespace: two adjacent \s* when there is no think block


def reference_extract(completion: str) -> str | None:
    found = _MOVE.findall(_THINK.sub(" ", completion))
    return found[-1].strip() if found else None


pieces = st.sampled_from(["<think>", "</think>", "<move>", "</move>", "4", "12", " ", "x", "\n"])


@settings(max_examples=400, deadline=None)
@given(st.lists(pieces, max_size=30).map("".join))
def test_extract_move_text_agrees_with_the_regex_it_replaced(text):
    assert extract_move_text(text) == reference_extract(text)


answer_pieces = st.sampled_from(
    ["<think>", "</think>", "<move>", "</move>", "4", "12", " ", "\n", "\u2003", "x", "\u0663"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(answer_pieces, max_size=12).map("".join))
def test_is_answer_agrees_with_the_regex_it_replaced(text):
    assert is_answer(text) is (_ANSWER.fullmatch(text) is not None)


@pytest.mark.parametrize(
    "text",
    [
        "<think>" * 150_000,
        "<move>" * 170_000,
        "<think><move>" * 80_000,
        "<think>" + "</move><move>" * 80_000,
        " " * 1_000_000 + "<move>",
    ],
    ids=["think", "move", "think-move", "unclosed-think", "spaces"],
)
def test_parsers_take_linear_time_on_a_million_adversarial_characters(text):
    began = time.perf_counter()
    extract_move_text(text)
    parse_move(text)
    is_well_formed(text)
    is_answer(text)
    assert time.perf_counter() - began < 1.0


@pytest.mark.parametrize(
    ("digits", "expected"),
    [
        ("4", 4),
        ("0004", 4),
        ("-3", -3),
        ("+7", 7),
        ("9" * 18, int("9" * 18)),
        ("1" + "0" * 4300, 10**18),
        ("-" + "5" * 5000, -(10**18)),
        ("0" * 5000, 0),
    ],
)
def test_parse_move_of_any_length(digits, expected):
    assert parse_move(f"<move>{digits}</move>") == expected


@pytest.mark.parametrize("style", ["full", "compact"])
def test_a_4300_digit_move_is_an_explained_invalid_action(style):
    env = gym.make("textgym/TicTacToe-v0", prompt_style=style)
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<move>" + "0" * 4300 + "4</move>")
    assert obs and info["invalid_action"] is False and info["agent_move"] == 4
    obs, _, _, _, info = env.step("<move>" + "9" * 5000 + "</move>")
    assert info["invalid_action"] is True and info["invalid_reason"] == "out_of_range"
    assert len(obs) <= env.observation_space.max_length
