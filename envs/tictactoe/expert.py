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

from textgym.envs.tictactoe.opponent import OPTIMAL_STYLES, style_moves
from textgym.types import Completion, Message

__all__ = ["TIE_BREAKS", "MinimaxPolicy"]


#: How :class:`MinimaxPolicy` picks among its style's candidate moves.
TIE_BREAKS = ("uniform", "first")


class MinimaxPolicy:
    """Plays an optimal move, chosen among the candidates of an optimal style (never loses).

    Args:
        seed: Seed of the tie-breaking generator.
        reasoning: Write a ``<think>`` block (the optimal moves) before the move.
        style: The candidate moves, one of :data:`.opponent.OPTIMAL_STYLES` (the styles that
            never lose): ``"minimax"`` (default; every optimal move, faster wins preferred),
            ``"safe_best"`` (the optimal moves that score best against a weak opponent,
            :func:`.opponent.safe_best_moves`: the mastery recipe's SFT expert),
            ``"minimax_last"``, ``"minimax_any"`` or ``"fork"``. It is also the policy's
            ``name`` (as recorded by self-play).
        tie_break: ``"uniform"`` (default) draws among the candidates; ``"first"`` always
            plays the lowest cell, so SFT targets are a function of the board (one answer per
            position, nothing for greedy decoding to average over).

    Raises:
        ValueError: from ``__init__``, for a style that can lose or an unknown tie-break.
        KeyError: from ``act``, for an info without ``board`` and ``legal_moves`` (not a
            TicTacToe env).
        ValueError: from ``act``, for a finished board (no legal move).
    """

    tokens_generated = None  # generates no model tokens

    def __init__(
        self,
        seed: int | None = None,
        reasoning: bool = True,
        style: str = "minimax",
        tie_break: str = "uniform",
    ):
        if style not in OPTIMAL_STYLES:
            raise ValueError(f"Expected style in {OPTIMAL_STYLES} (never loses), got {style!r}")
        if tie_break not in TIE_BREAKS:
            raise ValueError(f"Expected tie_break in {TIE_BREAKS}, got {tie_break!r}")
        self._rng = np.random.default_rng(seed)
        self.reasoning = bool(reasoning)
        self.name = self.style = style
        self.tie_break = tie_break

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
            candidates = style_moves(self.style, board)
            pick = 0 if self.tie_break == "first" else self._rng.integers(len(candidates))
            move = int(candidates[pick])
            think = (
                f"<think>Optimal moves here: {', '.join(map(str, candidates))}.</think>"
                if self.reasoning
                else ""
            )
            out.append(Completion(f"{think}<move>{move}</move>"))
        return out
