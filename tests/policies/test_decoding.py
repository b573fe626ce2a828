"""Tests of the decode loop: the prefix cache across turns, the sampler, and equivalence with
``transformers``' ``generate`` (HFPolicy's decoder before the decode loop)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym

import textgym  # noqa: F401  (registers the envs)
from textgym.policies.decoding import decode
from textgym.policies.hf import HFPolicy
from textgym.policies.prefix_cache import PrefixCache
from textgym.policies.sampling import process_logits, sample_categorical
from textgym.rollout import rollout
from textgym.tiny_model import build_tiny_model

pytestmark = pytest.mark.llm

#: Log-probabilities of the same tokens computed by passes of different shapes (batch rows,
#: cached or not, padded or not) differ by float32 accumulation-order error, which grows with
#: the logits' magnitude (the sharpened tiny model's reach about 30) and depends on the CPU's
#: BLAS kernels: 1.2e-5 on one 902-token case on an AMD EPYC and on this project's Xeon, i.e.
#: about 40 float32 ulps of 30. 1e-4 holds that with margin on any x86-64 CPU while a real bug
#: (a wrong position, a stale cache column) moves log-probs by >= 1e-2.
FP32_LOGPROB_TOL = 1e-4


class ForwardCounter:
    """Counts the real (unpadded) input tokens of every forward pass of a model."""

    def __init__(self, model) -> None:
        self.tokens = 0
        self.handle = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if mask is not None:
            self.tokens += int(mask[:, -ids.shape[1] :].sum())
        else:
            self.tokens += ids.numel()


def tictactoe_rollout(policy, seeds, batch_size):
    return rollout(
        lambda: gym.make("textgym/TicTacToe-v0", prompt_style="compact"),
        policy,
        seeds,
        batch_size=batch_size,
    )


def test_sampler_draws_the_softmax_distribution():
    """Frequencies of 120,000 draws match softmax(logits) within 5 standard errors, over a
    vocabulary that is not a multiple of the block (padding) with masked tokens."""
    generator = torch.Generator().manual_seed(0)
    vocab = 1000
    logits = torch.randn(vocab, generator=generator) * 2
    logits[::7] = -float("inf")
    probs = torch.softmax(logits, dim=-1)
    batch = logits.expand(4000, vocab).contiguous()
    counts = torch.zeros(vocab)
    for _ in range(30):
        tokens, log_probs = sample_categorical(batch, generator, block=64)
        counts += torch.bincount(tokens, minlength=vocab)
        torch.testing.assert_close(log_probs, probs.log()[tokens], atol=1e-5, rtol=0)
    draws = counts.sum()
    assert counts[::7].sum() == 0, "a token of probability 0 was drawn"
    stderr = (probs * (1 - probs) / draws).sqrt()
    assert ((counts / draws - probs).abs() <= 5 * stderr + 1e-6).all()


def test_sampler_is_seeded():
    logits = torch.randn(8, 300)
    a = sample_categorical(logits, torch.Generator().manual_seed(3))[0]
    b = sample_categorical(logits, torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.8), (0.9, 20, 0.5)]
)
def test_process_logits_matches_transformers_warpers(temperature, top_k, top_p):
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    ours = process_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    torch.testing.assert_close(ours[~torch.isinf(ours)], expected[~torch.isinf(expected)])


def test_prefix_cache_finds_the_longest_prefix_and_evicts_least_recent():
    cache = PrefixCache(max_tokens=10)
    kv = [(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))]
    cache.store([1, 2, 3], kv)
    cache.store([1, 2, 3, 4, 5], kv)
    cache.store([9, 9], kv)
    assert cache.lookup([1, 2, 3, 4, 5, 6])[0] == (1, 2, 3, 4, 5)
    assert cache.lookup([1, 2, 3, 7])[0] == (1, 2, 3)
    assert cache.lookup([2, 3]) == (None, None)
    assert cache.num_tokens == 10
    cache.store([5, 5, 5], kv)  # 13 tokens: the least recently used go first
    assert cache.lookup([9, 9, 1]) == (None, None)
    assert cache.lookup([1, 2, 3, 4, 5, 6])[0] == (1, 2, 3)  # [1..5] was used before [1, 2, 3]
    assert cache.num_tokens == 6
    cache.store(list(range(11)), kv)  # longer than the whole budget: not kept
    assert cache.lookup(list(range(12))) == (None, None)
    with pytest.raises(ValueError, match="max_tokens"):
        PrefixCache(-1)


def test_prefix_cache_is_dropped_when_the_weights_change(sharp):
    model, _ = build_tiny_model(seed=1)
    cache = PrefixCache(max_tokens=100)
    cache.validate(model)
    cache.store([1, 2], [(torch.zeros(1, 2, 1), torch.zeros(1, 2, 1))])
    cache.validate(model)
    assert len(cache) == 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    cache.validate(model)
    assert len(cache) == 0


def test_each_token_of_a_ten_turn_episode_is_prefilled_once(sharp):
    """With the prefix cache, the tokens run through the model over a whole episode are its
    tokens minus the last; generate re-prefills every earlier turn (quadratic)."""
    model, tokenizer = sharp
    counts = {}
    for decoder in ("textgym", "transformers"):
        policy = HFPolicy(model, tokenizer, max_new_tokens=12, seed=0, decoder=decoder)
        counter = ForwardCounter(model)
        try:
            (trajectory,) = tictactoe_rollout(policy, [0], batch_size=1)
        finally:
            counter.handle.remove()
        counts[decoder] = (counter.tokens, len(trajectory.token_ids), trajectory.num_steps)
        if decoder == "textgym":  # 4-D slot masks: count with the engine's own counters
            stats = policy.engine.stats
            counts[decoder] = (stats.prefill_tokens + stats.row_steps, *counts[decoder][1:])
    tokens, length, turns = counts["textgym"]
    assert turns == 10, "the untrained model should play all ten turns"
    assert tokens == length - 1
    assert counts["transformers"][0] > 2 * tokens


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_cache_changes_no_token_and_no_logprob(sharp, temperature):
    """Episodes of different lengths in one batch (continuous batching mixes cached and new
    rows): the same ids and, within :data:`FP32_LOGPROB_TOL`, the same log-probs with and without
    the cache."""
    model, tokenizer = sharp
    runs = {}
    for tokens in (32768, 0):
        policy = HFPolicy(
            model,
            tokenizer,
            max_new_tokens=10,
            temperature=temperature,
            seed=4,
            batch_size=3,
            prefix_cache_tokens=tokens,
        )
        runs[tokens] = tictactoe_rollout(policy, list(range(5)), batch_size=3)
    for cached, plain in zip(runs[32768], runs[0], strict=True):
        assert cached.token_ids == plain.token_ids
        assert cached.token_logprobs == pytest.approx(
            plain.token_logprobs, rel=FP32_LOGPROB_TOL, abs=FP32_LOGPROB_TOL
        )


def test_greedy_tokens_and_sampled_logprobs_match_generate(sharp):
    """The new decoder against ``generate``: identical greedy trajectories; sampled tokens
    differ (another draw), but their log-probs equal a plain forward pass within 1e-5."""
    model, tokenizer = sharp
    greedy = {
        decoder: tictactoe_rollout(
            HFPolicy(model, tokenizer, max_new_tokens=10, temperature=0, decoder=decoder),
            [0, 1, 2],
            batch_size=3,
        )
        for decoder in ("textgym", "transformers")
    }
    for ours, reference in zip(greedy["textgym"], greedy["transformers"], strict=True):
        assert ours.token_ids == reference.token_ids
        assert ours.token_logprobs == pytest.approx(
            reference.token_logprobs, rel=FP32_LOGPROB_TOL, abs=FP32_LOGPROB_TOL
        )

    # The default-initialised model for the sampled part: its small activations round less
    # than the sharpened model's, so 1e-5 holds in float32.
    model, tokenizer = build_tiny_model(seed=0)
    policy = HFPolicy(model, tokenizer, max_new_tokens=10, temperature=0.8, top_p=0.9, seed=1)
    (trajectory,) = tictactoe_rollout(policy, [3], batch_size=1)
    ids = torch.tensor([trajectory.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]  # [L-1, V]: the distribution of token t + 1
    processed = process_logits(logits, temperature=0.8, top_k=0, top_p=0.9)
    expected = torch.log_softmax(processed, dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
    mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
    got = torch.tensor(trajectory.token_logprobs[1:])
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=0)


def test_sliding_window_layers_agree_with_an_uncached_pass():
    """A tiny Gemma 3 with a 6-token sliding window: a conversation three times longer than the
    window, extended over turns through the cache, gives the greedy tokens and log-probs of
    decoding every prompt from scratch."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=256,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.5)
    runs = {}
    for cache in (PrefixCache(1000), None):
        prompts = [[2, 5, 7], [2, 9]]
        turns = []
        for turn in range(3):
            rows = decode(
                model,
                prompts,
                max_new_tokens=5,
                end_ids=[],
                pad_id=0,
                process=None,
                prefix_cache=cache,
            )
            turns.append([(row.ids, row.logprobs) for row in rows])
            prompts = [p + row.ids + [10 + turn, 11 + turn] for p, row in zip(prompts, rows)]
        runs[cache is None] = turns
    assert len(prompts[0]) > 3 * config.sliding_window
    for cached, plain in zip(runs[False], runs[True], strict=True):
        for (ids_a, lp_a), (ids_b, lp_b) in zip(cached, plain, strict=True):
            assert ids_a == ids_b
            assert lp_a == pytest.approx(lp_b, abs=1e-5)


def test_the_lm_head_sees_a_contiguous_input_in_prefill():
    """torch's linear on a strided 3-D input with a frozen weight copies the weight per row
    (63 s instead of 0.07 s for Gemma's head at 28 rows), so prefill must hand the head a
    contiguous last-position slice, also for frozen models (LoRA bases, merged adapters)."""
    from textgym.policies.hf import HFPolicy
    from textgym.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    model.requires_grad_(False)
    seen = []
    model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: seen.append(args[0].is_contiguous())
    )
    policy = HFPolicy(model, tokenizer, max_new_tokens=3, seed=0)
    prompts = [[{"role": "user", "content": f"prompt number {i} is long"}] for i in range(3)]
    policy.act(prompts, [{}] * 3)
    assert seen and all(seen)
