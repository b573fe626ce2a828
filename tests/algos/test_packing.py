"""Padding-free packed micro-batches (``micro_batch_tokens``): rows, log-probs, GRPO and SFT.

Packing changes how the update's forward passes are laid out, never what they compute: per-token
log-probs, losses, normalisers and gradients must equal the padded path's within float
rounding, for the tiny Llama model and for a small random Gemma 3 whose sliding window is
shorter than a packed row.
"""

from __future__ import annotations

import copy
import os
import random
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import textgym  # noqa: E402,F401
from textgym.algos import batches, decoder_passes, sft  # noqa: E402
from textgym.algos.grpo_update import update  # noqa: E402
from textgym.algos.learner import Learner  # noqa: E402
from textgym.algos.model_loading import autocast, prepare_model  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402
from textgym.algos.sft_data import conversation_tokens  # noqa: E402
from textgym.models import cpu_has_fast_bf16  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402
from textgym.tokens import ChatTokenizer  # noqa: E402

from .test_grpo import batch_of_trajectories, small  # noqa: E402,F401

pytestmark = pytest.mark.llm

# ------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "budget", "rows"),
    [
        ([5, 3, 4, 2], 8, [[0, 1], [2, 3]]),  # 5+3 and 4+2: longest first, first fit
        ([2, 2, 2, 2], 8, [[0, 1, 2, 3]]),  # exactly full
        ([10, 3, 3], 8, [[0], [1, 2]]),  # longer than the budget: a row of its own
        ([3, 10, 9, 1], 8, [[1], [2], [0, 3]]),  # two too long; the short ones share a row
        ([4, 4, 4], 4, [[0], [1], [2]]),
        ([], 8, []),
    ],
)
def test_pack_rows_first_fit_decreasing(lengths, budget, rows):
    assert batches.pack_rows(lengths, budget) == rows


def test_pack_rows_covers_every_sequence_within_the_budget():
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
        budget = rng.randint(1, 60)
        rows = batches.pack_rows(lengths, budget)
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        for row in rows:
            assert row == sorted(row)
            assert sum(lengths[i] for i in row) <= budget or len(row) == 1
        # No two rows could be merged: first fit leaves no room a later row's content fits.
        loads = sorted(sum(lengths[i] for i in row) for row in rows)
        assert len(loads) < 2 or loads[0] + loads[1] > budget


def test_micro_batch_rows_pads_by_count_or_packs_by_tokens():
    batch = batches.make_token_batch([[1] * 6] * 3, [[1] * 6] * 3)  # 5 positions per sequence

    def rows(size, tokens):
        return batches.micro_batch_rows(
            batch, SimpleNamespace(micro_batch_size=size, micro_batch_tokens=tokens)
        )

    assert rows(2, None) == [[0, 1], [2]]
    assert rows(2, 10) == [[0, 1], [2]]
    assert rows(1, 15) == [[0, 1, 2]]
    assert batches.micro_batch_rows(None, SimpleNamespace()) == []
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        batches.pack_rows([3], 0)


@pytest.mark.parametrize("value", [0, -5])
def test_config_refuses_a_token_budget_below_one(tmp_path, value):
    with pytest.raises(ValueError, match="micro_batch_tokens: expected an int >= 1"):
        small(tmp_path, micro_batch_tokens=value)


# ------------------------------------------------------------------------------------------
# Per-token log-probs
# ------------------------------------------------------------------------------------------


def small_gemma3(attn: str):
    """A random 4-layer Gemma 3 with logit soft-capping, 3 of its layers sliding with a window
    of 4 tokens: far shorter than a packed row."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    sizes = {"hidden_size": 64, "intermediate_size": 128, "head_dim": 16, "vocab_size": 300}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 4}
    config = Gemma3TextConfig(**sizes, **heads, sliding_window=4, final_logit_softcapping=30.0)
    config.layer_types = ["sliding_attention"] * 3 + ["full_attention"]
    config._attn_implementation = attn
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = Gemma3ForCausalLM(config)
    return model.eval()


def random_batch(seed: int, lengths=(23, 9, 31, 14, 5, 27)):
    """Token sequences of varied lengths with loss on random spans (and one row without)."""
    gen = torch.Generator().manual_seed(seed)
    ids, masks = [], []
    for i, n in enumerate(lengths):
        ids.append(torch.randint(0, 256, (n,), generator=gen).tolist())
        mask = (torch.rand(n, generator=gen) < 0.6).long()
        mask[: n // 3] = 0  # a prompt
        masks.append((mask * (i != 4)).tolist())
    return batches.make_token_batch(ids, masks, pad_token_id=258)


def _model(name: str):
    if name == "tiny":
        return build_tiny_model(seed=0)[0]
    return small_gemma3(name.split("-")[1])


@pytest.mark.parametrize("name", ["tiny", "gemma3-sdpa", "gemma3-eager"])
def test_packed_log_probs_equal_padded_per_token(name):
    model = _model(name)
    batch = random_batch(0)
    assert batch.input_ids.shape[1] > 4 * 4  # rows far longer than Gemma's window of 4
    results = []
    for packed in (False, True):
        model.zero_grad()
        logp, entropy = batches.sequence_log_probs(
            model, batch, chunk_size=7, with_entropy=True, packed=packed
        )  # [B, L-1] each
        weights = torch.arange(1, len(batch) + 1)[:, None]  # rows weighted differently
        (-(logp * weights).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((logp.detach(), entropy, grads))
    for padded, packed in zip(*results):
        torch.testing.assert_close(packed, padded, atol=2e-5, rtol=1e-4)
    assert (results[1][0][batch.loss_mask == 0] == 0).all()
    assert results[0][2].abs().sum() > 0


@pytest.mark.parametrize("name", ["tiny", "gemma3-sdpa"])
def test_packed_hidden_states_need_the_position_reset(name):
    """The packed row's hidden states are the padded pass's at real positions; the same tokens
    run as one sequence (no position reset: one causal mask over the row) differ. So the
    equality above is not an accident of short attention spans."""
    model = _model(name)
    batch = random_batch(1)
    decoder = model.get_decoder()
    with torch.no_grad():
        padded = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state  # [B, L-1, H]
        packed = decoder_passes.packed_hidden(decoder, batch)  # [N, H]
        real = batch.attention_mask.bool()
        unreset = decoder(input_ids=batch.input_ids[real][None], use_cache=False)
    torch.testing.assert_close(packed, padded[real], atol=2e-5, rtol=1e-4)
    assert (unreset.last_hidden_state[0] - padded[real]).abs().max() > 1e-2


def test_packing_refuses_an_attention_that_would_mix_sequences():
    decoder = SimpleNamespace(config=SimpleNamespace(_attn_implementation="my_kernel"))
    with pytest.raises(ValueError, match="got 'my_kernel'; load the model with"):
        decoder_passes.packed_hidden(decoder, random_batch(0))


@pytest.mark.skipif(not cpu_has_fast_bf16(), reason="no native bf16 on this CPU")
def test_packed_log_probs_under_cpu_bf16_autocast():
    """bf16 rounds differently for other shapes, so the match is only to bf16 precision."""
    model = small_gemma3("sdpa")
    batch = random_batch(2)
    out = []
    for packed in (False, True):
        with autocast(torch.device("cpu"), False, cpu_bf16=True):
            out.append(batches.sequence_log_probs(model, batch, packed=packed)[0].detach())
    torch.testing.assert_close(out[1], out[0], atol=0.1, rtol=0.05)
    assert (out[0] != 0).any()


# ------------------------------------------------------------------------------------------
# GRPO update
# ------------------------------------------------------------------------------------------


def budget_for(trajs) -> int:
    """A token budget that makes several rows, some holding more than one sequence."""
    lengths = [len(t.token_ids) - 1 for t in trajs]
    budget = max(lengths) + min(lengths)
    rows = batches.pack_rows(lengths, budget)
    assert 1 < len(rows) < len(lengths), (lengths, rows)
    return budget


def shifted(model):
    """A frozen copy of ``model`` with every weight moved a little (a reference policy that
    differs from the policy, as after some training)."""
    copied = copy.deepcopy(model).eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in copied.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))
    return copied


UPDATE_CASES = {
    "dapo": {},
    "grpo_two_iterations": {"loss_type": "grpo", "num_iterations": 2},
    "gspo_kl": {"loss_type": "gspo", "beta": 0.05},
    "cispo_sampler_logprobs": {"loss_type": "cispo", "rollout_dtype": "bfloat16"},
    "lora_kl": {"lora_rank": 4, "beta": 0.05},
    "gradient_checkpointing": {"gradient_checkpointing": True, "num_iterations": 2},
    "every_sequence_over_budget": {},  # an 8-token budget: each sequence in a row of its own
}


@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_packed_update_equals_padded_update(tmp_path, batch_of_trajectories, case):  # noqa: F811
    """Same metrics (loss, gradient norm, clipping, ratio, KL, entropy, sampler gap) and the
    same parameters after the update, with share_prefix on (the default: the padded path runs
    the shared prompt once, the packed path ignores it)."""
    base, trajs = batch_of_trajectories
    trajs = copy.deepcopy(trajs)
    for t in trajs:  # the rollout's log-probs, perturbed: the ratio is taken against them
        t.token_logprobs = [lp - 0.01 * (k % 3) for k, lp in enumerate(t.token_logprobs)]
    overrides = UPDATE_CASES[case]
    budget = 8 if case == "every_sequence_over_budget" else budget_for(trajs)
    metrics, weights = [], []
    for tokens in (None, budget):
        config = small(tmp_path, micro_batch_size=3, micro_batch_tokens=tokens, **overrides)
        torch.manual_seed(0)  # the same LoRA initialisation for both
        model = prepare_model(
            copy.deepcopy(base),
            gradient_checkpointing=config.gradient_checkpointing,
            lora_rank=config.lora_rank,
        )
        trainable = [p for p in model.parameters() if p.requires_grad]
        with torch.no_grad():  # the policy starts away from the reference, so the KL is not 0
            for p in trainable if config.lora_rank else []:
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
        optimizer = torch.optim.SGD(trainable, lr=1.0)
        learner = Learner(
            config=config,
            model=model,
            optimizer=optimizer,
            scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
            max_loss_tokens=80,
            reference=shifted(base) if config.beta and not config.lora_rank else None,
        )
        metrics.append(update(learner, trajs))
        weights.append(torch.cat([p.detach().flatten() for p in trainable]))
    padded, packed = metrics
    assert padded["skipped_update"] == 0.0 and padded["loss_tokens"] > 0
    assert packed.keys() == padded.keys()
    for key, value in padded.items():
        assert packed[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key
    if overrides.get("beta"):
        assert padded["kl"] > 0
    if "rollout_dtype" in overrides:
        assert padded["sampler_logprob_gap"] > 1e-3
    torch.testing.assert_close(weights[1], weights[0], atol=1e-6, rtol=1e-5)
    if not overrides.get("lora_rank"):
        before = torch.cat([p.detach().flatten() for p in base.parameters()])
        assert not torch.equal(weights[0], before), "the update changed nothing"


# ------------------------------------------------------------------------------------------
# SFT step
# ------------------------------------------------------------------------------------------


def test_packed_sft_step_equals_padded(tmp_path):
    base, tokenizer = build_tiny_model(seed=0)
    chat = ChatTokenizer(tokenizer)
    batch = []
    for board, move in (("012\n345\n678", "4"), ("X12\n3O5\n678", "8"), ("XO2\n345\n678", "2")):
        for turns in (1, 2):
            messages = [
                {"role": "system", "content": "Play."},
                {"role": "user", "content": f"{board}\nfree ..."},
                {"role": "assistant", "content": f"<move>{move}</move>"},
            ]
            if turns == 2:
                messages += [
                    {"role": "user", "content": "opp 5\nnext?"},
                    {"role": "assistant", "content": "<move>0</move>"},
                ]
            batch.append(conversation_tokens(chat, messages))
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    lengths = [len(ids) - 1 for ids, _ in batch]
    budget = max(lengths) + min(lengths)
    assert 1 < len(batches.pack_rows(lengths, budget)) < len(batch)
    results = []
    for tokens in (None, budget):
        config = SFTConfig(
            data=str(data),
            model="tiny",
            output_dir=str(tmp_path / "out"),
            micro_batch_size=2,
            micro_batch_tokens=tokens,
            device="cpu",
            tensorboard=False,
        )
        model = copy.deepcopy(base).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        run = sft.SFTRun(
            config=config,
            model=model,
            optimizer=optimizer,
            scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
            device=torch.device("cpu"),
            pad_token_id=tokenizer.pad_token_id,
            total_steps=1,
        )
        loss, count = sft.sft_step(run, batch)
        results.append((loss, count, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (loss, count, weights), (packed_loss, packed_count, packed_weights) = results
    assert packed_count == count > 0
    assert packed_loss == pytest.approx(loss, rel=1e-5)
    torch.testing.assert_close(packed_weights, weights, atol=1e-6, rtol=1e-5)
    assert not torch.equal(weights, torch.cat([p.flatten() for p in base.parameters()]))


@pytest.mark.parametrize(
    ("share_prefix", "device", "expected"),
    [(True, "cpu", True), (True, "cuda", False), (False, "cpu", False), (False, "cuda", False)],
)
def test_the_update_shares_the_prompt_on_the_cpu_only(share_prefix, device, expected):
    from textgym.algos.grpo_config import GRPOConfig
    from textgym.algos.grpo_update import update_shares_prefix

    config = GRPOConfig(env_id="textgym/TicTacToe-v0", share_prefix=share_prefix)
    assert update_shares_prefix(config, torch.device(device)) is expected
