"""CUDA-only checks of the LLM path: bf16 resolution, device placement, the decode loop against
``generate`` on the GPU, the sampler's device RNG and CUDA memory reporting of a GRPO step.

They skip without CUDA (CI's CPU); ``benchmarks/gpu_suite.py`` runs them first on a GPU.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_auto_dtype_is_bf16_on_cuda_and_the_model_lands_there():
    from textgym.models import load_model, resolve_dtype

    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    model, _ = load_model("tiny", dtype="auto", device="cuda")
    assert model.device.type == "cuda" and model.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_loop_matches_generate_on_cuda(dtype):
    from textgym.models import load_model
    from textgym.policies.hf import HFPolicy

    model, tokenizer = load_model("tiny", dtype=dtype, device="cuda")
    prompts = [[256, *range(40, 40 + 5 * i), 257] for i in range(1, 5)]
    outputs = {
        decoder: HFPolicy(
            model, tokenizer, max_new_tokens=16, temperature=0, decoder=decoder
        ).generate(prompts)
        for decoder in ("textgym", "transformers")
    }
    for ours, reference in zip(outputs["textgym"], outputs["transformers"], strict=True):
        if dtype == "float32":  # bf16 rounding may flip a near-tie between the two paths
            assert ours.completion_ids == reference.completion_ids
        assert len(ours.completion_ids) == len(ours.logprobs) > 0
        assert all(lp <= 0 for lp in ours.logprobs)
    sampled = HFPolicy(model, tokenizer, max_new_tokens=16, seed=0).generate(prompts)
    again = HFPolicy(model, tokenizer, max_new_tokens=16, seed=0).generate(prompts)
    assert [c.completion_ids for c in sampled] == [c.completion_ids for c in again]


def test_grpo_step_on_cuda_reports_memory(tmp_path):
    from textgym.algos import grpo
    from textgym.algos.grpo_config import GRPOConfig

    config = GRPOConfig(
        model="tiny",
        output_dir=str(tmp_path),
        env_id="textgym/TicTacToe-v0",
        opponent_random_move_prob=(0.5, 1.0),
        steps=1,
        groups_per_step=2,
        group_size=2,
        max_new_tokens=8,
        eval_every=0,
        eval_episodes=2,
        device="cuda",
        env_kwargs={"prompt_style": "compact"},
    )
    grpo.train(config)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(row.get("cuda_max_memory_gib", 0) > 0 for row in rows)


def test_gemma3_layout_decodes_with_graphs_on_over_growing_turns():
    """A tiny Gemma 3 with Gemma 3 270M's attention layout (a sliding window, GQA with one KV
    head for four query heads, head size 256) in bfloat16: the engine keeps CUDA graphs on over
    turns whose cache grows (a failed capture only warns, so the warning is an error here),
    captures few graphs, and decodes greedily what ``generate`` decodes."""
    import warnings

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from textgym.policies.decoding import decode

    config = Gemma3TextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=32,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        max_position_embeddings=4096,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    from textgym.policies.slot_decoder import SlotDecoder

    engine = SlotDecoder(model)
    assert engine.graphs.enabled
    prompts = [[2, *range(10, 10 + 7 * i)] for i in range(1, 9)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "CUDA graphs turned off" fails
        for _ in range(4):  # turns: each prompt grows past the sliding window
            rows = decode(
                model,
                prompts,
                max_new_tokens=24,
                end_ids=[],
                pad_id=0,
                process=None,
                engine=engine,
            )
            prompts = [p + row.ids + [3, 4, 5] * 8 for p, row in zip(prompts, rows)]
    assert engine.graphs.enabled and engine.stats.graph_captures >= 1
    assert engine.stats.graph_captures <= 8, engine.stats
    with torch.no_grad():
        ids = torch.tensor([prompts[0]], device="cuda")
        reference = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None)
    (row,) = decode(
        model, [prompts[0]], max_new_tokens=8, end_ids=[], pad_id=0, process=None, engine=engine
    )
    matching = sum(a == b for a, b in zip(row.ids, reference[0, ids.shape[1] :].tolist()))
    assert matching >= 6, (row.ids, reference[0, ids.shape[1] :].tolist())  # bf16 near-ties
