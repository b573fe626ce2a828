"""``training_env``: what GRPO reads from one probe of its env (stop strings, step limit,
evaluation settings, whether the opponent is stratified)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import gymnasium  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.grpo_rollouts import training_env  # noqa: E402


def test_one_probe_gives_tictactoe_its_stop_strings_limit_and_settings(monkeypatch):
    built = []
    real = gymnasium.make
    monkeypatch.setattr(gymnasium, "make", lambda *a, **k: built.append(a) or real(*a, **k))
    env = training_env(
        GRPOConfig(
            model="tiny", env_id="textgym/TicTacToe-v0", opponent_random_move_prob=(0.0, 1.0)
        )
    )
    assert len(built) == 1  # the probe; the trainer's envs come later, from env.make
    assert env.stop == ("</move>",) and env.max_turns == 10 and env.stratified
    assert set(env.evaluation_settings) == {"random", "optimal"}
    first = env.make()
    assert type(first).__name__ == "InvalidActionPenalty"  # the configured reward wrapper
    assert first.env.__class__.__name__ == "StratifiedOpponent"  # then the opponent range


def test_an_env_without_an_opponent_refuses_the_range():
    env = training_env(GRPOConfig(model="tiny", env_id="textgym/GSM8K-v0"))
    assert not env.stratified and env.max_turns == 1 and env.evaluation_settings == {}
    config = GRPOConfig(model="tiny", env_id="textgym/GSM8K-v0", opponent_random_move_prob=(0, 1))
    with pytest.raises(ValueError, match="has no seeded opponent to stratify"):
        training_env(config)
