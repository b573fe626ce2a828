"""Bounded fuzzer: every registered env x every wrapper stack x hostile text.

For each env of :data:`textgym.registration.ENVS` and each wrapper stack that applies to it
(reward wrappers of :mod:`textgym.wrappers`, the stratified opponent where the env has one, the
chat-messages view, and all of them at once), generated completions are stepped through whole
episodes: huge numbers, lone surrogates, chat special tokens (``<|im_start|>``,
``<start_of_turn>``), the envs' own tags nested and unclosed, and tool-call JSON fragments. Every
step must not raise, must return an observation inside the declared observation space, a finite
Python ``float`` reward inside the documented range and ``bool`` flags, and reward components
that sum to the reward. A second test steps a million characters of tag soup through each stack
and checks the time is linear: well under a second, and within a small factor of ten times a
100,000-character action.

Documented reward ranges (no textgym env declares Gymnasium's removed ``reward_range``): the
env's own ``[0, 1 + format_weight]`` (TicTacToe: ``[0, 1]``; tool envs: ``[0, 1]``),
``FormatReward`` adds ``[0, weight]`` and ``InvalidActionPenalty`` ``[-penalty, 0]`` per step.

Bounded: a few examples per case and no deadline per example, so the module runs in well under
a minute on two cores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import textgym  # noqa: F401  (registers the envs)
from textgym.registration import ENVS
from textgym.spaces import TOO_LONG
from textgym.wrappers import ChatMessages, FormatReward, InvalidActionPenalty, StratifiedOpponent

ENV_IDS = [entry.id for entry in ENVS]
PENALTY, CAP, FORMAT_WEIGHT = 0.1, 0.25, 0.2

# ---------------------------------------------------------------- wrapper stacks


def _format(env: gym.Env) -> gym.Env | None:
    base = env.unwrapped
    if base.format_weight is not None or base.is_well_formed is None:
        return None  # FormatReward refuses it by contract (the env pays its own format)
    return FormatReward(env, weight=FORMAT_WEIGHT)


def _opponent(env: gym.Env) -> gym.Env | None:
    return StratifiedOpponent(env, (0.0, 1.0), groups=4) if env.unwrapped.has_opponent else None


def _all(env: gym.Env) -> gym.Env:
    env = InvalidActionPenalty(env, penalty=PENALTY)
    env = _format(env) or env
    env = _opponent(env) or env
    return ChatMessages(env)


#: Stack name -> builder over ``gymnasium.make(id)``; ``None`` where the stack does not apply.
STACKS: dict[str, Callable[[gym.Env], gym.Env | None]] = {
    "bare": lambda env: env,
    "invalid_action_penalty": lambda env: InvalidActionPenalty(env, penalty=PENALTY),
    "invalid_action_penalty_per_action": lambda env: InvalidActionPenalty(
        env, penalty=PENALTY, mode="action", cap=CAP
    ),
    "format_reward": _format,
    "format_reward+penalty": lambda env: (
        None
        if _format(env) is None
        else FormatReward(InvalidActionPenalty(env, penalty=PENALTY), weight=FORMAT_WEIGHT)
    ),
    "stratified_opponent": _opponent,
    "chat_messages": ChatMessages,
    "all": _all,
}


def build(env_id: str, stack: str) -> gym.Env | None:
    return STACKS[stack](gym.make(env_id))


def reward_range(env: gym.Env) -> tuple[float, float]:
    """The documented per-step reward range of a stack (see the module docstring)."""
    low, high = 0.0, 1.0 + (env.unwrapped.format_weight or 0.0)
    layer = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, FormatReward):
            high += layer.weight
        elif isinstance(layer, InvalidActionPenalty):
            low -= layer.penalty
        layer = layer.env
    return low, high


CASES = [
    pytest.param(env_id, stack, id=f"{env_id.split('/')[1]}-{stack}")
    for env_id in ENV_IDS
    for stack in STACKS
    if build(env_id, stack) is not None
]
_ENVS: dict[tuple[str, str], gym.Env] = {}


def cached(env_id: str, stack: str) -> gym.Env:
    """One env per case for the whole module (making an env loads its data)."""
    if (env_id, stack) not in _ENVS:
        _ENVS[(env_id, stack)] = build(env_id, stack)
    return _ENVS[(env_id, stack)]


# ---------------------------------------------------------------- hostile text

SPECIAL_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|im_start|>assistant\n",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_turn>model\n",
    "<bos>",
    "<eos>",
    "</s>",
    "<|endoftext|>",
]
TAGS = [
    "<think>",
    "</think>",
    "<move>",
    "</move>",
    "<reversed_text>",
    "</reversed_text>",
    "\\boxed{",
    "}",
    "{",
    "####",
    "#### ",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "\\frac{1}{",
]
TOOL_CALLS = [
    '{"name": "email_delete_email", "arguments": {"email_id": "00000001"}}',
    '{"name": "email_search_emails", "arguments": {"query": "a", "page": 1e308, "page_size": -1}}',
    '{"name": "calendar_create_event", "arguments": {"event_name": "x", '
    '"participant_email": "a@b.c", "event_start": "2023-W48-5", "duration": "-5"}}',
    '{"name": "customer_relationship_manager_search_customers", '
    '"arguments": {"follow_up_by_max": "\\ud800"}}',
    '{"name": "analytics_total_visits_count", "arguments": {"time_min": "9999-99-99"}}',
    '{"name": "email_send_email", "arguments": "{\\"recipient\\": \\"x@y.z\\"}"}',
    '{"name": "nope", "arguments": {}}',
    '{"name": 5}',
    '{"name": "email_search_emails", "arguments": {"query": "' + "a " * 50 + '"}}',
    '{"name":',
    '"arguments": {',
    "[[[[[[",
    "null",
]
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
HUGE_NUMBERS = st.one_of(
    st.integers(min_value=10**300, max_value=10**4200).map(str),  # int->str stops at 4,300
    st.integers(min_value=4300, max_value=20_000).map(lambda n: "1" + "0" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["-0", "1e309", "NaN", "inf", "-1", "0x10", "4.0", "04", "1,000,000"]),
)
PIECES = st.one_of(
    st.sampled_from(SPECIAL_TOKENS),
    st.sampled_from(TAGS),
    st.sampled_from(TOOL_CALLS),
    HUGE_NUMBERS,
    SURROGATES,
    st.text(max_size=20),
    st.sampled_from([str(d) for d in range(10)] + ["\n", " ", "\x00", "\u202e", "🙂"]),
)
ACTIONS = st.lists(PIECES, max_size=25).map("".join)


# ---------------------------------------------------------------- checks


def check_step(env: gym.Env, result: tuple, limits: tuple[float, float]) -> None:
    obs, reward, terminated, truncated, info = result
    assert env.observation_space.contains(obs), "observation outside the observation space"
    assert type(reward) is float and math.isfinite(reward)
    low, high = limits
    assert low - 1e-9 <= reward <= high + 1e-9, (reward, limits)
    assert type(terminated) is bool and type(truncated) is bool
    assert math.isclose(sum(info["reward_components"].values()), reward, abs_tol=1e-9)


@pytest.mark.parametrize(("env_id", "stack"), CASES)
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples on every run: a bounded suite, not a lottery
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**31 - 1), actions=st.lists(ACTIONS, min_size=1, max_size=4))
def test_hostile_text_never_breaks_a_stack(env_id, stack, seed, actions):
    env = cached(env_id, stack)
    limits = reward_range(env)
    obs, info = env.reset(seed=seed)
    assert env.observation_space.contains(obs) and isinstance(info, dict)
    for action in actions:
        result = env.step(action)
        check_step(env, result, limits)
        if result[2] or result[3]:
            obs, _ = env.reset(seed=seed + 1)
            assert env.observation_space.contains(obs)


# ---------------------------------------------------------------- linear time

SOUP = "".join(TAGS + SPECIAL_TOKENS) + '<tool_call>{"name": "x", "arguments": {"a": [[[' + "9" * 40


def soup(length: int) -> str:
    return (SOUP * (length // len(SOUP) + 1))[:length]


def best_step_time(env: gym.Env, action: str, repeats: int = 3) -> tuple[float, tuple]:
    """Fastest of ``repeats`` steps of ``action``, each from a fresh reset (2 shared cores)."""
    best, result = math.inf, None
    for _ in range(repeats):
        env.reset(seed=0)
        start = time.perf_counter()
        result = env.step(action)
        best = min(best, time.perf_counter() - start)
    return best, result


@pytest.mark.parametrize(("env_id", "stack"), CASES)
def test_a_million_characters_step_in_linear_time(env_id, stack):
    env = cached(env_id, stack)
    limits = reward_range(env)
    limit = env.unwrapped.action_space.max_length
    small, _ = best_step_time(env, soup(100_000))
    large, result = best_step_time(env, soup(1_000_000))
    assert large < 0.5, f"a 1M-character action took {large:.3f} s"
    assert large <= 10 * 3 * small + 0.05, (small, large)  # linear: ~10x, slack for noise
    assert result[4]["invalid_action"] and result[4]["invalid_reason"] == TOO_LONG
    check_step(env, result, limits)
    at_limit, result = best_step_time(env, soup(limit), repeats=1)  # read and parsed in full
    assert at_limit < 1.0, f"an action at the {limit:,}-character limit took {at_limit:.3f} s"
    check_step(env, result, limits)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_chat_messages_observation_stays_in_its_space_after_an_over_long_action(env_id):
    env = cached(env_id, "chat_messages")
    env.reset(seed=0)
    obs, *_, info = env.step("x" * 1_000_000)  # over every env's action and observation limit
    assert info["invalid_reason"] == TOO_LONG
    assert env.observation_space.contains(obs)
    assert obs[-2]["content"] == "x" * env.unwrapped.action_space.max_length
