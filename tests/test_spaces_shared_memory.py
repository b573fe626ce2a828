"""UnicodeText in Gymnasium's shared memory: any Unicode string round-trips, and async vector
envs play real text."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401  (registers the ids)
from textgym.envs.gsm8k.env import load_problems
from textgym.spaces import SharedTexts, UnicodeText

GSM8K_TEST = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"

SPACE = UnicodeText(12)
TEXTS = ["", "plain", "it’s 5 €", "ходи 4 ✓", "🙂" * 12, "a\x00b\n\t", "\ud800 lone"]


def round_trip(texts: list[str], space: UnicodeText = SPACE) -> tuple[str, ...]:
    memory = create_shared_memory(space, n=len(texts))
    view = read_from_shared_memory(space, memory, n=len(texts))
    for i, text in enumerate(texts):
        write_to_shared_memory(space, i, text, memory)
    return copy.deepcopy(view)


def test_any_unicode_round_trips_through_shared_memory():
    assert round_trip(TEXTS) == tuple(TEXTS)


@given(st.lists(st.text(max_size=12), min_size=1, max_size=4))
def test_any_str_of_the_space_round_trips(texts):
    assert round_trip(texts) == tuple(texts)


def test_the_read_is_a_live_view_and_copies_are_tuples():
    memory = create_shared_memory(SPACE, n=2)
    view = read_from_shared_memory(SPACE, memory, n=2)
    assert isinstance(view, SharedTexts) and view == ("", "")
    write_to_shared_memory(SPACE, 1, "später", memory)
    assert view[1] == "später" and list(view) == ["", "später"]
    snapshot = copy.deepcopy(view)
    write_to_shared_memory(SPACE, 1, "short", memory)  # a shorter text leaves no tail behind
    assert snapshot == ("", "später") and type(snapshot) is tuple
    assert view[1] == "short" and copy.copy(view) == ("", "short")


def test_an_observation_outside_the_space_is_refused_not_cut():
    memory = create_shared_memory(SPACE, n=1)
    with pytest.raises(ValueError, match="at most 12 characters"):
        write_to_shared_memory(SPACE, 0, "x" * 13, memory)


def test_async_vector_env_plays_unicode_observations():
    texts = ["Zoë’s café — 3 × 4?", "Сколько будет 2 + 2?", "🙂 then #### 5"]
    vec = gym.make_vec(
        "textgym/ReverseText-v0", num_envs=2, vectorization_mode="async", texts=texts
    )
    try:
        obs, _ = vec.reset(seed=0, options={"task_index": 0})
        assert type(obs) is tuple and obs == (obs[0], obs[0]) and obs[0].endswith(texts[0])
        obs, rewards, terminated, *_ = vec.step(("<reversed_text>?4 × 3 —</reversed_text>",) * 2)
        assert all(terminated) and np.all(rewards > 0)
    finally:
        vec.close()


@pytest.mark.skipif(
    not GSM8K_TEST.is_file(),
    reason=f"the real GSM8K test split is not at {GSM8K_TEST} (../shared/data beside the repo)",
)
def test_async_make_vec_completes_a_pass_over_the_real_gsm8k_test_split():
    problems = load_problems("test", data_path=str(GSM8K_TEST))
    assert len(problems) == 1319
    assert sum(any(ord(c) > 127 for c in p.question) for p in problems) > 0  # the case at stake
    num_envs = 4
    vec = gym.make_vec(
        "textgym/GSM8K-v0",
        num_envs=num_envs,
        vectorization_mode="async",
        data_path=str(GSM8K_TEST),
    )
    seen, started = [], time.perf_counter()
    try:
        for first in range(0, len(problems), num_envs):
            batch = [i % len(problems) for i in range(first, first + num_envs)]
            for slot, index in enumerate(batch):  # each env its own task: one reset per env
                mask = np.arange(num_envs) == slot
                obs, _ = vec.reset(options={"task_index": index, "reset_mask": mask})
            assert obs == tuple(problems[i].question for i in batch)
            seen += [o for o, i in zip(obs, batch) if i >= first]
            obs, rewards, terminated, truncated, info = vec.step(
                tuple(problems[i].solution for i in batch)
            )
            assert all(terminated) and not any(truncated)
            assert rewards.tolist() == pytest.approx([1.1] * num_envs)  # gold: correct + format
            assert all(o.startswith("Correct: the answer is ") for o in obs)
    finally:
        vec.close()
    seconds = time.perf_counter() - started
    assert seen == [p.question for p in problems]  # every question once, byte for byte
    assert seconds < 120, f"the pass took {seconds:.1f} s"
