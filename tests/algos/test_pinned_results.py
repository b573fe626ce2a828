"""Pinned results: the same config and seed give the same trajectories and weights.

The numbers below were recorded on the trainer code *before* its refactor (learner object, one
update function, shared model preparation, loss table), so any refactor that changes what a run
samples or learns fails here. Each case runs a short tiny-model job and compares

* per-step metrics (rollout rewards, loss, gradient norm, clip fraction, ...; SFT loss), and
* a checksum of the final weights: the float64 sum of every parameter, and a sum weighted by
  ``cos(index)`` so that a permutation or a sign flip is caught too.

Tolerances are tight (relative 1e-5, absolute 1e-6): the CPU float32 runs are deterministic on
one machine, and the slack only covers summation order in other BLAS builds. The absolute part
is for figures that are differences of O(1) float32 numbers, such as ``sampler_logprob_gap``
(a few ulps of a log-probability: 6.7e-8 on a fresh 2-core AMD EPYC machine, 1.9e-7 pinned). To re-record after a change
that *should* move the numbers (say why in the commit), run
``TEXTGYM_RECORD_PINS=1 python -m pytest -q -s tests/algos/test_pinned_results.py`` and paste
the printed dictionaries.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from textgym.algos import grpo, sft  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402

pytestmark = pytest.mark.llm

RECORD = os.environ.get("TEXTGYM_RECORD_PINS") == "1"

GRPO_KEYS = (
    "reward_mean",
    "loss",
    "grad_norm",
    "clip_fraction",
    "ratio_mean",
    "kl",
    "entropy",
    "advantage_abs_mean",
    "zero_variance_fraction",
    "completion_tokens_mean",
    "invalid_rate",
    "sampler_logprob_gap",
    "skipped_update",
)

CONVERSATIONS = [
    [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": f"board {i}\nfree 0 1 2 3 4 5 6 7 8"},
        {"role": "assistant", "content": f"<move>{i % 9}</move>"},
        {"role": "user", "content": f"opp {(i + 3) % 9}"},
        {"role": "assistant", "content": f"<move>{(i + 5) % 9}</move>"},
    ]
    for i in range(8)
]


def checksum(tensors: dict[str, torch.Tensor]) -> tuple[float, float]:
    """``(sum, cos-weighted sum)`` over all tensors in name order, float64."""
    total, weighted = 0.0, 0.0
    for name in sorted(tensors):
        flat = tensors[name].detach().double().flatten()
        total += float(flat.sum())
        weighted += float((flat * torch.cos(torch.arange(flat.numel(), dtype=torch.float64))).sum())
    return total, weighted


def rows(path, stage: str) -> list[dict]:
    lines = path.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["stage"] == stage]


def pick(row: dict, keys) -> dict[str, float | None]:
    return {k: row.get(k) for k in keys}


def check(name: str, got: dict, expected: dict) -> None:
    if RECORD:
        print(f"\n{name} = {got!r}")
        return
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert _close(got[key], value), f"{name}[{key!r}]: got {got[key]!r}, pinned {value!r}"


def _close(got, expected) -> bool:
    if isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(_close(a, b) for a, b in zip(got, expected))
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_close(got[k], expected[k]) for k in got)
    if expected is None or got is None:
        return got is expected or (isinstance(got, float) and math.isnan(got) and expected is None)
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(got, float) and math.isnan(got)
    return math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-6)


def grpo_config(tmp_path, **overrides) -> GRPOConfig:
    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        opponent_random_move_prob=(0.5, 1.0),
        steps=2,
        groups_per_step=2,
        group_size=4,
        rollout_batch_size=8,
        micro_batch_size=3,
        max_new_tokens=8,
        learning_rate=1e-3,
        eval_every=0,
        eval_episodes=2,
        device="cpu",
        tensorboard=False,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


PINNED_GRPO_DISTINCT = {
    "train": [
        {
            "reward_mean": 0.59375,
            "loss": 3.725290298461914e-09,
            "grad_norm": 1.7275197505950928,
            "clip_fraction": 0.0,
            "ratio_mean": 1.0,
            "kl": 0.0,
            "entropy": 5.539183855056763,
            "advantage_abs_mean": 0.9209955930709839,
            "zero_variance_fraction": 0.0,
            "completion_tokens_mean": 8.0,
            "invalid_rate": 0.0,
            "sampler_logprob_gap": 6.705522537231445e-08,
            "skipped_update": 0.0,
        },
        {
            "reward_mean": 0.609375,
            "loss": 0.00022285804152488708,
            "grad_norm": 1.570959448814392,
            "clip_fraction": 0.0,
            "ratio_mean": 1.0,
            "kl": 0.0055721674580127,
            "entropy": 5.540536403656006,
            "advantage_abs_mean": 0.85981285572052,
            "zero_variance_fraction": 0.0,
            "completion_tokens_mean": 8.0,
            "invalid_rate": 0.0,
            "sampler_logprob_gap": 1.862645149230957e-07,
            "skipped_update": 0.0,
        },
    ],
    "eval": {"eval/return_mean": 0.125, "eval/invalid_rate": 0.0},
    "weights": (308.86687148154124, 4.152636350349943),
}
PINNED_GRPO_LORA = {
    "train": [
        {
            "reward_mean": 0.59375,
            "loss": 3.725290298461914e-09,
            "grad_norm": 0.5462641716003418,
            "clip_fraction": 0.0,
            "ratio_mean": 1.0,
            "kl": 0.0,
            "entropy": 5.539183855056763,
            "advantage_abs_mean": 0.9209955930709839,
            "zero_variance_fraction": 0.0,
            "completion_tokens_mean": 8.0,
            "invalid_rate": 0.0,
            "sampler_logprob_gap": None,
            "skipped_update": 0.0,
        },
        {
            "reward_mean": 0.609375,
            "loss": 3.475695848464966e-06,
            "grad_norm": 0.49349790811538696,
            "clip_fraction": 0.0,
            "ratio_mean": 1.0,
            "kl": 8.684183558216318e-05,
            "entropy": 5.5395121574401855,
            "advantage_abs_mean": 0.85981285572052,
            "zero_variance_fraction": 0.0,
            "completion_tokens_mean": 8.0,
            "invalid_rate": 0.0,
            "sampler_logprob_gap": None,
            "skipped_update": 0.0,
        },
    ],
    "eval": {"eval/return_mean": 0.125, "eval/invalid_rate": 0.0},
    "weights": (5.634714447485749, 0.9065067174535224),
}
PINNED_GRPO_TICTACTOE = {
    "train": [
        {
            "reward_mean": -0.09999999999999999,
            "loss": None,
            "grad_norm": None,
            "clip_fraction": None,
            "ratio_mean": None,
            "kl": None,
            "entropy": None,
            "advantage_abs_mean": 0.0,
            "zero_variance_fraction": 1.0,
            "completion_tokens_mean": 78.0,
            "invalid_rate": 1.0,
            "sampler_logprob_gap": None,
            "skipped_update": 1.0,
        },
        {
            "reward_mean": -0.09999999999999999,
            "loss": None,
            "grad_norm": None,
            "clip_fraction": None,
            "ratio_mean": None,
            "kl": None,
            "entropy": None,
            "advantage_abs_mean": 0.0,
            "zero_variance_fraction": 1.0,
            "completion_tokens_mean": 78.875,
            "invalid_rate": 1.0,
            "sampler_logprob_gap": None,
            "skipped_update": 1.0,
        },
    ],
    "eval": {
        "random/return_mean": -0.1,
        "random/invalid_rate": 1.0,
        "random/win_rate": 0.0,
        "random/draw_rate": 0.0,
        "random/loss_rate": 0.0,
        "optimal/return_mean": -0.1,
        "optimal/invalid_rate": 1.0,
        "optimal/win_rate": 0.0,
        "optimal/draw_rate": 0.0,
        "optimal/loss_rate": 0.0,
    },
    "weights": (310.8423673581066, 4.041710526035874),
}
PINNED_SFT = {
    "steps": 2,
    "loss": [5.633961796760559, 5.082415461540222],
    "tokens": [120.0, 120.0],
    "weights": (323.0062261971543, 4.071447719906514),
}
PINNED_SFT_LORA = {
    "steps": 2,
    "loss": [5.633961796760559, 5.508478045463562],
    "tokens": [120.0, 120.0],
    "weights": (5.42894758481998, 1.0979863788715072),
}


def run_grpo(config) -> dict:
    final_eval = grpo.train(config)
    out = Path(config.output_dir)
    weights = "adapter_model" if config.lora_rank else "model"
    return {
        "train": [pick(r, GRPO_KEYS) for r in rows(out / "metrics.jsonl", "train")],
        "eval": final_eval,
        "weights": checksum(load_file(str(out / "checkpoint-2" / f"{weights}.safetensors"))),
    }


def test_grpo_with_kl_and_batch_reuse_is_unchanged(tmp_path, distinct_characters_env):
    """Rewards differ within groups, so both steps update; a KL term to the reference model,
    two optimizer steps per batch (stored old log-probs), micro-batches of 3 (accumulation)
    and a warm-up schedule are all on the path."""
    config = grpo_config(
        tmp_path,
        env_id=distinct_characters_env,
        opponent_random_move_prob=None,
        wrappers=(),
        beta=0.04,
        num_iterations=2,
        warmup_steps=3,
    )
    check("PINNED_GRPO_DISTINCT", run_grpo(config), PINNED_GRPO_DISTINCT)


def test_grpo_lora_with_kl_is_unchanged(tmp_path, distinct_characters_env):
    """LoRA: the reference policy is the base model with the adapter disabled."""
    config = grpo_config(
        tmp_path,
        env_id=distinct_characters_env,
        opponent_random_move_prob=None,
        wrappers=(),
        beta=0.04,
        lora_rank=4,
    )
    check("PINNED_GRPO_LORA", run_grpo(config), PINNED_GRPO_LORA)


def test_grpo_tictactoe_with_opponent_range_is_unchanged(tmp_path):
    """TicTacToe with the opponent's random-move probability drawn from a range per group."""
    config = grpo_config(tmp_path, env_kwargs={"prompt_style": "compact"}, loss_type="grpo")
    check("PINNED_GRPO_TICTACTOE", run_grpo(config), PINNED_GRPO_TICTACTOE)


def run_sft(tmp_path, **overrides) -> dict:
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    settings = dict(
        data=str(data),
        model="tiny",
        output_dir=str(tmp_path / "sft"),
        epochs=1,
        batch_size=4,
        micro_batch_size=3,
        learning_rate=3e-3,
        log_every=1,
        device="cpu",
        tensorboard=False,
    )
    settings.update(overrides)
    # SFT seeds only its shuffling; LoRA's initialisation draws from torch's global RNG.
    torch.manual_seed(0)
    summary = sft.train(SFTConfig(**settings))
    out = tmp_path / "sft"
    weights = out / (
        "adapter_model.safetensors" if settings.get("lora_rank") else "model.safetensors"
    )
    return {
        "steps": summary["steps"],
        "loss": [r["loss"] for r in rows(out / "metrics.jsonl", "train")],
        "tokens": [r["tokens"] for r in rows(out / "metrics.jsonl", "train")],
        "weights": checksum(load_file(str(weights))),
    }


def test_sft_two_steps_are_unchanged(tmp_path):
    check("PINNED_SFT", run_sft(tmp_path), PINNED_SFT)


def test_sft_lora_two_steps_are_unchanged(tmp_path):
    check("PINNED_SFT_LORA", run_sft(tmp_path, lora_rank=4), PINNED_SFT_LORA)
