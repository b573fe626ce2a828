"""Scripted tic-tac-toe experts that answer with well-formed completions.

They read the board from the env's ``info`` (``info["board"]``, ``info["legal_moves"]``), not
from the observation text, and answer in the task's format: ``<think>...</think><move>N</move>``.
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


class RandomPolicy:
    """Plays a uniformly random legal move.

    Args:
        seed: Seed of the policy's own generator.
    """

    name = "random"

    def __init__(self, seed: int | None = None):
        self._rng = np.random.default_rng(seed)

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for info in infos:
            _, moves = _board_of(info)
            if not moves:
                raise ValueError("RandomPolicy was asked to move on a finished board")
            move = int(moves[self._rng.integers(len(moves))])
            out.append(Completion(f"<think>I pick a random free cell.</think><move>{move}</move>"))
        return out


class MinimaxPolicy:
    """Plays an optimal move, chosen uniformly among optimal moves (never loses).

    Args:
        seed: Seed of the tie-breaking generator.
    """

    name = "minimax"

    def __init__(self, seed: int | None = None):
        self._rng = np.random.default_rng(seed)

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for info in infos:
            board, _ = _board_of(info)
            candidates = best_moves(board)
            move = int(candidates[self._rng.integers(len(candidates))])
            out.append(
                Completion(
                    f"<think>Optimal moves here: {', '.join(map(str, candidates))}.</think>"
                    f"<move>{move}</move>"
                )
            )
        return out
