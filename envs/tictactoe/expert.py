"""The tic-tac-toe minimax expert: a scripted policy that never loses.

It lives beside the env whose rules it plays (:mod:`.opponent` holds the search); the policy name
table (:func:`textgym.builder.make_policy`, name ``"minimax"``) lists it from the assembly layer,
so the core policies stay game-agnostic (``docs/architecture.md``).

The policy reads the board from the env's ``info`` (``info["board"]``, ``info["legal_moves"]``),
not from the observation text, and answers in the task's format:
``<think>...</think><move>N</move>``, or only ``<move>N</move>`` with ``reasoning=False`` (short
SFT targets for small models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from textgym.envs.tictactoe.opponent import best_moves
from textgym.policies.base import Completion, Message

__all__ = ["MinimaxPolicy"]


class MinimaxPolicy:
    """Plays an optimal move, chosen uniformly among optimal moves (never loses).

    Args:
        seed: Seed of the tie-breaking generator.
        reasoning: Write a ``<think>`` block (the optimal moves) before the move.

    Raises:
        KeyError: from ``act``, for an info without ``board`` and ``legal_moves`` (not a
            TicTacToe env).
        ValueError: from ``act``, for a finished board (no legal move).
    """

    name = "minimax"
    tokens_generated = None  # generates no model tokens

    def __init__(self, seed: int | None = None, reasoning: bool = True):
        self._rng = np.random.default_rng(seed)
        self.reasoning = bool(reasoning)

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """One completion per info: an optimal move, with the optimal moves as reasoning."""
        out = []
        for info in infos:
            if "board" not in info or "legal_moves" not in info:
                raise KeyError(
                    "MinimaxPolicy needs info['board'] and info['legal_moves'] "
                    f"(a TicTacToe env); got info keys {sorted(info)}"
                )
            board = info["board"]
            if not info["legal_moves"]:
                raise ValueError(f"MinimaxPolicy was asked to move on a finished board {board!r}")
            candidates = best_moves(board)
            move = int(candidates[self._rng.integers(len(candidates))])
            think = (
                f"<think>Optimal moves here: {', '.join(map(str, candidates))}.</think>"
                if self.reasoning
                else ""
            )
            out.append(Completion(f"{think}<move>{move}</move>"))
        return out
