"""LoRA adapters as models: saved small by the trainers, loaded (and stacked) by ``load_model``."""

from __future__ import annotations

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
from textgym.models import ADAPTER_CONFIG, adapter_base, cpu_has_fast_bf16, load_model

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
