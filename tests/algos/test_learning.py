"""End to end on CPU: the tiny model from scratch, SFT on minimax games, then GRPO.

The whole pipeline of the README (collect -> sft -> train) with fixed seeds and small sizes, so
it fits the CI budget (about a minute on two cores). Margins, measured against the untrained
model under the same evaluation (64 games against the random opponent, sampling at T = 1):

* win rate rises by at least 0.10 (untrained: 0.0; this pipeline reached about 0.27 in
  development runs);
* invalid-action rate falls by at least 0.25 (untrained: 1.0, it never writes a move tag;
  after the pipeline about 0.55).

What the tiny model (98,816 parameters, byte-level) does *not* learn in this budget is to read
the board: its move digits stay close to uniform over 0-8, which is why invalid moves stay near
one half. The headline run with Gemma 3 270M on a GPU is what the README's table reports.
"""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos import grpo, sft  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.grpo_rollouts import evaluate  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402
from textgym.collect import sft_record  # noqa: E402
from textgym.envs.tictactoe import MinimaxPolicy  # noqa: E402
from textgym.models import load_model  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402

pytestmark = [pytest.mark.llm, pytest.mark.slow]

ENV_KWARGS = {"prompt_style": "compact"}
STOP = ["</move>"]


def vs_random(model_dir: str, episodes: int = 64) -> dict[str, float]:
    model, tokenizer = load_model(model_dir)
    policy = HFPolicy(
        model, tokenizer, max_new_tokens=16, temperature=1.0, stop=STOP, batch_size=64, seed=123
    )
    make = lambda: gym.make("textgym/TicTacToe-v0", **ENV_KWARGS)  # noqa: E731
    metrics = evaluate(make, policy, episodes=episodes, seed=7, batch_size=64)
    return {"win": metrics["random/win_rate"], "invalid": metrics["random/invalid_rate"]}


def test_sft_then_grpo_teaches_the_tiny_model_to_play(tmp_path):
    torch.manual_seed(0)
    before = vs_random("tiny")

    make = lambda: gym.make("textgym/TicTacToe-v0", random_move_prob=0.5, **ENV_KWARGS)  # noqa: E731
    games = rollout(make, MinimaxPolicy(seed=0, reasoning=False), list(range(300)), batch_size=64)
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps(sft_record(g)) + "\n" for g in games))
    sft.train(
        SFTConfig(
            data=str(data),
            model="tiny",
            output_dir=str(tmp_path / "sft"),
            epochs=4,
            batch_size=16,
            micro_batch_size=16,
            learning_rate=3e-3,
            warmup_steps=5,
            device="cpu",
            tensorboard=False,
        )
    )
    grpo.train(
        GRPOConfig(
            model=str(tmp_path / "sft"),
            output_dir=str(tmp_path / "grpo"),
            env_id="textgym/TicTacToe-v0",
            env_kwargs=ENV_KWARGS,
            opponent_random_move_prob=(0.5, 1.0),
            steps=8,
            groups_per_step=4,
            group_size=8,
            max_new_tokens=16,
            learning_rate=5e-4,
            eval_every=0,
            eval_episodes=8,
            eval_temperature=1.0,
            device="cpu",
            tensorboard=False,
        )
    )
    after = vs_random(str(tmp_path / "grpo" / "checkpoint-8"))

    assert before["win"] == 0.0 and before["invalid"] >= 0.95, before
    assert after["win"] >= before["win"] + 0.10, (before, after)
    assert after["invalid"] <= before["invalid"] - 0.25, (before, after)
