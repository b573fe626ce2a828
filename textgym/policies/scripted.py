"""Scripted tic-tac-toe experts that answer with well-formed completions.

They read the board from the env's ``info`` (``info["board"]``, ``info["legal_moves"]``), not
from the observation text, and answer in the task's format: ``<think>...</think><move>N</move>``,
or only ``<move>N</move>`` with ``reasoning=False`` (short SFT targets for small models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from textgym.envs.tictactoe.opponent import best_moves
from textgym.policies.base import Completion, Message

__all__ = ["MinimaxPolicy", "RandomPolicy"]


def _board_of(info: Mapping[str, Any]) -> tuple[str, list[int]]:
    if "board" not in info or "legal_moves" not in info:
        raise KeyError(
            "Scripted tic-tac-toe policies need info['board'] and info['legal_moves'] "
            f"(a TicTacToe env); got info keys {sorted(info)}"
        )
    return info["board"], list(info["legal_moves"])


class _TicTacToeExpert:
    """Shared loop of the scripted experts: one well-formed completion per info."""

    name = "scripted"

    def __init__(self, seed: int | None = None, reasoning: bool = True):
        self._rng = np.random.default_rng(seed)
        self.reasoning = bool(reasoning)

    def choose(self, board: str, legal: list[int]) -> tuple[int, str]:
        """Return ``(move, reasoning)`` for a board with at least one legal move."""
        raise NotImplementedError

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for info in infos:
            board, legal = _board_of(info)
            if not legal:
                raise ValueError(
                    f"{type(self).__name__} was asked to move on a finished board {board!r}"
                )
            move, reasoning = self.choose(board, legal)
            think = f"<think>{reasoning}</think>" if self.reasoning else ""
            out.append(Completion(f"{think}<move>{move}</move>"))
        return out


class RandomPolicy(_TicTacToeExpert):
    """Plays a uniformly random legal move.

    Args:
        seed: Seed of the policy's own generator.
        reasoning: Write a ``<think>`` block before the move.
    """

    name = "random"

    def choose(self, board: str, legal: list[int]) -> tuple[int, str]:
        return int(legal[self._rng.integers(len(legal))]), "I pick a random free cell."


class MinimaxPolicy(_TicTacToeExpert):
    """Plays an optimal move, chosen uniformly among optimal moves (never loses).

    Args:
        seed: Seed of the tie-breaking generator.
        reasoning: Write a ``<think>`` block (the optimal moves) before the move.
    """

    name = "minimax"

    def choose(self, board: str, legal: list[int]) -> tuple[int, str]:
        candidates = best_moves(board)
        move = int(candidates[self._rng.integers(len(candidates))])
        return move, f"Optimal moves here: {', '.join(map(str, candidates))}."
