"""The ``tiny`` model: a small randomly initialised Llama-style model with a byte-level
tokenizer, built in-process in milliseconds (tests, CPU training from scratch, smoke runs);
``textgym.models.load_model("tiny")`` builds it.
"""

from __future__ import annotations

from typing import Any

from textgym.chat_templates import DEFAULT_CHAT_TEMPLATE
from textgym.model_files import require_llm

__all__ = ["build_tiny_model"]

# Sizes of the tiny model: small enough to build in milliseconds and train on two CPU cores.
_TINY_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}
_TINY_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|pad|>")  # ids 256, 257, 258


def _byte_to_char() -> dict[int, str]:
    """The byte -> printable character map of GPT-2's byte-level BPE (Radford et al., 2019).

    Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, soft hyphen)
    map to ``chr(256)``, ``chr(257)``, ... in byte order, which is the alphabet that the
    ``tokenizers`` ByteLevel pre-tokenizer emits and its decoder reads back.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)}
    printable |= set(range(ord("®"), ord("ÿ") + 1))
    mapping: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + shifted)
            shifted += 1
    return mapping


def _build_tiny_tokenizer() -> Any:
    """A byte-level tokenizer: token id ``b`` is byte ``b`` (0-255), then the special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: byte for byte, char in _byte_to_char().items()}
    if set(vocab) != set(pre_tokenizers.ByteLevel.alphabet()):
        raise RuntimeError("The byte map does not match the tokenizers ByteLevel alphabet")
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: one token per byte
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in _TINY_SPECIAL_TOKENS]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        extra_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=_TINY_CONFIG["max_position_embeddings"],
    )
    tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(seed: int = 0) -> tuple[Any, Any]:
    """Build a small randomly initialised Llama-style model and its byte-level tokenizer.

    The model is a ``LlamaForCausalLM`` with hidden size 64, 2 layers, 4 attention heads, MLP
    width 128 and tied embeddings (98,816 parameters); the vocabulary is the 256 bytes plus
    ``<|im_start|>`` (256), ``<|im_end|>`` (257, EOS) and ``<|pad|>`` (258). The tokenizer
    round-trips any Unicode text and carries the ChatML
    :data:`~textgym.chat_templates.DEFAULT_CHAT_TEMPLATE`. Weights use ``transformers``' default
    initialisation (normal, std 0.02) drawn from a torch RNG seeded with ``seed``, without
    touching the global RNG state.

    Args:
        seed: Seed of the weight initialisation; equal seeds give equal weights.

    Returns:
        ``(model, tokenizer)``, the model in float32 on the CPU, in eval mode.

    Raises:
        ImportError: torch or transformers is not installed.
    """
    require_llm()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **_TINY_CONFIG,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    model.eval()
    return model, tokenizer
