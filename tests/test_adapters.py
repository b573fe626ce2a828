"""LoRA adapters as models: saved small by the trainers, loaded (and stacked) by ``load_model``."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from textgym.algos.checkpoints import save_model
from textgym.algos.model_loading import autocast
from textgym.model_files import ADAPTER_CONFIG
from textgym.models import adapter_base, cpu_has_fast_bf16, load_model

from ._runs import seeded_lora

pytestmark = pytest.mark.llm

IDS = torch.tensor([[5, 17, 99, 3, 42, 7]])


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


def test_an_adapter_directory_loads_as_its_base_plus_the_adapter(tmp_path):
    base, tokenizer = load_model("tiny")
    base_logits = _logits(base)
    model = seeded_lora(base, seed=0)
    expected = _logits(model)
    assert not torch.allclose(expected, base_logits, atol=1e-3)  # the adapter matters

    save_model(model, tokenizer, tmp_path / "sft", base="tiny")
    config = json.loads((tmp_path / "sft" / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == "tiny"
    weights = (tmp_path / "sft" / "adapter_model.safetensors").stat().st_size
    assert not (tmp_path / "sft" / "model.safetensors").exists() and weights < 1_000_000

    loaded, loaded_tokenizer = load_model(str(tmp_path / "sft"))
    assert not hasattr(loaded, "peft_config")  # merged: decodes like a plain model
    torch.testing.assert_close(_logits(loaded), expected, atol=1e-5, rtol=1e-5)
    assert loaded_tokenizer.pad_token_id is not None
    assert load_model(str(tmp_path / "sft"), dtype="bfloat16")[0].dtype == torch.bfloat16


def test_stacked_adapters_record_relative_bases_and_move_together(tmp_path):
    base, tokenizer = load_model("tiny")
    save_model(seeded_lora(base, seed=0), tokenizer, tmp_path / "runs" / "sft", base="tiny")
    sft, _ = load_model(str(tmp_path / "runs" / "sft"))
    grpo = seeded_lora(sft, seed=1)
    expected = _logits(grpo)
    checkpoint = tmp_path / "runs" / "grpo" / "checkpoint-3"
    save_model(grpo, tokenizer, checkpoint, base=str(tmp_path / "runs" / "sft"))
    recorded = json.loads((checkpoint / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    assert recorded == os.path.join("..", "..", "sft")

    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "runs"), moved)
    loaded, _ = load_model(str(moved / "grpo" / "checkpoint-3"))
    torch.testing.assert_close(_logits(loaded), expected, atol=1e-5, rtol=1e-5)


def test_adapter_base_keeps_names_and_ids():
    assert adapter_base("tiny", "/anywhere") == "tiny"
    assert adapter_base("org/some-model", "/anywhere") == "org/some-model"


def test_an_adapter_cycle_and_a_missing_base_are_clear_errors(tmp_path):
    base, tokenizer = load_model("tiny")
    save_model(seeded_lora(base, seed=0), tokenizer, tmp_path / "a", base="tiny")
    config = json.loads((tmp_path / "a" / ADAPTER_CONFIG).read_text())
    (tmp_path / "a" / ADAPTER_CONFIG).write_text(
        json.dumps({**config, "base_model_name_or_path": "."})
    )
    with pytest.raises(ValueError, match="cycle"):
        load_model(str(tmp_path / "a"))
    (tmp_path / "a" / ADAPTER_CONFIG).write_text(
        json.dumps({**config, "base_model_name_or_path": None})
    )
    with pytest.raises(ValueError, match="names no base model"):
        load_model(str(tmp_path / "a"))


def test_cpu_bf16_autocast_only_where_asked_and_supported():
    cpu = torch.device("cpu")
    with autocast(cpu, bf16=True):
        assert not torch.is_autocast_enabled("cpu")  # bf16 alone is for CUDA
    with autocast(cpu, bf16=True, cpu_bf16=True):
        assert torch.is_autocast_enabled("cpu") is cpu_has_fast_bf16()


def _continued(tmp_path, **overrides):
    """A 1-step GRPO config that continues a seeded rank-4 adapter saved on the tiny model."""
    from textgym.algos.grpo_config import GRPOConfig

    base, tokenizer = load_model("tiny")
    save_model(seeded_lora(base, seed=0), tokenizer, tmp_path / "sft", base="tiny")
    settings = dict(
        model=str(tmp_path / "sft"),
        continue_adapter=True,
        lora_rank=4,
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        steps=1,
        groups_per_step=1,
        group_size=2,
        rollout_batch_size=2,
        micro_batch_size=2,
        max_new_tokens=4,
        eval_every=0,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


def test_a_continued_adapter_is_trained_itself_and_its_start_swaps_in(tmp_path):
    from safetensors.torch import load_file

    from textgym.algos.learner import make_learner

    config = _continued(tmp_path, beta=0.05)
    learner = make_learner(config)
    trainable = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # the adapter, not the base
    assert set(learner.start_adapter) == trainable and learner.reference is None
    saved = load_file(str(tmp_path / "sft" / "adapter_model.safetensors"))
    assert len(saved) == len(trainable)  # the adapter as saved: no new one stacked on it

    params = dict(learner.model.named_parameters())
    name = next(n for n in sorted(trainable) if "lora_B" in n)
    start = params[name].detach().clone()
    with torch.no_grad():
        params[name].add_(1.0)  # as if trained
    trained = params[name].detach().clone()
    with learner.start_policy() as model:
        assert model is learner.model
        torch.testing.assert_close(params[name].detach(), start)
    torch.testing.assert_close(params[name].detach(), trained)  # put back on exit


@pytest.mark.slow
def test_a_continued_run_saves_one_adapter_on_the_original_base(tmp_path):
    from textgym.algos import grpo
    from textgym.algos.checkpoints import latest_checkpoint

    grpo.train(_continued(tmp_path, save_every=1))
    checkpoint = latest_checkpoint(tmp_path / "run")
    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == "tiny" and config["r"] == 4
    load_model(str(checkpoint))  # loads alone, on the base
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    train = [r for r in rows if r["stage"] == "train"]
    # The random tiny model plays no valid move, so the step is skipped and the policy is
    # still its start: the drift is zero against the continued adapter (against the base, with
    # the adapter disabled, the seeded adapter would read as drift).
    assert train[-1]["kl_to_start"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"lora_rank": 8}, ValueError, "has rank \\[4\\], lora_rank is 8"),
        ({"lora_rank": 0}, ValueError, "continue_adapter trains a LoRA adapter"),
    ],
)
def test_continue_adapter_refuses_a_rank_it_cannot_continue(tmp_path, overrides, error, match):
    from textgym.algos.learner import make_learner

    with pytest.raises(error, match=match):
        make_learner(_continued(tmp_path, **overrides))


def test_continue_adapter_needs_an_adapter_folder(tmp_path):
    from textgym.algos.learner import make_learner
    from textgym.model_files import ModelLoadError

    config = _continued(tmp_path)
    with pytest.raises(ModelLoadError, match="Expected a LoRA adapter folder"):
        make_learner(dataclasses.replace(config, model="tiny"))


def test_a_continued_adapter_can_recompute_its_activations(tmp_path):
    from textgym.algos.learner import make_learner

    learner = make_learner(_continued(tmp_path, gradient_checkpointing=True))
    assert learner.model.is_gradient_checkpointing and not learner.model.config.use_cache
