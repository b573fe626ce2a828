"""A person at the terminal as the policy (used by ``textgym play``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from textgym.types import Completion, Message

__all__ = ["HumanPolicy"]


class HumanPolicy:
    """Shows each observation and reads the action from a line of input.

    Args:
        action_template: Format string applied to a reply that is a bare integer, e.g.
            ``"<move>{}</move>"`` so that typing ``4`` plays cell 4. Other replies are sent as
            typed. ``None`` sends every reply as typed.
        input_fn: Reads one line (default: the builtin :func:`input`, looked up when the
            policy is built, so a test can replace ``builtins.input``); raises ``EOFError`` at
            end of input.
        output: Where observations are written (default ``sys.stdout``).

    Raises:
        EOFError: from ``act`` when the input ends, so a session can be stopped with Ctrl-D.
    """

    name = "human"
    tokens_generated = None  # generates no model tokens

    def __init__(
        self,
        action_template: str | None = None,
        input_fn: Callable[[str], str] | None = None,
        output: TextIO | None = None,
    ):
        self.action_template = action_template
        self.input_fn = input_fn if input_fn is not None else input
        self.output = output if output is not None else sys.stdout

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for messages in conversations:
            print(f"\n{messages[-1]['content']}\n", file=self.output, flush=True)
            reply = self.input_fn("> ").strip()
            if self.action_template is not None and reply.lstrip("+-").isdigit():
                reply = self.action_template.format(reply)
            out.append(Completion(reply))
        return out
