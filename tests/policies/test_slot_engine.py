"""The decode engine's GPU path run on the CPU: power-of-two buckets compacted at halving, host
reads every few steps, stop strings learned as token sequences. It must decode exactly what the
CPU path does (CUDA graphs themselves need a GPU: tests/test_cuda.py)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402

pytestmark = pytest.mark.llm

GPU_PATH = {"bucketed": True, "sync_every": 4, "cuda_graphs": False}


def _play(policy, seeds):
    make = lambda: gym.make("textgym/TicTacToe-v0", prompt_style="compact")  # noqa: E731
    return rollout(make, policy, seeds, batch_size=5)


def test_bucketed_lazy_path_decodes_what_the_cpu_path_does(sharp):
    """Five greedy episodes of different lengths (rows finish at different steps, so the
    bucketed path pads to 8 rows and compacts to 4, 2, 1), stop strings and the prefix cache.
    (Sampled draws depend on the batch layout, so only greedy decoding is compared.)"""
    temperature = 0.0
    model, tokenizer = sharp
    runs = {}
    for name, options in (("cpu", {}), ("gpu-path", GPU_PATH)):
        policy = HFPolicy(
            model,
            tokenizer,
            max_new_tokens=10,
            temperature=temperature,
            seed=3,
            batch_size=5,
            stop=["</move>", "3"],
            engine_options=options,
        )
        runs[name] = (_play(policy, list(range(5))), policy.engine)
    (cpu, cpu_engine), (gpu, gpu_engine) = runs["cpu"], runs["gpu-path"]
    for ours, reference in zip(gpu, cpu, strict=True):
        assert ours.token_ids == reference.token_ids
        assert ours.token_logprobs == pytest.approx(reference.token_logprobs, abs=1e-4, rel=1e-4)
        assert [m["content"] for m in ours.messages] == [m["content"] for m in reference.messages]
    assert gpu_engine.stats.host_syncs < cpu_engine.stats.host_syncs
    assert gpu_engine.stats.compactions <= cpu_engine.stats.compactions


def test_stop_strings_are_learned_as_token_sequences(sharp):
    """A row whose text reaches a stop string teaches the engine the tokens that completed it;
    later rows ending with those tokens stop on the device, with the same completions."""
    model, tokenizer = sharp
    stop = ["e", "a", "o", "t", "i", "n", "s", " "]
    policy = HFPolicy(
        model, tokenizer, max_new_tokens=12, temperature=0, stop=stop, engine_options=GPU_PATH
    )
    prompts = [[{"role": "user", "content": f"say something {i}"}] for i in range(6)]
    first = policy.act(prompts, [{}] * 6)
    stopped = [c for c in first if c.finish_reason == "stop" and c.text[-1:] in stop]
    assert stopped, [c.text for c in first]
    learned = policy.engine.stop_sequences
    assert learned
    for sequence in learned:
        text = tokenizer.decode(list(sequence), skip_special_tokens=True)
        assert any(s in text for s in stop)
    second = policy.act(prompts, [{}] * 6)
    assert [c.completion_ids for c in second] == [c.completion_ids for c in first]
    assert [c.text for c in second] == [c.text for c in first]


def test_sampled_logprobs_on_the_bucketed_path_match_a_forward_pass():
    """Sampled on the bucketed path: each recorded log-prob is the token's log-probability
    under a plain forward pass of the whole episode (the default-initialised tiny model, whose
    small activations keep float32 rounding far below the tolerance)."""
    from textgym.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    policy = HFPolicy(
        model, tokenizer, max_new_tokens=10, seed=1, batch_size=5, engine_options=GPU_PATH
    )
    for trajectory in _play(policy, list(range(5))):
        ids = torch.tensor([trajectory.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1]  # [L-1, V]
        expected = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
        mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
        got = torch.tensor(trajectory.token_logprobs[1:])
        torch.testing.assert_close(got[mask], expected[mask], atol=1e-4, rtol=0)
