"""tools/compress_adapter.py: a chain of LoRA adapters folded into one, exact or truncated."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from safetensors.torch import load_file

from textgym.algos.checkpoints import save_model
from textgym.model_files import ADAPTER_CONFIG
from textgym.models import load_model

from ._runs import seeded_lora

pytestmark = pytest.mark.llm

_SPEC = importlib.util.spec_from_file_location(
    "compress_adapter", Path(__file__).parents[1] / "tools" / "compress_adapter.py"
)
compress_adapter = importlib.util.module_from_spec(_SPEC)
sys.modules["compress_adapter"] = compress_adapter  # its dataclass looks its module up there
_SPEC.loader.exec_module(compress_adapter)


def _chain(root: Path) -> Path:
    """sft (rank 4) on tiny, grpo (rank 4) on sft, mastery (rank 4) on grpo; returns mastery."""
    model, tokenizer = load_model("tiny")
    base = "tiny"
    for seed, stage in enumerate(("sft", "grpo", "mastery")):
        torch.manual_seed(seed)  # lora_A's initialisation
        save_model(seeded_lora(model, seed), tokenizer, root / stage, base=base)
        model, _ = load_model(str(root / stage))
        base = str(root / stage)
    return root / "mastery"


def _merged(path) -> dict:
    model, _ = load_model(str(path), dtype="float32")
    return {k: v.double() for k, v in model.state_dict().items()}


def test_the_whole_chain_folds_into_one_adapter_on_the_base(tmp_path):
    mastery = _chain(tmp_path)
    chain, base = compress_adapter.adapter_chain(mastery)
    assert [p.name for p in chain] == ["sft", "grpo", "mastery"] and base == "tiny"

    assert (
        compress_adapter.main([str(mastery), str(tmp_path / "folded"), "--dtype", "float32"]) == 0
    )
    config = json.loads((tmp_path / "folded" / ADAPTER_CONFIG).read_text())
    assert (config["base_model_name_or_path"], config["r"], config["lora_alpha"]) == (
        "tiny",
        12,
        12,
    )
    expected, folded = _merged(mastery), _merged(tmp_path / "folded")
    for key, weight in expected.items():
        torch.testing.assert_close(folded[key], weight, atol=1e-6, rtol=1e-5)

    compress_adapter.main([str(mastery), str(tmp_path / "bf16")])  # default: bfloat16
    tensors = load_file(tmp_path / "bf16" / "adapter_model.safetensors")
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    # bfloat16 factors round each entry by <= 2^-9 relative: the merged deltas stay within 1%.
    base = _merged("tiny")
    rounded = _merged(tmp_path / "bf16")
    for key, weight in expected.items():
        if not torch.equal(weight, base[key]):  # a layer the adapters change
            error = (rounded[key] - weight).norm() / (weight - base[key]).norm()
            assert 0 < error < 0.01, key


def test_a_truncated_fold_is_the_best_approximation_of_that_rank(tmp_path):
    mastery = _chain(tmp_path)
    chain, _ = compress_adapter.adapter_chain(mastery)
    tensors, errors = compress_adapter.fold_chain(chain, rank=5)
    module = "base_model.model.model.layers.0.self_attn.q_proj"
    delta = torch.zeros(())
    for path in chain:
        parts = load_file(path / "adapter_model.safetensors")
        scaling = json.loads((path / ADAPTER_CONFIG).read_text())["lora_alpha"] / 4
        delta = (
            delta
            + scaling
            * parts[f"{module}.lora_B.weight"].double()
            @ parts[f"{module}.lora_A.weight"].double()
        )  # [out, in]
    u, s, vh = torch.linalg.svd(delta)
    best = u[:, :5] * s[:5] @ vh[:5]  # Eckart-Young: the best rank-5 approximation
    written = tensors[f"{module}.lora_B.weight"] @ tensors[f"{module}.lora_A.weight"]
    assert tensors[f"{module}.lora_A.weight"].shape[0] == 5
    torch.testing.assert_close(written, best, atol=1e-10, rtol=1e-8)
    assert errors[module] == pytest.approx(float(s[5:].norm() / s.norm()), rel=1e-9)
    assert 0 < errors[module] < 1


def test_onto_folds_only_the_adapters_above_it_and_cast_only_keeps_the_factors(tmp_path):
    mastery = _chain(tmp_path)
    expected = _merged(mastery)
    sft = tmp_path / "sft"
    original = load_file(sft / "adapter_model.safetensors")
    compress_adapter.main([str(sft), str(sft), "--cast-only"])
    cast = load_file(sft / "adapter_model.safetensors")
    assert cast.keys() == original.keys()
    for key, tensor in original.items():
        assert cast[key].dtype == torch.bfloat16
        torch.testing.assert_close(cast[key], tensor.to(torch.bfloat16), atol=0, rtol=0)

    assert compress_adapter.main([str(mastery), str(mastery), "--onto", str(sft)]) == 0
    config = json.loads((mastery / ADAPTER_CONFIG).read_text())
    assert (config["base_model_name_or_path"], config["r"]) == (os.path.join("..", "sft"), 8)
    folded, base = _merged(mastery), _merged("tiny")  # sft in bfloat16 now: within 1%
    changed = [key for key, weight in expected.items() if not torch.equal(weight, base[key])]
    assert changed
    for key in changed:
        error = (folded[key] - expected[key]).norm() / (expected[key] - base[key]).norm()
        assert error < 0.01, key

    with pytest.raises(ValueError, match="Expected .*grpo in the chain below"):
        compress_adapter.adapter_chain(sft, onto=tmp_path / "grpo")
    with pytest.raises(ValueError, match="got itself"):
        compress_adapter.adapter_chain(sft, onto=sft)


def test_cast_only_with_a_rank_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        compress_adapter.main([str(tmp_path), str(tmp_path), "--cast-only", "--rank", "2"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "textgym: error: --cast-only writes one adapter as it is: drop --rank and --onto"
    ]
