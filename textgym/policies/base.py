"""The policy protocol: a batch of conversations in, a batch of completions out.

A conversation is a list of chat messages (``{"role": ..., "content": ...}``) built from the
env's ``info["system_prompt"]``, its observations (user turns) and the policy's earlier
completions (assistant turns). Scripted experts may also read the env's latest ``info`` (the
board, the gold answer); LLM policies ignore it except for ``info["tools"]``.

Model output is untrusted input. Its text is made safe once, where it enters textgym: building
a :class:`Completion` passes the text through :func:`sanitize_text`, so every completion of every
policy is valid Unicode that encodes as UTF-8 (a lone surrogate from a server's ``"\\ud800"``
JSON escape becomes U+FFFD). Nothing after the policy boundary (envs, the next request,
trajectories, JSONL files) has to check again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Completion",
    "Message",
    "Policy",
    "TokenPolicy",
    "conversation_start",
    "sanitize_text",
]

#: One chat message: ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``.
Message = dict[str, Any]


def sanitize_text(text: str) -> str:
    """Return ``text`` with everything that cannot be encoded as UTF-8 replaced by U+FFFD.

    In a Python ``str`` that is exactly the surrogate code points U+D800-U+DFFF: JSON's
    ``"\\ud800"`` escapes decode to them, and writing one to a UTF-8 file or sending it in the
    next request raises ``UnicodeEncodeError``. A high surrogate directly followed by a low one
    is joined into the character the pair stands for; every other surrogate becomes U+FFFD, one
    per code point. Text that already encodes is returned unchanged (the same object), in time
    linear in its length.

    Example:
        >>> sanitize_text("\\ud800<move>4</move>")
        '\\ufffd<move>4</move>'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


@dataclass
class Completion:
    """One policy output.

    Attributes:
        text: The completion text, given to ``env.step`` as the action. Always encodes as
            UTF-8: the constructor replaces lone surrogates with U+FFFD (:func:`sanitize_text`).
        prompt_ids: Token ids of the rendered prompt, ``[P]`` ints, where the backend has them.
        completion_ids: Generated token ids, ``[T]`` ints, where the backend has them.
        logprobs: Sampling log-probabilities (natural log) of ``completion_ids``, ``[T]`` floats.
        finish_reason: ``"stop"`` (end of turn or stop string) or ``"length"`` (hit the token
            limit); ``None`` for scripted policies.
    """

    text: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: Literal["stop", "length"] | None = None

    def __post_init__(self) -> None:
        """Sanitize ``text`` (the policy boundary; see the module docstring).

        Raises:
            TypeError: if ``text`` is not a ``str``.
        """
        if not isinstance(self.text, str):
            raise TypeError(
                f"Expected Completion.text to be a str, got {type(self.text).__name__}; "
                "a policy must return the completion's text"
            )
        self.text = sanitize_text(self.text)


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a batch of conversations to a batch of completions.

    ``act`` must return exactly one :class:`Completion` per conversation, in order. The text
    of model output is sanitized where it enters textgym, by :class:`Completion` itself: a lone
    surrogate (or anything else that cannot be encoded as UTF-8) becomes U+FFFD, so a policy
    need not (and a caller cannot forget to) clean it; see :func:`sanitize_text`.
    """

    #: A short name for logs and results (``"minimax"``, ``"hf"``).
    name: str
    #: Model tokens generated so far, over all calls (for tokens/s); ``None`` for a policy that
    #: generates no tokens (scripted, gold answers, a person).
    tokens_generated: int | None

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """Return one completion per conversation; ``infos[i]`` is the env's latest info."""
        ...


@runtime_checkable
class TokenPolicy(Policy, Protocol):
    """A policy that can also work on token ids (local models): token-in / token-out.

    :func:`textgym.rollout.rollout` uses these methods instead of :meth:`Policy.act` to build
    each episode's token sequence turn by turn (:mod:`textgym.tokens`), so a trainer scores
    exactly the ids that were sampled.
    """

    def prompt_ids(self, messages: Sequence[Message], info: Mapping[str, Any]) -> list[int]:
        """Ids ``[P]`` of the first prompt (messages plus the generation prompt)."""
        ...

    def continuation_ids(
        self,
        history: Sequence[Message],
        completion: Completion,
        new_messages: Sequence[Message],
        info: Mapping[str, Any],
    ) -> list[int]:
        """Ids ``[C]`` between a completion and the next generation (none generated)."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]]) -> list[Completion]:
        """One completion per prompt of token ids, with ``completion_ids`` and ``logprobs``."""
        ...


def conversation_start(observation: str, info: Mapping[str, Any]) -> list[Message]:
    """Build the first messages of an episode: the system prompt (if any) and the first observation."""
    messages: list[Message] = []
    system_prompt = info.get("system_prompt")
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": observation})
    return messages
