"""The chat types every layer shares: a chat :data:`Message` and a policy's :class:`Completion`.

The bottom of the package: it imports nothing from textgym, so the token accounting
(:mod:`textgym.tokens`), the tool-call formats (:mod:`textgym.toolformat`) and the policies
(:mod:`textgym.policies.base`) all read these names from here.

Model output is untrusted input. Its text is made safe once, where it enters textgym: building
a :class:`Completion` passes the text through :func:`sanitize_text`, so every completion of every
policy is valid Unicode that encodes as UTF-8 (a lone surrogate from a server's ``"\\ud800"``
JSON escape becomes U+FFFD). Nothing after the policy boundary (envs, the next request,
trajectories, JSONL files) has to check again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Completion", "Message", "sanitize_text"]

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
