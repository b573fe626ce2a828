"""Token-in / token-out conversations: build a multi-turn token sequence turn by turn.

A policy-gradient trainer must score exactly the tokens the policy sampled. Re-rendering the
whole conversation with the chat template at every turn and tokenizing it again can give
*different* ids for earlier turns (a completion sampled as ``"4", "<"`` may re-tokenize as
``"4<"``; Gemma's template trims whitespace the model generated). :class:`ChatTokenizer`
therefore keeps the ids of every earlier turn as they were and only tokenizes what is new:

* :meth:`ChatTokenizer.prompt` renders the first turn (system prompt, first observation,
  generation prompt) once;
* after each completion, :meth:`ChatTokenizer.continuation` tokenizes only the text that follows
  it: the rest of the assistant turn's closing (for ChatML ``"<|im_end|>\\n"``, for Gemma
  ``"<end_of_turn>\\n"``, minus the end-of-turn token when the model generated it), the new
  messages, and the next generation prompt.

The pieces come from the chat template itself: the template is rendered with a sentinel in place
of the assistant content, so the closing text never depends on what the model wrote.

Where the ids equal the tokenization of the whole conversation, and where not
------------------------------------------------------------------------------
For the ``tiny`` (byte-level, ChatML) and ``gemma-3-270m`` tokenizers, when each completion's ids
are the tokenizer's own encoding of its text followed by the end-of-turn token, the incremental
prompt of every turn equals ``tokenizer(apply_chat_template(conversation,
add_generation_prompt=True))`` token for token (``tests/test_tokens.py`` checks both). They
differ, by design, exactly where the sampled ids are not what re-rendering would produce:

1. **Non-canonical tokenization**: the model sampled a token split of its text that the
   tokenizer would not produce (impossible for the byte-level ``tiny``, possible for Gemma's BPE).
2. **Trimmed whitespace**: Gemma's template trims each message; a completion that begins or
   ends with whitespace keeps it here.
3. **Stop strings**: the completion's last token may carry characters after the stop string; the
   env saw the text cut after the stop string, the ids keep the whole token.
4. **Other end tokens**: a completion that ended with an EOS that is not the template's
   end-of-turn token (Gemma's ``<eos>``) keeps it, and the template's closing follows it.

In all four cases this module keeps what the policy generated, which is what the log-probs
belong to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ChatTokenizer", "TemplateError"]

Message = dict[str, Any]

# A string no chat template changes and no tokenizer treats specially.
_SENTINEL = "\u2063textgym-sentinel\u2063"


class TemplateError(ValueError):
    """The chat template cannot be extended turn by turn (it rewrites earlier turns)."""


class ChatTokenizer:
    """Incremental chat tokenization with a ``transformers`` tokenizer and its chat template.

    Args:
        tokenizer: A ``transformers`` tokenizer with a chat template (see
            :func:`textgym.models.ensure_chat_template`).

    Raises:
        TemplateError: at use, when rendering a longer conversation does not extend the rendering
            of the shorter one (templates that drop or rewrite earlier turns, e.g. ones that strip
            earlier reasoning); such templates cannot give token-in / token-out trajectories.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "Expected a tokenizer with a chat template; call "
                "textgym.models.ensure_chat_template(tokenizer) first"
            )
        self.tokenizer = tokenizer

    # -- rendering ------------------------------------------------------------------------
    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool,
    ) -> str:
        """The chat template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def encode_text(self, text: str, *, first: bool) -> list[int]:
        """Token ids of a piece of rendered text.

        Args:
            text: Template text.
            first: Whether the text starts the sequence; only then may the tokenizer add its
                special prefix (BOS), and only if the template did not already write one.
        """
        bos = self.tokenizer.bos_token
        add_special = first and not (bos and text.startswith(bos))
        return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

    # -- the two pieces of a token-in / token-out conversation ----------------------------
    def prompt(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """Ids of the first prompt: ``messages`` rendered with the generation prompt.

        Returns:
            ``[P]`` token ids.
        """
        return self.encode_text(
            self.render(messages, tools=tools, add_generation_prompt=True), first=True
        )

    def continuation(
        self,
        history: Sequence[Message],
        completion_ids: Sequence[int],
        new_messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Ids that follow a completion: the end of the assistant turn, new messages, next prompt.

        Args:
            history: The conversation the completion answered (its prompt), without the
                assistant message.
            completion_ids: The completion's generated ids ``[T]``, as sampled.
            new_messages: Messages after the assistant turn (the env's next observation).
            tools: Tool schemas given to the template, the same at every turn.
            add_generation_prompt: End with the next assistant turn's opening.

        Returns:
            ``[C]`` token ids, none of them generated by the policy.

        Raises:
            TemplateError: the template does not render the conversation as an extension of
                its earlier turns.
        """
        before = self.render(history, tools=tools, add_generation_prompt=True)
        placeholder = [*history, {"role": "assistant", "content": _SENTINEL}]
        closed = self.render(placeholder, tools=tools, add_generation_prompt=False)
        after = self.render(
            [*placeholder, *new_messages], tools=tools, add_generation_prompt=add_generation_prompt
        )
        position = closed.rfind(_SENTINEL)
        if position < 0 or closed[:position] != before:
            raise TemplateError(
                "The chat template does not render an assistant turn right after the generation "
                "prompt of the same conversation, so turns cannot be appended token by token; "
                "use a template whose rendering of a longer conversation extends the shorter one"
            )
        if not after.startswith(closed):
            raise TemplateError(
                "The chat template rewrites earlier turns when a message is added (the longer "
                "conversation does not start with the shorter one's text); use a template whose "
                "rendering only appends"
            )
        closing = closed[position + len(_SENTINEL) :]
        closing = self._drop_generated_end(closing, completion_ids)
        return self.encode_text(closing + after[len(closed) :], first=False)

    def end_of_turn_token(self) -> str | None:
        """The special token that opens the template's closing of an assistant turn, if any
        (``<|im_end|>`` for ChatML, ``<end_of_turn>`` for Gemma): what a model must generate to
        end its turn."""
        history = [{"role": "user", "content": "x"}]
        closed = self.render(
            [*history, {"role": "assistant", "content": _SENTINEL}], add_generation_prompt=False
        )
        closing = closed[closed.rfind(_SENTINEL) + len(_SENTINEL) :]
        specials = sorted(self._special_tokens(), key=len, reverse=True)
        return next((t for t in specials if t and closing.startswith(t)), None)

    def assistant_ids(self, content: str) -> list[int]:
        """Ids a model should generate for an assistant turn: the content, then the
        end-of-turn token (SFT targets built the way a completion is sampled).

        Returns:
            ``[T]`` token ids.
        """
        ids = self.encode_text(content, first=False)
        end = self.end_of_turn_token()
        if end is not None:
            ids.append(int(self.tokenizer.convert_tokens_to_ids(end)))
        return ids

    def _special_tokens(self) -> set[str]:
        special = set(getattr(self.tokenizer, "all_special_tokens", ()))
        special |= {str(t) for t in getattr(self.tokenizer, "added_tokens_decoder", {}).values()}
        return special

    def _drop_generated_end(self, closing: str, completion_ids: Sequence[int]) -> str:
        """Remove from ``closing`` the end-of-turn token the completion already generated."""
        if not completion_ids:
            return closing
        last = self.tokenizer.convert_ids_to_tokens(int(completion_ids[-1]))
        if isinstance(last, str) and last in self._special_tokens() and closing.startswith(last):
            return closing[len(last) :]
        return closing
