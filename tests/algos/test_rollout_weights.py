"""The bfloat16 rollout copy: equal to the learner up to rounding after every update, merged with
LoRA, and a GRPO run that samples it takes its ratio against the sampler's log-probs."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos import grpo  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.grpo_update import update  # noqa: E402
from textgym.algos.learner import Learner  # noqa: E402
from textgym.algos.rollout_weights import BF16Snapshot, SnapshotPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm


def _step(model) -> None:
    """One AdamW step on a simple loss (changes every trainable parameter in place)."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()


def test_snapshot_follows_full_fine_tuning():
    model, _ = build_tiny_model(seed=0)
    snapshot = BF16Snapshot(model)
    assert all(p.dtype == torch.bfloat16 for p in snapshot.model.parameters())
    assert not snapshot.refresh(), "nothing changed yet"
    _step(model)
    assert snapshot.refresh()
    for source, copy in zip(model.parameters(), snapshot.model.parameters(), strict=True):
        torch.testing.assert_close(copy, source.detach().to(torch.bfloat16), atol=0, rtol=0)
    assert snapshot.refreshes == 1


def test_snapshot_merges_lora_and_follows_its_updates():
    peft = pytest.importorskip("peft")
    model, _ = build_tiny_model(seed=0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = peft.get_peft_model(model, config)
    snapshot = BF16Snapshot(model)
    _step(model)  # B starts at 0: after a step the adapter changes the weights
    assert snapshot.refresh()
    merged = dict(snapshot.model.named_parameters())
    checked = 0
    for name, module in model.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            expected = module.base_layer.weight + module.get_delta_weight("default")
            target = merged[name.removeprefix("base_model.model.") + ".weight"]
            assert float((expected - module.base_layer.weight).detach().abs().max()) > 0
            torch.testing.assert_close(target, expected.detach().to(torch.bfloat16))
            checked += 1
    assert checked == 2 * model.config.num_hidden_layers


def test_snapshot_policy_samples_the_current_weights():
    model, tokenizer = build_tiny_model(seed=0)
    snapshot = BF16Snapshot(model)
    policy = SnapshotPolicy(snapshot, None, tokenizer, max_new_tokens=4, temperature=0)
    policy.generate([[1, 2, 3]])
    _step(model)
    policy.generate([[1, 2, 3]])
    assert snapshot.refreshes == 1
    with pytest.raises(ValueError, match="model=None"):
        SnapshotPolicy(snapshot, model, tokenizer)


def test_an_update_on_bf16_rollouts_takes_the_ratio_against_the_sampler(tmp_path):
    """Trajectories sampled from the bfloat16 copy: the update's first optimizer step sees
    ratios other than 1 (learner / sampler log-probs) and reports their gap."""
    model, tokenizer = build_tiny_model(seed=0)
    snapshot = BF16Snapshot(model)
    policy = SnapshotPolicy(snapshot, None, tokenizer, max_new_tokens=8, seed=0, batch_size=8)
    make = lambda: gym.make("textgym/TicTacToe-v0", opponent="random", prompt_style="compact")  # noqa: E731
    trajectories = rollout(make, policy, [0] * 4 + [1] * 4, batch_size=8, token_level=True)
    for i, trajectory in enumerate(trajectories):
        trajectory.rewards[-1] = float(i % 4)  # every group carries signal
    settings = {
        "model": "tiny",
        "output_dir": str(tmp_path),
        "env_id": "textgym/TicTacToe-v0",
        "group_size": 4,
    }
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    learner = Learner(
        config=GRPOConfig(**settings, rollout_dtype="bfloat16", device="cpu"),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        max_loss_tokens=80,
    )
    metrics = update(learner, trajectories)
    assert metrics["skipped_update"] == 0.0
    assert 0 < metrics["sampler_logprob_gap"] < 0.5  # bfloat16 rounding: small, never zero
    assert metrics["ratio_mean"] != 1.0

    # The same batch with float32 rollouts: the ratio is 1 in value and no gap is measured.
    learner.config = GRPOConfig(**settings, rollout_dtype="float32", device="cpu")
    metrics = update(learner, trajectories)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert math.isnan(metrics["sampler_logprob_gap"])


def test_grpo_trains_on_bf16_rollouts(tmp_path):
    config = GRPOConfig(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        opponent_random_move_prob=(0.5, 1.0),
        steps=1,
        groups_per_step=2,
        group_size=2,
        rollout_batch_size=4,
        micro_batch_size=4,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=2,
        device="cpu",
        tensorboard=False,
        rollout_dtype="bfloat16",
    )
    grpo.train(config)
    assert (tmp_path / "run" / "checkpoint-1").is_dir()
