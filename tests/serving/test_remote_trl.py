"""TRL's ``GRPOTrainer`` trains against a served env through OpenEnv's client: a real GRPO step
of the tiny model whose multi-turn TicTacToe-v0 episodes are played on a ``textgym serve``
server (``RemoteTextEnv`` over OpenEnv's ``EnvClient``), and every episode pays what the local
env pays for the same seed and actions."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL
pytest.importorskip("openenv")
pytest.importorskip("torch")
pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

from textgym.builder import EnvRecipe  # noqa: E402
from textgym.integrations.trl import (  # noqa: E402
    EPISODE_KEY,
    grpo_dataset,
    reward_funcs,
    rollout_func,
)
from textgym.serving.client import RemoteTextEnv  # noqa: E402
from textgym.serving.openenv_server import ServeSettings  # noqa: E402

from ._server import served  # noqa: E402

pytestmark = pytest.mark.llm

ENV = "textgym/TicTacToe-v0"
WRAPPERS = ("format_reward", "invalid_action_penalty")
SETTINGS = ServeSettings(max_sessions=32, idle_timeout=60.0, step_timeout=10.0)


def test_trl_grpo_trainer_plays_served_episodes_that_pay_as_local_ones(tmp_path):
    from textgym.models import load_model

    make_local = EnvRecipe(ENV, {}, WRAPPERS).make
    model, tokenizer = load_model("tiny")
    with served(make_local, ENV, SETTINGS) as url:

        def make_remote():
            return RemoteTextEnv(url)

        dataset = grpo_dataset(make_remote, seeds=[0, 1])
        local_dataset = grpo_dataset(make_local, seeds=[0, 1])
        assert dataset["prompt"] == local_dataset["prompt"]  # same seed, same first turn
        funcs = reward_funcs(make_remote)
        names = [f.__name__ for f in funcs]
        assert names == ["outcome", "format", "invalid_action"]
        play = rollout_func(make_remote, max_new_tokens=6)
        outputs: list[dict] = []

        def recording_rollout(prompts, trainer):
            outputs.append({"prompts": prompts, **play(prompts, trainer)})
            return {k: v for k, v in outputs[-1].items() if k != "prompts"}

        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=trl.GRPOConfig(
                output_dir=str(tmp_path),
                max_steps=1,
                seed=0,
                per_device_train_batch_size=4,
                num_generations=2,
                max_completion_length=6,
                learning_rate=1e-5,
                beta=0.0,
                use_cpu=True,
                bf16=False,
                shuffle_dataset=False,
                logging_steps=1,
                save_strategy="no",
                report_to=[],
                dataloader_num_workers=0,
            ),
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=recording_rollout,
        )
        trainer.train()

    (out,) = outputs
    actions = out["textgym_actions"]
    assert max(len(a) for a in actions) > 1  # multi-turn: the server answered, the model replied
    # Replay every episode locally: its reset arguments from the prompt, its actions from TRL.
    env = make_local()
    logged = [log for log in trainer.state.log_history if "reward" in log][0]
    totals = dict.fromkeys(names, 0.0)
    seeds = []
    for prompt, episode, paid in zip(out["prompts"], actions, out["textgym_returns"]):
        reset = json.loads(prompt[-1][EPISODE_KEY])
        seed, options = reset["seed"], reset["options"]
        seeds.append(seed)
        env.reset(seed=seed, options=options or None)
        local: dict[str, float] = dict.fromkeys(names, 0.0)
        for action in episode:
            _, _, terminated, truncated, info = env.step(action)
            for name, value in info["reward_components"].items():
                local[name] += value
        assert terminated or truncated
        assert local == pytest.approx(paid)  # the server paid what the local env pays
        for name in names:
            totals[name] += local[name]
    assert sorted(seeds) == [0, 0, 1, 1]
    for name in names:
        assert logged[f"rewards/{name}/mean"] == pytest.approx(totals[name] / 4, abs=1e-6)
