"""Chat templates and end-of-turn tokens: how a conversation becomes a prompt for a local model.

:func:`ensure_chat_template` gives a tokenizer that ships no chat template one
(:data:`GEMMA_CHAT_TEMPLATE` for a Gemma vocabulary, ChatML :data:`DEFAULT_CHAT_TEMPLATE`
otherwise), and :func:`stop_token_ids` lists the ids that end an assistant turn. Both need only
the tokenizer (and the model's generation config), never torch.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "GEMMA_CHAT_TEMPLATE",
    "ensure_chat_template",
    "stop_token_ids",
]

#: ChatML (``<|im_start|>role\n...<|im_end|>\n``), the default for tokenizers without a template.
#: Roles pass through unchanged; the generation prompt is ``<|im_start|>assistant\n``.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] or '' }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Gemma's turn format, as in the template of Google's instruction-tuned Gemma 3 checkpoints:
#: ``<bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n``. Gemma has no system
#: role: the system prompt plus a blank line is prepended to the first turn. ``assistant``
#: becomes ``model``; every other role (``user``, ``tool``) becomes ``user``. Contents are
#: stripped of surrounding whitespace, as Gemma's template does.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = (messages[0]['content'] or '') ~ '\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
    "{{ (prefix if loop.first else '') ~ ((message['content'] or '') | trim) }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if not turns and prefix %}"
    "<start_of_turn>user\n{{ prefix | trim }}<end_of_turn>\n"
    "{% endif %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# Tokens that close an assistant turn in common chat formats; each one the vocabulary holds as a
# single token stops generation (Gemma, ChatML/Qwen, Llama 3, Phi-3).
_END_OF_TURN_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>")


def _has_token(tokenizer: Any, token: str) -> bool:
    """Whether ``token`` is a single entry of the tokenizer's vocabulary (not split, not unk)."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    return token_id is not None and token_id != tokenizer.unk_token_id


def _is_gemma(tokenizer: Any) -> bool:
    return _has_token(tokenizer, "<start_of_turn>") and _has_token(tokenizer, "<end_of_turn>")


def ensure_chat_template(tokenizer: Any) -> str:
    """Give ``tokenizer`` a chat template when it has none; return the template in use.

    Gemma vocabularies (holding ``<start_of_turn>`` and ``<end_of_turn>``) get
    :data:`GEMMA_CHAT_TEMPLATE`, all others :data:`DEFAULT_CHAT_TEMPLATE` (ChatML). A template the
    tokenizer already has is kept.

    Args:
        tokenizer: A ``transformers`` tokenizer; modified in place.

    Returns:
        The Jinja chat template now set on the tokenizer.
    """
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = (
            GEMMA_CHAT_TEMPLATE if _is_gemma(tokenizer) else DEFAULT_CHAT_TEMPLATE
        )
    return tokenizer.chat_template


def stop_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Token ids that end a completion: EOS ids plus the chat format's end-of-turn token.

    Collects ``tokenizer.eos_token_id``, ``model.generation_config.eos_token_id`` (an int or a
    list) and every end-of-turn token of Gemma (``<end_of_turn>``), ChatML (``<|im_end|>``),
    Llama 3 (``<|eot_id|>``) and Phi-3 (``<|end|>``) that the vocabulary holds as one token.

    Args:
        tokenizer: A ``transformers`` tokenizer.
        model: Optional model whose generation config adds its EOS ids.

    Returns:
        Distinct token ids, in order of discovery; may be empty for a tokenizer with no EOS.
    """
    found: list[int] = []
    candidates: list[Any] = [tokenizer.eos_token_id]
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    candidates.extend(eos if isinstance(eos, (list, tuple)) else [eos])
    candidates.extend(
        tokenizer.convert_tokens_to_ids(token)
        for token in _END_OF_TURN_TOKENS
        if _has_token(tokenizer, token)
    )
    for token_id in candidates:
        if token_id is not None and int(token_id) not in found:
            found.append(int(token_id))
    return found
