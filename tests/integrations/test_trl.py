"""TRL adapters: real ``GRPOTrainer`` steps on the tiny model, rewards checked against the env."""

from __future__ import annotations

import difflib
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

import gymnasium as gym

from textgym.integrations.trl import (
    EPISODE_KEY,
    grpo_dataset,
    reward_components,
    reward_funcs,
    rollout_func,
)
from textgym.wrappers import FormatReward, InvalidActionPenalty

pytestmark = pytest.mark.llm


class DenseSimilarity(gym.Wrapper):
    """Adds the component ``dense``: similarity of the whole completion to the gold completion.

    The untrained tiny model never writes the answer tags, so every ReverseText component is 0;
    this one differs between random completions, so the test compares numbers that vary.
    """

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._gold = info["gold_completion"]
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        dense = difflib.SequenceMatcher(None, action, self._gold).ratio()
        components = {**info["reward_components"], "dense": dense}
        return (
            obs,
            float(reward) + dense,
            terminated,
            truncated,
            {**info, "reward_components": components},
        )


def make_reverse_text():
    return DenseSimilarity(gym.make("textgym/ReverseText-v0", max_chars=100))


def make_tictactoe():
    return InvalidActionPenalty(FormatReward(gym.make("textgym/TicTacToe-v0")))


def _config(tmp_path, *, batch: int, group: int, max_completion_length: int):
    return trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        seed=0,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=group,
        max_completion_length=max_completion_length,
        temperature=1.0,
        learning_rate=1e-5,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )


def _logged(trainer) -> dict:
    logs = [log for log in trainer.state.log_history if "reward" in log]
    assert len(logs) == 1
    return logs[0]


def _spy(funcs, calls):
    """Wrap TRL reward functions to record what TRL passed and what they returned."""

    def wrap(fn):
        def spy(prompts, completions, **kwargs):
            values = fn(prompts, completions, **kwargs)
            calls.append({"name": fn.__name__, "completions": completions, **kwargs})
            calls[-1]["values"] = values
            return values

        spy.__name__ = fn.__name__
        return spy

    return [wrap(fn) for fn in funcs]


def test_the_dataset_holds_the_first_turn_and_the_columns_that_rebuild_the_episode():
    dataset = grpo_dataset("textgym/GSM8K-v0", seeds=[3, 4])
    env = gym.make("textgym/GSM8K-v0")
    obs, info = env.reset(seed=4)
    row = dataset[1]
    assert row["prompt"][0] == {
        "role": "system",
        "content": info["system_prompt"],
        EPISODE_KEY: None,
    }
    assert row["prompt"][1]["content"] == obs
    assert json.loads(row["prompt"][1][EPISODE_KEY]) == {"seed": 4, "options": {}}
    assert (row["seed"], row["options"], row["task_id"]) == (4, "{}", info["task_id"])


def test_reward_functions_pay_the_gold_completion_what_the_env_pays():
    dataset = grpo_dataset("textgym/GSM8K-v0", seeds=[0, 1])
    funcs = reward_funcs("textgym/GSM8K-v0")
    assert [f.__name__ for f in funcs] == reward_components("textgym/GSM8K-v0")
    env = gym.make("textgym/GSM8K-v0")
    golds, expected, rewards = [], [], []
    for seed in (0, 1):
        _, info = env.reset(seed=seed)
        golds.append([{"role": "assistant", "content": info["gold_completion"]}])
        _, reward, _, _, step_info = env.step(info["gold_completion"])
        expected.append(step_info["reward_components"])
        rewards.append(reward)
    columns = {"seed": dataset["seed"], "options": dataset["options"]}
    values = {fn.__name__: fn(dataset["prompt"], golds, **columns) for fn in funcs}
    for name, paid in values.items():
        assert paid == [e[name] for e in expected]
    assert values["correct"] == [1.0, 1.0]  # the gold answer earns full reward
    assert [sum(v[i] for v in values.values()) for i in (0, 1)] == pytest.approx(rewards)


def test_a_multi_turn_env_without_a_rollout_is_an_error_not_a_zero_reward():
    dataset = grpo_dataset("textgym/TicTacToe-v0", seeds=[0])
    (outcome,) = reward_funcs("textgym/TicTacToe-v0")
    completion = [[{"role": "assistant", "content": "<move>4</move>"}]]
    with pytest.raises(ValueError, match="did not end after one step"):
        outcome(dataset["prompt"], completion, seed=dataset["seed"], options=dataset["options"])


def test_grpo_trainer_logs_each_component_as_the_env_pays_it(tmp_path):
    from textgym.models import load_model

    model, tokenizer = load_model("tiny")
    dataset = grpo_dataset(make_reverse_text, seeds=[0, 1])
    funcs = reward_funcs(make_reverse_text)
    names = [f.__name__ for f in funcs]
    assert names == ["lcs", "format", "dense"]
    calls: list[dict] = []
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=_spy(funcs, calls),
        args=_config(tmp_path, batch=4, group=2, max_completion_length=12),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()

    logged = _logged(trainer)
    env = make_reverse_text()
    paid = {name: [] for name in names}
    call = calls[0]
    for completion, seed in zip(call["completions"], call["seed"]):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(completion[0]["content"])
        assert terminated
        for name in names:
            paid[name].append(info["reward_components"][name])
    assert sorted(call["seed"]) == [0, 0, 1, 1]
    assert len({round(v, 6) for v in paid["dense"]}) > 1  # the numbers compared do vary
    for name in names:
        assert logged[f"rewards/{name}/mean"] == pytest.approx(sum(paid[name]) / 4, abs=1e-6)
    total = [sum(paid[n][i] for n in names) for i in range(4)]
    assert logged["reward"] == pytest.approx(sum(total) / 4, abs=1e-6)


def test_grpo_trainer_plays_multi_turn_episodes_through_rollout_func(tmp_path):
    from textgym.models import load_model

    model, tokenizer = load_model("tiny")
    dataset = grpo_dataset(make_tictactoe, seeds=[0, 1])
    funcs = reward_funcs(make_tictactoe)
    names = [f.__name__ for f in funcs]
    assert names == ["outcome", "format", "invalid_action"]
    rollout = rollout_func(make_tictactoe, max_new_tokens=6)
    outputs = []

    def recording_rollout(prompts, trainer):
        outputs.append(rollout(prompts, trainer))
        return outputs[-1]

    calls: list[dict] = []
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=_spy(funcs, calls),
        args=_config(tmp_path, batch=4, group=2, max_completion_length=6),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recording_rollout,
    )
    trainer.train()

    (out,) = outputs
    actions = out["textgym_actions"]
    assert max(len(a) for a in actions) > 1  # multi-turn: the env answered and the model replied
    for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"]):
        assert len(ids) == len(mask) == len(logprobs)
        assert 0 in mask and mask[0] == 1 and mask[-1] == 1  # env ids between model turns
    # Replay every episode on a fresh env with the same seed and the actions the model took.
    seeds = calls[0]["seed"]
    paid = {name: [] for name in names}
    env = make_tictactoe()
    for seed, episode in zip(seeds, actions):
        env.reset(seed=seed)
        totals = dict.fromkeys(names, 0.0)
        done = False
        for action in episode:
            assert not done
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            for name, value in info["reward_components"].items():
                totals[name] += value
        assert done
        for name in names:
            paid[name].append(totals[name])
    assert any(paid["invalid_action"])  # the untrained model's invalid moves cost it
    logged = _logged(trainer)
    for name in names:
        assert logged[f"rewards/{name}/mean"] == pytest.approx(sum(paid[name]) / 4, abs=1e-6)
