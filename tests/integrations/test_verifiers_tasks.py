"""verifiers adapter: the tasks a taskset gives (no agent is run, so no ``uv`` is needed)."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("verifiers.v1", reason="needs the verifiers extra (verifiers>=0.4)")

from textgym.integrations import verifiers as tv  # noqa: E402


def _prompt(env_kwargs: dict, seed: int):
    config = tv.TextgymTasksetConfig(
        env="textgym/TicTacToe-v0", env_kwargs=env_kwargs, seeds=[seed]
    )
    (task,) = list(tv.TextgymTaskset(config).load())
    return task.data.prompt


def test_a_task_is_its_first_observation():
    obs, _ = gym.make("textgym/TicTacToe-v0").reset(seed=4)
    assert _prompt({}, 4) == obs


def test_a_game_started_part_way_through_is_its_conversation_so_far():
    kwargs = {"prompt_style": "compact", "start_boards": [[4, 0, 8]]}
    obs, info = gym.make("textgym/TicTacToe-v0", **kwargs).reset(seed=4)
    prompt = _prompt(kwargs, 4)
    assert [(m.role, m.content) for m in prompt] == [
        *((m["role"], m["content"]) for m in info["history"]),
        ("user", obs),
    ]
    assert prompt[1].content == "<move>0</move>"
