"""Expert-guided groups: the env's expert in a GRPO group whose sampled returns all tie."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos.expert_guidance import ExpertGuide, replay_tokens  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.errors import SetupError  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import Trajectory, rollout  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

from .._runs import register_distinct_characters  # noqa: E402

pytestmark = pytest.mark.llm

COMPACT = {"prompt_style": "compact", "opponent": "random"}


def _config(tmp_path, **overrides) -> GRPOConfig:
    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs=COMPACT,
        steps=1,
        groups_per_step=2,
        group_size=4,
        rollout_batch_size=8,
        micro_batch_size=8,
        max_new_tokens=8,
        eval_every=0,
        eval_episodes=2,
        device="cpu",
        tensorboard=False,
        expert_guidance=1,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


@pytest.fixture(scope="module")
def tiny_policy() -> HFPolicy:
    model, tokenizer = build_tiny_model(seed=0)
    return HFPolicy(model, tokenizer, max_new_tokens=8, temperature=1.0, seed=0)


def _expert_episode(seed: int = 3) -> Trajectory:
    make = lambda: gym.make("textgym/TicTacToe-v0", **COMPACT)  # noqa: E731
    guide = ExpertGuide.for_env(make, COMPACT, per_group=1, seed=0, batch_size=1)
    (episode,) = rollout(make, guide.expert, [seed], token_level=False)
    return episode


def test_replayed_tokens_are_the_template_around_the_expert_actions(tiny_policy):
    episode = _expert_episode()
    assert episode.num_steps >= 3 and not episode.token_ids
    replayed = replay_tokens(tiny_policy, episode)
    ids, mask = replayed.token_ids, replayed.loss_mask
    assert len(ids) == len(mask) == len(replayed.token_logprobs)
    # The unmasked start is the rollout's own prompt of the episode's first messages.
    start = tiny_policy.prompt_ids(episode.messages[: -2 * episode.num_steps], {})
    assert ids[: len(start)] == start and not any(mask[: len(start)])
    # Each run of masked ids is one action, tokenized as an SFT target, in order.
    runs, current = [], []
    for token, m in zip(ids, mask):
        if m:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    runs += [current] if current else []
    actions = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    assert runs == [tiny_policy.chat_tokenizer.assistant_ids(a) for a in actions]
    assert all(lp == 0.0 for lp in replayed.token_logprobs)
    # The text fields are the episode's, unchanged; the input is not modified.
    assert replayed.messages == episode.messages and replayed.rewards == episode.rewards
    assert episode.token_ids == []


def test_replay_refuses_what_is_not_a_rollout(tiny_policy):
    episode = _expert_episode()
    broken = Trajectory(env_id=None, seed=0, task_id=None, messages=episode.messages[:1])
    broken.rewards = [0.0]
    with pytest.raises(ValueError, match="Expected a rollout's trajectory"):
        replay_tokens(tiny_policy, broken)


def test_guide_replaces_only_flat_groups_the_expert_beats(tiny_policy):
    make = lambda: gym.make("textgym/TicTacToe-v0", **COMPACT)  # noqa: E731
    guide = ExpertGuide.for_env(make, COMPACT, per_group=2, seed=0, batch_size=4)
    group = 4

    def sampled(seed: int, ret: float) -> Trajectory:
        t = Trajectory(env_id="textgym/TicTacToe-v0", seed=seed, task_id=None)
        t.rewards = [ret]
        return t

    # Group 0 is flat at -1 (the expert beats it), group 1 is informative, group 2 is flat at
    # +1 (a win: the expert cannot do better).
    batch = [sampled(5, -1.0)] * 4 + [sampled(6, 0.0), sampled(6, 1.0)] * 2 + [sampled(7, 1.0)] * 4
    tasks = [(t.seed, None) for t in batch]
    guided, metrics = guide.guide(batch, tasks, group, tiny_policy)
    assert metrics == {"sampled_flat_fraction": 2 / 3, "guided_fraction": 1 / 3}
    assert guided[:2] == batch[:2] and guided[4:] == batch[4:]
    for expert in guided[2:4]:
        assert expert.seed == 5 and expert.episode_return > -1.0
        assert sum(expert.loss_mask) > 0 and expert.finish_reasons[0] is None
    assert batch[2].token_ids == []  # the input list is unchanged


@pytest.mark.slow
def test_a_run_learns_from_groups_that_were_flat(tmp_path):
    from textgym.algos import grpo

    grpo.train(_config(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    (train,) = [r for r in rows if r["stage"] == "train"]
    # The untrained tiny model never plays a legal move: every sampled group is flat, and the
    # expert (minimax against a random opponent) beats each, so every group informs the update.
    assert train["sampled_flat_fraction"] == 1.0 and train["guided_fraction"] == 1.0
    assert train["zero_variance_fraction"] == 0.0 and train["skipped_update"] == 0.0
    # The rollout metrics describe the policy's own episodes, not the expert's.
    assert train["invalid_rate"] > 0.5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"expert_guidance": 4}, "expert_guidance: expected at most group_size - 1 \\(3\\)"),
        ({"expert_guidance": -1}, "expert_guidance: expected >= 0"),
        ({"dynamic_sampling_rounds": 2}, "expert_guidance: choose one remedy"),
        ({"rollout_dtype": "bfloat16"}, "expert_guidance: needs rollout_engine hf"),
        ({"env_url": ("http://127.0.0.1:1",), "opponent_random_move_prob": None}, "drop env_url"),
    ],
)
def test_config_refuses_guidance_it_cannot_give(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **overrides)


def test_an_env_without_an_expert_is_refused_before_the_model_loads(tmp_path):
    from textgym.algos import grpo

    env_id = register_distinct_characters()  # no expert, no gold answers
    config = _config(tmp_path, env_id=env_id, env_kwargs={}, model="no/such-model")
    with pytest.raises(SetupError, match="names no expert policy"):
        grpo.train(config)


def test_a_game_part_way_through_is_prompt_in_sampled_and_replayed_episodes(tiny_policy):
    settings = {**COMPACT, "start_boards": [[4, 0, 8]]}
    make = lambda: gym.make("textgym/TicTacToe-v0", **settings)  # noqa: E731
    obs, info = make().reset(seed=3)
    start = tiny_policy.prompt_ids(
        [
            {"role": "system", "content": info["system_prompt"]},
            *info["history"],
            {"role": "user", "content": obs},
        ],
        info,
    )
    (sampled,) = rollout(make, tiny_policy, [3])
    guide = ExpertGuide.for_env(make, settings, per_group=1, seed=0, batch_size=1)
    (expert,) = rollout(make, guide.expert, [3], token_level=False)
    for episode in (sampled, replay_tokens(tiny_policy, expert)):
        # The history (O's earlier move included) is prompt: never a trained token.
        assert episode.token_ids[: len(start)] == start and not any(episode.loss_mask[: len(start)])
        assert episode.messages[2] == {"role": "assistant", "content": "<move>0</move>"}
        assert sum(episode.loss_mask) > 0
