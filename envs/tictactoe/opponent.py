"""Minimax values and the seeded, unbiased tic-tac-toe opponent.

The solver is exact negamax over the full game tree, memoized per board (there are only 5,478
reachable positions), so after the first call any move costs a dictionary lookup. Values prefer
faster wins and slower losses: a win scores ``1 + (empty cells left after the winning move)``, a
draw 0, a loss the negation, always from the point of view of the player to move.

The opponent follows the rule of anakin87's verifiers tic-tac-toe environment: with probability
``random_move_prob`` it plays a uniformly random legal move, otherwise a move drawn uniformly
among *all* moves of optimal value (a fixed first-best choice would let a policy memorize one
line of play). Its randomness is a pure function of ``(episode_key, board)``, so two rollouts of
the same episode seed that reach the same board see the same reply.

Other styles of play (:data:`OPPONENT_STYLES`) replace the optimal moves by another set of
candidates, drawn from in the same seeded way: optimal players with other tie-breaks
(:func:`last_best_move`, :func:`value_preserving_moves`) and the rule-based players of
:mod:`.strategies`. They exist to evaluate (and train) a policy against opponents outside the
training distribution (docs/mastery_study.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from types import MappingProxyType

from textgym.envs.tictactoe.board import (
    EMPTY,
    EMPTY_BOARD,
    apply_move,
    is_full,
    legal_moves,
    to_move,
    winner,
)
from textgym.envs.tictactoe.strategies import fork_moves, greedy_center_moves, greedy_edge_moves

__all__ = [
    "OPPONENT_STYLES",
    "OPTIMAL_STYLES",
    "best_moves",
    "critical_positions",
    "last_best_move",
    "move_values",
    "opponent_move",
    "position_value",
    "safe_best_moves",
    "style_moves",
    "uniforms",
    "value_preserving_moves",
]


@cache
def position_value(board: str) -> int:
    """Negamax value of ``board`` for the player to move.

    Returns:
        ``0`` for a draw with best play, ``k > 0`` if the player to move wins with ``k - 1``
        empty cells left after the winning move, ``-k`` for the mirrored loss.
    """
    if winner(board) is not None:
        # The previous player just completed a line: the player to move has lost.
        return -(1 + board.count(EMPTY))
    moves = legal_moves(board)
    if not moves:
        return 0
    return max(-position_value(apply_move(board, m)) for m in moves)


@cache
def move_values(board: str) -> tuple[tuple[int, int], ...]:
    """Return ``((cell, value), ...)`` for every legal move, value as in :func:`position_value`."""
    return tuple((m, -position_value(apply_move(board, m))) for m in legal_moves(board))


@cache
def best_moves(board: str) -> tuple[int, ...]:
    """Return every legal move of optimal value, in increasing cell order.

    Raises:
        ValueError: if the game is over (no legal move).
    """
    values = move_values(board)
    if not values:
        raise ValueError(f"No legal move on finished board {board!r}")
    top = max(v for _, v in values)
    return tuple(m for m, v in values if v == top)


@cache
def last_best_move(board: str) -> tuple[int, ...]:
    """The highest-numbered cell of :func:`best_moves`, alone: a deterministic tie-break.

    Raises:
        ValueError: if the game is over.
    """
    return best_moves(board)[-1:]


@cache
def value_preserving_moves(board: str) -> tuple[int, ...]:
    """Every legal move that keeps the game-theoretic result (win, draw or loss), in cell order.

    Unlike :func:`best_moves` it does not prefer faster wins and slower losses: a player
    drawing uniformly among these moves is still optimal (it never turns a won game into a
    draw, nor a drawn one into a loss; the game is finite, so a kept win is eventually won)
    but plays many lines the minimax opponent never does.

    Raises:
        ValueError: if the game is over.
    """
    values = move_values(board)
    if not values:
        raise ValueError(f"No legal move on finished board {board!r}")
    sign = max((v > 0) - (v < 0) for _, v in values)
    return tuple(m for m, v in values if (v > 0) - (v < 0) == sign)


@cache
def critical_positions() -> tuple[str, ...]:
    """Every position reachable in a legal game, not finished, where some legal move changes the
    game-theoretic result for the player to move (a win thrown away, a draw turned into a
    loss): the positions where a move can be a mistake. 3,191 of the 4,520 unfinished
    positions (1,732 with X to move, 1,459 with O), sorted.

    Positions already lost with best play are not among them (every move keeps the loss).
    """
    seen, frontier = set(), [EMPTY_BOARD]
    while frontier:
        board = frontier.pop()
        if board in seen or winner(board) is not None or is_full(board):
            continue
        seen.add(board)
        frontier += [apply_move(board, cell) for cell in legal_moves(board)]
    return tuple(sorted(b for b in seen if len(value_preserving_moves(b)) < len(legal_moves(b))))


@cache
def _safe_vs_random(board: str, me: str) -> tuple[Fraction, Fraction]:
    """``(expected score, win probability)`` of ``me`` from ``board`` when ``me`` plays
    :func:`safe_best_moves` and the other player moves uniformly at random (exact).

    ``best_response`` in ``recipes/tictactoe_ceilings.py`` computes the same expectimax for one
    start board; it imports this module (for the styles), so the per-board values the style
    needs live here, and ``test_analysis`` checks that the two agree.
    """
    won = winner(board)
    if won is not None:
        return (Fraction(1), Fraction(1)) if won == me else (Fraction(0), Fraction(0))
    if is_full(board):
        return Fraction(1, 2), Fraction(0)
    if to_move(board) == me:
        return max(_safe_vs_random(apply_move(board, m), me) for m in value_preserving_moves(board))
    children = [_safe_vs_random(apply_move(board, m), me) for m in legal_moves(board)]
    score, win = (sum(values, Fraction(0)) / len(children) for values in zip(*children))
    return score, win


@cache
def safe_best_moves(board: str) -> tuple[int, ...]:
    """The optimal moves that exploit a weak opponent best, in increasing cell order.

    Among :func:`value_preserving_moves` (so the player never loses against anyone), the moves
    with the highest expected outcome score (win 1, draw 1/2, loss 0), then the highest win
    probability, against a uniformly random opponent, assuming this rule for every later move
    too (exact expectimax). Its value from the empty board is the ``best_safe_vs_random``
    ceiling of ``recipes/tictactoe_ceilings.py``: 99.5% wins as X and 91.6%
    as O against a uniformly random player, against 96.8% and 77.7% for :func:`best_moves`
    drawn uniformly. The SFT expert of the mastery recipe (docs/mastery_study.md).

    Raises:
        ValueError: if the game is over.
    """
    me = to_move(board)
    values = {m: _safe_vs_random(apply_move(board, m), me) for m in value_preserving_moves(board)}
    top = max(values.values())
    return tuple(m for m, v in values.items() if v == top)


#: Opponent styles of play: name -> the candidate moves on a board (the player to move's),
#: among which the opponent draws uniformly. ``"random"`` is not here: it is every legal move.
OPPONENT_STYLES: MappingProxyType[str, Callable[[str], tuple[int, ...]]] = MappingProxyType(
    {
        "minimax": best_moves,
        "minimax_last": last_best_move,
        "minimax_any": value_preserving_moves,
        "safe_best": safe_best_moves,
        "fork": fork_moves,
        "greedy_center": greedy_center_moves,
        "greedy_edge": greedy_edge_moves,
    }
)

#: The styles that never lose, whatever the other player does and whichever candidate they
#: draw (checked over the whole game tree in ``tests/envs/tictactoe/test_strategies.py``).
OPTIMAL_STYLES = ("minimax", "minimax_last", "minimax_any", "safe_best", "fork")


def style_moves(style: str, board: str) -> tuple[int, ...]:
    """The candidate moves of opponent ``style`` on ``board`` (see :data:`OPPONENT_STYLES`).

    Raises:
        ValueError: for an unknown style or a finished board.
    """
    return _strategy(style)(board)


def _strategy(style: str) -> Callable[[str], tuple[int, ...]]:
    try:
        return OPPONENT_STYLES[style]
    except (KeyError, TypeError):
        raise ValueError(
            f"Expected an opponent style in {sorted(OPPONENT_STYLES)}, got {style!r}"
        ) from None


def uniforms(episode_key: int, board: str) -> tuple[float, float]:
    """Two independent uniforms in [0, 1) that depend only on ``(episode_key, board)``.

    A BLAKE2b digest is used instead of building a seeded NumPy generator per move because it is
    about 20x cheaper (≈1 µs) and gives the same determinism; 53-bit floats keep the bias of
    ``floor(u * k)`` below 1e-15 for k <= 9.
    """
    digest = hashlib.blake2b(
        episode_key.to_bytes(16, "little", signed=False) + board.encode("ascii"), digest_size=16
    ).digest()
    scale = 2.0**-53
    return (
        (int.from_bytes(digest[:8], "little") >> 11) * scale,
        (int.from_bytes(digest[8:], "little") >> 11) * scale,
    )


def opponent_move(
    board: str, episode_key: int, random_move_prob: float, style: str = "minimax"
) -> tuple[int, bool]:
    """Choose the opponent's reply on ``board``.

    Args:
        board: Position with the opponent to move (see :mod:`.board`).
        episode_key: Non-negative integer below 2**128 drawn once per episode from the env's
            ``np_random``.
        random_move_prob: Probability in [0, 1] of a uniformly random legal move instead of one
            of the style's moves.
        style: A key of :data:`OPPONENT_STYLES`; ``"minimax"`` (default) draws among the
            optimal moves.

    Returns:
        ``(cell, was_random)``.

    Raises:
        ValueError: if the game is over, ``random_move_prob`` is outside [0, 1] or ``style``
            is unknown.
    """
    if not 0.0 <= random_move_prob <= 1.0:
        raise ValueError(f"Expected random_move_prob in [0, 1], got {random_move_prob}")
    strategy = _strategy(style)
    u_mode, u_pick = uniforms(episode_key, board)
    if u_mode < random_move_prob:
        moves = legal_moves(board)
        if not moves:
            raise ValueError(f"No legal move on finished board {board!r}")
        return moves[int(u_pick * len(moves))], True
    candidates = strategy(board)
    return candidates[int(u_pick * len(candidates))], False
