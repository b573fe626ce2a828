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

Message content is text
-----------------------
Content is untrusted: an email body the model wrote comes back in a tool response, and SFT data
may hold anything. A literal ``<|im_start|>`` or ``<end_of_turn>`` in a message's content is
therefore tokenized as the characters it is made of, never as the special token, so content
cannot forge a turn boundary. Only the chat template's own text yields special tokens. To do
that, every special-token string in content is replaced by a placeholder before the template is
rendered; the rendered text is split at the special tokens that are left (the template's), and
the text between them, content restored, is tokenized with ``split_special_tokens=True``. Text
between two special tokens is tokenized in one piece either way, so content without
special-token strings gets exactly the ids it got before (one tokenizer call, the fast path).
"Special" means the tokenizer's special tokens (``all_special_tokens`` and added tokens marked
``special``); added tokens that are not special (Qwen's ``<tool_call>``) are ordinary
vocabulary and match in content as they do in generated text. Tool schemas are rendered as
given (they come from the env, not the model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.types import Message

__all__ = ["ChatTokenizer", "TemplateError"]

# A string no chat template changes and no tokenizer treats specially.
_SENTINEL = "\u2063textgym-sentinel\u2063"
# Brackets a placeholder ``MARK index MARK`` for a special-token string found in content (a
# private-use character; a MARK in content is itself replaced by a placeholder).
_MARK = "\ue000"
_PLACEHOLDER = re.compile(f"{_MARK}([0-9]+){_MARK}")


def _trie_pattern(words: Sequence[str]) -> str:
    """A regular expression matching any of ``words``, longest first, built as a trie.

    A flat alternation of Gemma's 6,249 special tokens tries every one at each ``<`` (seconds on
    100k characters); the trie tries one branch per character, so a search is linear in the
    text times the longest word.
    """
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


class TemplateError(ValueError):
    """The chat template cannot be extended turn by turn (it rewrites earlier turns)."""


class ChatTokenizer:
    """Incremental chat tokenization with a ``transformers`` tokenizer and its chat template.

    Args:
        tokenizer: A ``transformers`` tokenizer with a chat template (see
            :func:`textgym.chat_templates.ensure_chat_template`).

    The tokenizer's special and added tokens are read once, at first use (reading them costs
    about 10 ms for Gemma's 6,000 added tokens, which made SFT tokenization 7 conversations a
    second): add tokens to the tokenizer before building its ``ChatTokenizer``.

    Raises:
        TemplateError: at use, when rendering a longer conversation does not extend the rendering
            of the shorter one (templates that drop or rewrite earlier turns, e.g. ones that strip
            earlier reasoning); such templates cannot give token-in / token-out trajectories.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "Expected a tokenizer with a chat template; call "
                "textgym.chat_templates.ensure_chat_template(tokenizer) first"
            )
        self.tokenizer = tokenizer
        self._specials: list[str] = []
        self._added: set[str] | None = None
        self._end_of_turn: tuple[str | None] | None = None
        self._special_index: dict[str, int] = {}
        self._special_re: re.Pattern[str] | None = None
        self._affixes: tuple[list[int], list[int]] | None = None

    # -- content as text ------------------------------------------------------------------
    def _special_pattern(self) -> re.Pattern[str]:
        """Matches the tokenizer's special-token strings and :data:`_MARK` (read once)."""
        if self._special_re is None:
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {})
            specials = {str(t) for t in decoder.values() if getattr(t, "special", False)}
            specials |= set(getattr(self.tokenizer, "all_special_tokens", ()))
            self._specials = [_MARK, *sorted(t for t in specials if t)]
            self._special_index = {token: i for i, token in enumerate(self._specials)}
            self._special_re = re.compile(_trie_pattern(self._specials))
        return self._special_re

    def _mask(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with each special-token string (and MARK) in content as a placeholder."""
        pattern = self._special_pattern()
        index = self._special_index
        masked = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str) and pattern.search(content):
                content = pattern.sub(lambda m: f"{_MARK}{index[m.group()]}{_MARK}", content)
                message = {**message, "content": content}
            masked.append(message)
        return masked

    def _unmask(self, text: str) -> str:
        return _PLACEHOLDER.sub(lambda m: self._specials[int(m.group(1))], text)

    def encode_content(self, text: str) -> list[int]:
        """Ids of message content: plain text, special-token strings in it included.

        ``"<|im_start|>"`` gives the ids of its characters, never the special token's id; added
        tokens that are not special still match (see the module docstring).
        """
        return list(
            self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        )

    def _special_ids_around(self) -> tuple[list[int], list[int]]:
        """The ids the tokenizer adds before and after a text (``[BOS]`` and ``[]`` for Gemma)."""
        if self._affixes is None:
            bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
            full = self.tokenizer("a", add_special_tokens=True)["input_ids"]
            self._affixes = ([], [])
            for i in range(len(full) - len(bare) + 1):
                if full[i : i + len(bare)] == bare:
                    self._affixes = (list(full[:i]), list(full[i + len(bare) :]))
                    break
        return self._affixes

    def _encode_rendered(self, masked: str, *, first: bool) -> list[int]:
        """Ids of template text rendered from :meth:`_mask`-ed messages (content as text)."""
        if _MARK not in masked:
            return self.encode_text(masked, first=first)
        ids: list[int] = []
        position = 0
        for match in self._special_pattern().finditer(masked):
            if match.group() == _MARK:  # a placeholder's bracket: content, not a split point
                continue
            if match.start() > position:
                ids += self.encode_content(self._unmask(masked[position : match.start()]))
            ids.append(int(self.tokenizer.convert_tokens_to_ids(match.group())))
            position = match.end()
        if position < len(masked):
            ids += self.encode_content(self._unmask(masked[position:]))
        bos = self.tokenizer.bos_token
        if first and not (bos and masked.startswith(bos)):
            before, after = self._special_ids_around()
            ids = before + ids + after
        return ids

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
        """Token ids of a piece of template text: special-token strings are special tokens.

        Use :meth:`encode` for a conversation: it keeps message content plain text.

        Args:
            text: Template text.
            first: Whether the text starts the sequence; only then may the tokenizer add its
                special prefix (BOS), and only if the template did not already write one.
        """
        bos = self.tokenizer.bos_token
        add_special = first and not (bos and text.startswith(bos))
        return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

    def encode(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool,
    ) -> list[int]:
        """Ids of a whole conversation rendered by the template, message content as plain text.

        Equal to ``encode_text(render(...), first=True)`` unless some content holds a
        special-token string, which this tokenizes as text (see the module docstring).

        Returns:
            ``[L]`` token ids.
        """
        masked = self.render(
            self._mask(messages), tools=tools, add_generation_prompt=add_generation_prompt
        )
        return self._encode_rendered(masked, first=True)

    # -- the two pieces of a token-in / token-out conversation ----------------------------
    def prompt(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """Ids of the first prompt: ``messages`` rendered with the generation prompt.

        Returns:
            ``[P]`` token ids; message content is tokenized as plain text.
        """
        return self.encode(messages, tools=tools, add_generation_prompt=True)

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
            ``[C]`` token ids, none of them generated by the policy; the content of
            ``new_messages`` is tokenized as plain text.

        Raises:
            TemplateError: the template does not render the conversation as an extension of
                its earlier turns.
        """
        history, new_messages = self._mask(history), self._mask(new_messages)
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
        return self._encode_rendered(closing + after[len(closed) :], first=False)

    def end_of_turn_token(self) -> str | None:
        """The special token that opens the template's closing of an assistant turn, if any
        (``<|im_end|>`` for ChatML, ``<end_of_turn>`` for Gemma): what a model must generate to
        end its turn (found once)."""
        if self._end_of_turn is None:
            self._end_of_turn = (self._find_end_of_turn(),)
        return self._end_of_turn[0]

    def _find_end_of_turn(self) -> str | None:
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
            ``[T]`` token ids; ``content`` is tokenized as plain text (:meth:`encode_content`).
        """
        ids = self.encode_content(content)
        end = self.end_of_turn_token()
        if end is not None:
            ids.append(int(self.tokenizer.convert_tokens_to_ids(end)))
        return ids

    def _special_tokens(self) -> set[str]:
        """The special and added tokens' strings (read once)."""
        if self._added is None:
            self._added = set(getattr(self.tokenizer, "all_special_tokens", ()))
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {})
            self._added |= {str(t) for t in decoder.values()}
        return self._added

    def _drop_generated_end(self, closing: str, completion_ids: Sequence[int]) -> str:
        """Remove from ``closing`` the end-of-turn token the completion already generated."""
        if not completion_ids:
            return closing
        last = self.tokenizer.convert_ids_to_tokens(int(completion_ids[-1]))
        if isinstance(last, str) and last in self._special_tokens() and closing.startswith(last):
            return closing[len(last) :]
        return closing
