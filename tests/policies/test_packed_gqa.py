"""The engine's packed-GQA attention for decode steps against SDPA on expanded keys and values
(what transformers 5.17 runs with a mask), and the engine's decode with it on and off."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from textgym.policies.kv_slots import packed_gqa_sdpa  # noqa: E402

pytestmark = pytest.mark.llm


class _Layer:
    num_key_value_groups = 4
    is_causal = True
    training = False


@pytest.mark.parametrize("boolean", [True, False])
def test_packed_decode_step_equals_sdpa_on_expanded_heads(boolean):
    generator = torch.Generator().manual_seed(0)
    rows, kv_heads, groups, width, dim = 3, 2, 4, 40, 32
    query = torch.randn(rows, kv_heads * groups, 1, dim, generator=generator)
    key = torch.randn(rows, kv_heads, width, dim, generator=generator)
    value = torch.randn(rows, kv_heads, width, dim, generator=generator)
    allowed = torch.rand(rows, 1, 1, width, generator=generator) > 0.3
    allowed[..., 0] = True
    mask = allowed if boolean else torch.zeros(allowed.shape).masked_fill_(~allowed, -1e30)
    layer = _Layer()
    layer.num_key_value_groups = groups
    ours, _ = packed_gqa_sdpa(layer, query, key, value, mask, scaling=0.125)
    expanded = dict(repeats=groups, dim=1)
    reference = torch.nn.functional.scaled_dot_product_attention(
        query,
        key.repeat_interleave(**expanded),
        value.repeat_interleave(**expanded),
        attn_mask=mask,
        scale=0.125,
    ).transpose(1, 2)  # [b, 1, H, D]
    assert ours.shape == (rows, 1, kv_heads * groups, dim)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)


def test_engine_decodes_the_same_with_packed_gqa_and_restores_the_model():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from textgym.policies.decoding import decode
    from textgym.policies.slot_decoder import SlotDecoder

    config = Gemma3TextConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)
    prompts = [[2, *range(10, 10 + 5 * i)] for i in range(1, 4)]
    runs = {}
    for packed in (False, True):
        engine = SlotDecoder(model, packed_gqa=packed)
        rows = decode(
            model, prompts, max_new_tokens=12, end_ids=[], pad_id=0, process=None, engine=engine
        )
        runs[packed] = [(row.ids, row.logprobs) for row in rows]
        assert model.config._attn_implementation == "sdpa"  # restored after every pass
    for (ids_a, lp_a), (ids_b, lp_b) in zip(runs[False], runs[True], strict=True):
        assert ids_a == ids_b
        assert lp_a == pytest.approx(lp_b, abs=1e-5)
