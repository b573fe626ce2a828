"""The random baseline of every env (the tic-tac-toe minimax expert lives beside its env:
:class:`textgym.envs.tictactoe.MinimaxPolicy`).

On tic-tac-toe it reads ``info["legal_moves"]``, not the observation text, and answers in the
task's format: ``<think>...</think><move>N</move>``, or only ``<move>N</move>`` with
``reasoning=False`` (short SFT targets for small models). :class:`RandomPolicy` also plays any
env that declares its action grammar (:attr:`textgym.TextEnv.random_action`) and any tool env (a random tool call with
schema-valid arguments, :func:`textgym.policies.random_actions.random_tool_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from textgym.policies.random_actions import random_tool_call
from textgym.types import Completion, Message

__all__ = ["RandomPolicy"]


class RandomPolicy:
    """A random baseline for every env: a random action from the env's action grammar.

    For each info, in this order:

    1. ``sample_action`` given (the env's :attr:`textgym.TextEnv.random_action`): what it
       draws from the latest observation, the info and the policy's generator (GSM8K-v0: a
       random integer as ``#### N``; ReverseText-v0: the text's characters shuffled, in the
       answer tags);
    2. ``info["legal_moves"]`` (TicTacToe-v0): a uniformly random legal move;
    3. ``info["tools"]`` not empty (EmailToolUse-v1, Workplace-v1): one call of a uniformly
       random tool with arguments drawn to validate against its JSON schema
       (:func:`~textgym.policies.random_actions.random_tool_call`).

    Every draw comes from the policy's own generator, seeded by ``seed``: the same seed and the
    same episodes give the same completions.

    Args:
        seed: Seed of the policy's own generator.
        reasoning: Tic-tac-toe: write a ``<think>`` block before the move.
        sample_action: ``(observation, info, rng) -> completion``, the env's action grammar
            (:data:`textgym.core.RandomAction`), or ``None``.

    Raises:
        KeyError: from ``act``, for an info it has no way to answer (no ``sample_action``, no
            ``legal_moves``, no ``tools``).
    """

    name = "random"
    tokens_generated = None  # generates no model tokens

    def __init__(
        self,
        seed: int | None = None,
        reasoning: bool = True,
        sample_action: Callable[[str, Mapping[str, Any], np.random.Generator], str] | None = None,
    ):
        self._rng = np.random.default_rng(seed)
        self.reasoning = bool(reasoning)
        self.sample_action = sample_action

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for conversation, info in zip(conversations, infos, strict=True):
            if self.sample_action is not None:
                observation = str(conversation[-1]["content"]) if conversation else ""
                out.append(Completion(self.sample_action(observation, info, self._rng)))
            elif "legal_moves" in info:
                out.append(Completion(self._random_move(info)))
            elif info.get("tools"):
                out.append(Completion(random_tool_call(info["tools"], self._rng)))
            else:
                raise KeyError(
                    "The random policy draws from the env's action grammar: "
                    "TextEnv.random_action, info['legal_moves'] or info['tools']; the env "
                    f"declares no random_action and its info has keys {sorted(info)}"
                )
        return out

    def _random_move(self, info: Mapping[str, Any]) -> str:
        legal = list(info["legal_moves"])
        if not legal:
            raise ValueError(
                f"RandomPolicy was asked to move on a finished board {info.get('board')!r}"
            )
        move = int(legal[self._rng.integers(len(legal))])
        think = "<think>I pick a random free cell.</think>" if self.reasoning else ""
        return f"{think}<move>{move}</move>"
