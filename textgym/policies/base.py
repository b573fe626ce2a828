"""The policy protocol: a batch of conversations in, a batch of completions out.

A conversation is a list of chat messages (``{"role": ..., "content": ...}``) built from the
env's ``info["system_prompt"]``, its observations (user turns) and the policy's earlier
completions (assistant turns). Scripted experts may also read the env's latest ``info`` (the
board, the gold answer); LLM policies ignore it except for ``info["tools"]``.

Completions are :class:`textgym.types.Completion`, whose constructor makes model output safe
text (the policy boundary).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from textgym.types import Completion, Message

__all__ = ["Policy", "TokenPolicy", "conversation_start"]


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a batch of conversations to a batch of completions.

    ``act`` must return exactly one :class:`Completion` per conversation, in order. The text
    of model output is sanitized where it enters textgym, by :class:`Completion` itself: a lone
    surrogate (or anything else that cannot be encoded as UTF-8) becomes U+FFFD, so a policy
    need not (and a caller cannot forget to) clean it; see :func:`textgym.types.sanitize_text`.
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
    """Build the first messages of an episode: the system prompt (if any), the reset info's
    ``history`` (the earlier turns of an episode that starts part-way through, e.g.
    TicTacToe-v0's ``moves`` reset option; a prompt, never trained on by GRPO) and the first
    observation."""
    messages: list[Message] = []
    system_prompt = info.get("system_prompt")
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.extend(dict(message) for message in info.get("history", ()))
    messages.append({"role": "user", "content": observation})
    return messages
