"""Training runs are safe: checkpoints are data (never code), nothing non-finite trains or is saved,
resume says what it does, SFT data is validated up front and saved atomically."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import random

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import numpy as np

from textgym.algos import grpo, sft
from textgym.algos.checkpoint_layout import rng_state, set_rng_state
from textgym.algos.checkpoints import save_model
from textgym.algos.common import NonFiniteGuard
from textgym.algos.grpo_update import update
from textgym.algos.resume import load_checkpoint
from textgym.algos.sft_config import SFTConfig
from textgym.algos.sft_data import read_conversations
from textgym.tiny_model import build_tiny_model

from .test_grpo import batch_of_trajectories, learner_for, small  # noqa: F401

pytestmark = pytest.mark.llm


# ------------------------------------------------------------------ 6. checkpoints are data


class _Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    grpo.train(small(tmp_path, steps=1))
    checkpoint = tmp_path / "run" / "checkpoint-1"
    marker = tmp_path / "pwned"
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=True)
    state["extra"]["evil"] = _Payload(str(marker))
    with open(checkpoint / "trainer_state.pt", "wb") as fh:
        pickle.dump(state, fh)  # what an attacker could ship instead of torch.save's output
    model, _ = build_tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    with pytest.raises((ValueError, RuntimeError)):
        load_checkpoint(checkpoint, model=model, optimizer=optimizer, scheduler=scheduler)
    assert not marker.exists()


def test_rng_state_survives_a_weights_only_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


# ------------------------------------------------------------------ 7. nothing non-finite


@pytest.mark.parametrize(
    "overrides",
    [
        {"learning_rate": math.inf},
        {"learning_rate": math.nan},
        {"max_grad_norm": math.nan},
        {"beta": math.nan},
        {"epsilon_low": math.nan},
        {"epsilon_high": math.inf},
        {"temperature": math.nan},
        {"opponent_random_move_prob": (math.nan, 0.5)},
    ],
)
def test_grpo_config_rejects_non_finite_numbers(tmp_path, overrides):
    with pytest.raises(ValueError, match="finite"):
        small(tmp_path, **overrides)


def test_sft_config_rejects_non_finite_numbers(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    with pytest.raises(ValueError, match="finite"):
        SFTConfig(data=str(data), learning_rate=math.nan)


def test_guard_skips_non_finite_steps_then_stops():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    guard = NonFiniteGuard(limit=2)
    (weight * torch.tensor([1.0, math.nan, 1.0])).sum().backward()
    norm, stepped = guard.step(optimizer, [weight], float("nan"), 1.0)
    assert not stepped and math.isnan(norm) and torch.equal(weight.detach(), torch.ones(3))
    weight.sum().backward()
    assert guard.step(optimizer, [weight], 3.0, 1.0)[1]  # a finite step resets the count
    assert not torch.equal(weight.detach(), torch.ones(3))
    (weight * math.inf).sum().backward()
    assert not guard.step(optimizer, [weight], math.inf, 1.0)[1]
    (weight * math.inf).sum().backward()
    with pytest.raises(FloatingPointError, match="2 optimizer steps in a row"):
        guard.step(optimizer, [weight], math.inf, 1.0)
    assert bool(torch.isfinite(weight).all()) and guard.skipped == 3


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_return_stops_before_any_update(tmp_path, batch_of_trajectories, bad):  # noqa: F811
    model, trajs = batch_of_trajectories
    trajs = copy.deepcopy(trajs)
    trajs[3].rewards[-1] = bad
    trained = copy.deepcopy(model)
    with pytest.raises(ValueError, match="Episode 3 .* not finite"):
        update(learner_for(trained, small(tmp_path)), trajs)
    for a, b in zip(trained.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_non_finite_weights_are_never_saved(tmp_path):
    model, tokenizer = build_tiny_model()
    with torch.no_grad():
        next(model.parameters())[0] = math.nan
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        save_model(model, tokenizer, tmp_path / "out", base="tiny")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ 8. resume


def test_resume_is_explicit(tmp_path):
    first = grpo.train(small(tmp_path, steps=2))
    run = tmp_path / "run"
    saved_eval = (run / "final_eval.json").read_text()
    run_record = (run / "run.json").read_text()
    # A finished run: nothing to do, its final evaluation untouched.
    assert grpo.train(small(tmp_path, steps=2, resume=True)) == json.loads(saved_eval) == first
    assert (run / "final_eval.json").read_text() == saved_eval
    # Fewer steps than the checkpoint: an error, not a silent no-op.
    with pytest.raises(ValueError, match="already past it"):
        grpo.train(small(tmp_path, steps=1, resume=True))
    # A new learning rate would be overridden by the restored optimizer: refused up front.
    with pytest.raises(ValueError, match=r"learning_rate: 0.001 -> 0.002"):
        grpo.train(small(tmp_path, steps=3, resume=True, learning_rate=2e-3))
    assert (run / "run.json").read_text() == run_record  # refused resumes leave records alone
    # More steps is what resume is for.
    grpo.train(small(tmp_path, steps=3, resume=True))
    assert (run / "checkpoint-3").is_dir()


# ------------------------------------------------------------------ 9. SFT data and saving


def _write(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "no messages"}, "record 2: expected a non-empty 'messages' list"),
        ({"messages": []}, "record 2: expected a non-empty 'messages' list"),
        ({"messages": ["hi"]}, "record 2: message 0 is str"),
        (
            {"messages": [{"role": "narrator", "content": "x"}, GOOD["messages"][1]]},
            "record 2: message 0 has role 'narrator'",
        ),
        (
            {"messages": [GOOD["messages"][0], {"role": "assistant", "content": None}]},
            "record 2: message 1 \\(assistant\\) has content None",
        ),
        ({"messages": [GOOD["messages"][0]]}, "record 2: no assistant message"),
        ({"messages": [GOOD["messages"][1], GOOD["messages"][0]]}, "record 2: the first message"),
        ("[1, 2]", "expected a JSON object per line"),
        ("{not json", "invalid JSON"),
    ],
)
def test_malformed_sft_records_are_named(tmp_path, record, message):
    data = _write(tmp_path / "d.jsonl", [GOOD, record])
    with pytest.raises(ValueError, match=message):
        read_conversations(data)


def test_sft_checks_data_before_loading_a_model_and_refuses_an_existing_run(tmp_path, monkeypatch):
    bad = _write(tmp_path / "bad.jsonl", [{"messages": [{"role": "user", "content": None}]}])
    loads = []
    monkeypatch.setattr("textgym.models.load_model", lambda *a, **k: loads.append(a))
    config = SFTConfig(data=str(bad), model="tiny", output_dir=str(tmp_path / "out"), device="cpu")
    with pytest.raises(ValueError, match="record 1"):
        sft.train(config)
    assert loads == []
    monkeypatch.undo()

    good = _write(tmp_path / "good.jsonl", [GOOD] * 4)
    settings = {
        "data": str(good),
        "model": "tiny",
        "output_dir": str(tmp_path / "out"),
        "device": "cpu",
        "batch_size": 2,
        "tensorboard": False,
    }
    sft.train(SFTConfig(**settings))
    out = tmp_path / "out"
    assert (out / "sft_summary.json").exists() and (out / "model.safetensors").exists()
    assert not (out / ".model.tmp").exists()
    with pytest.raises(ValueError, match="hold no training run yet"):
        sft.train(SFTConfig(**settings))
