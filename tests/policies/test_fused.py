"""fuse_for_decoding: one matrix multiply per group of sibling projections and one rms_norm per
RMSNorm, with the parameters where they were and the same logits and greedy tokens."""

from __future__ import annotations

import copy
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from textgym.policies.fused import count_kernels, fuse_for_decoding  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm


def _tiny_gemma3():
    config = transformers.Gemma3TextConfig(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return transformers.Gemma3ForCausalLM(config).eval()


def _models():
    llama = build_tiny_model(seed=0)[0]
    return {"llama": llama, "gemma3": _tiny_gemma3()}


def _with_norm_weights(model):
    """Norm weights start at 0 (Gemma) or 1 (Llama); other values exercise the scale."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


def _sharp(model):
    """Weights ~N(0, 0.5), so that greedy tokens depend on the prompt (as conftest's sharp)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_logits_and_parameters_unchanged(arch, dtype):
    plain = _with_norm_weights(_models()[arch].to(dtype))
    fused = copy.deepcopy(plain)
    before = [(n, p.shape, p.dtype) for n, p in fused.named_parameters()]
    report = fuse_for_decoding(fused)
    layers = plain.config.num_hidden_layers
    norms = {"llama": 2 * layers + 1, "gemma3": 6 * layers + 1}[arch]
    assert (report.projection_groups, report.norms) == (2 * layers, norms)
    assert [(n, p.shape, p.dtype) for n, p in fused.named_parameters()] == before
    ids = torch.randint(0, 250, (3, 17), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(fused(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-4)
    assert fuse_for_decoding(fused).projection_groups == 0, "fusing twice changes nothing"


def test_writing_a_projection_weight_writes_the_fused_matrix():
    """A rollout-weight refresh copies into the siblings' weights; the fused product sees it."""
    plain = _models()["gemma3"]
    fused = copy.deepcopy(plain)
    fuse_for_decoding(fused)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for model in (plain, fused):
            for layer in model.model.layers:
                layer.self_attn.k_proj.weight.copy_(layer.self_attn.k_proj.weight * 2)
                layer.mlp.up_proj.weight.add_(0.5)
                layer.input_layernorm.weight.fill_(0.7)
            generator.manual_seed(3)
        ids = torch.randint(0, 250, (2, 9), generator=generator)
        torch.testing.assert_close(fused(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-4)


def test_lora_layers_are_left_alone():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        build_tiny_model(seed=0)[0], peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    report = fuse_for_decoding(model)
    assert report.projection_groups == model.config.num_hidden_layers  # the MLPs only


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_greedy_decoding_equal_with_fewer_kernels(arch):
    plain = _sharp(_models()[arch])
    tiny_tokenizer = build_tiny_model(seed=0)[1]
    fused = copy.deepcopy(plain)
    fuse_for_decoding(fused)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    results = {}
    for name, model in (("plain", plain), ("fused", fused)):
        policy = HFPolicy(
            model,
            tiny_tokenizer,
            max_new_tokens=12,
            temperature=0.0,
            engine_options={"count_kernels": True},
        )
        completions = policy.generate(prompts)
        results[name] = (
            [c.completion_ids for c in completions],
            [c.logprobs for c in completions],
            policy.engine.stats.kernels_per_step,
        )
    assert results["fused"][0] == results["plain"][0]
    assert len({tuple(ids) for ids in results["plain"][0]}) == 2, "prompts must matter"
    for a, b in zip(results["fused"][1], results["plain"][1], strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    plain_kernels, fused_kernels = results["plain"][2], results["fused"][2]
    assert 0 < fused_kernels < plain_kernels


def test_count_kernels_leaves_out_views_and_no_op_conversions():
    x = torch.ones(4, 4)
    assert count_kernels(lambda: x.view(16).t()) == 0
    assert count_kernels(lambda: x.to(torch.float32)) == 0
    assert count_kernels(lambda: x + 1) == 1
    assert count_kernels(lambda: torch.nn.functional.linear(x, x)) == 1
