"""Exact win/draw/loss probabilities of tic-tac-toe players, by full game-tree enumeration:
``python recipes/tictactoe_ceilings.py [--output ceilings.json]`` prints and writes the ceiling
table and, per evaluation row (opponent style and ``random_move_prob``) and mark, the scripted
minimax player's and the best possible player's exact W/D/L: the references an evaluation's
sampled rates estimate.

A *move policy* maps a board (with its player to move) to the probability of each legal move,
as exact :class:`fractions.Fraction` values. :func:`outcome_probabilities` walks the whole game
tree of two move policies and returns the agent's exact ``(win, draw, loss)``;
:func:`best_response` returns the best any player can do against a given opponent (expectimax:
a max node for the agent, a chance node for the opponent), for one of two objectives. No
sampling anywhere: the numbers are the limits that any finite evaluation estimates.

:func:`opponent_policy` is the exact move distribution of ``TicTacToeEnv``'s opponent for a
style and ``random_move_prob`` (:func:`.opponent.opponent_move`): it draws its uniforms from a
hash of (episode key, board), and a board never repeats within a game, so over episode keys
each reply is an independent draw; the env's ``floor(u * k)`` with 53-bit ``u`` is uniform up
to a bias below 1e-15, which the exact figures ignore.

:func:`ceilings` gathers the table the README quotes: for each mark, the env's own minimax
player (uniform among its optimal moves) and the best possible players against a uniformly
random opponent, and the minimax player against the optimal opponent (all draws).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, NamedTuple

from textgym.cli.usage import script_config
from textgym.envs.tictactoe.board import EMPTY_BOARD, apply_move, is_full, legal_moves, to_move
from textgym.envs.tictactoe.board import winner as board_winner
from textgym.envs.tictactoe.opponent import OPPONENT_STYLES, best_moves, value_preserving_moves

__all__ = [
    "OBJECTIVES",
    "MovePolicy",
    "Outcome",
    "best_response",
    "ceilings",
    "minimax_policy",
    "opponent_policy",
    "outcome_probabilities",
    "uniform_policy",
]

#: A move policy: board (its player to move) -> {cell: probability}, probabilities summing to 1.
MovePolicy = Callable[[str], Mapping[int, Fraction]]

#: What :func:`best_response` maximises: ``"score"`` the expected outcome reward (win 1, draw
#: 1/2, loss 0, the env's ``outcome``), ties broken by the higher win probability; ``"win"`` the
#: win probability, ties broken by the higher expected score (so the fewer losses).
OBJECTIVES = ("score", "win")


class Outcome(NamedTuple):
    """Exact probabilities of the agent's win, draw and loss; they sum to 1."""

    win: Fraction
    draw: Fraction
    loss: Fraction

    @property
    def score(self) -> Fraction:
        """Expected outcome reward: win 1, draw 1/2, loss 0 (``TicTacToeEnv``'s ``outcome``)."""
        return self.win + self.draw / 2

    def as_dict(self) -> dict[str, float | str]:
        """Floats for ``win``/``draw``/``loss``/``score``, and each exact value as ``"p/q"``."""
        values = {"win": self.win, "draw": self.draw, "loss": self.loss, "score": self.score}
        return {
            **{k: float(v) for k, v in values.items()},
            **{f"{k}_exact": str(v) for k, v in values.items()},
        }


_WIN = Outcome(Fraction(1), Fraction(0), Fraction(0))
_DRAW = Outcome(Fraction(0), Fraction(1), Fraction(0))
_LOSS = Outcome(Fraction(0), Fraction(0), Fraction(1))


def _uniform_over(cells: tuple[int, ...] | list[int]) -> dict[int, Fraction]:
    share = Fraction(1, len(cells))
    return dict.fromkeys(cells, share)


def uniform_policy(board: str) -> dict[int, Fraction]:
    """A uniformly random legal move (``TicTacToeEnv(opponent="random")``)."""
    return _uniform_over(legal_moves(board))


def minimax_policy(board: str) -> dict[int, Fraction]:
    """Uniform among the minimax's optimal moves: the env's opponent at ``random_move_prob``
    0, and :class:`textgym.envs.tictactoe.MinimaxPolicy`."""
    return _uniform_over(best_moves(board))


def opponent_policy(style: str, random_move_prob: Fraction | int | str = 0) -> MovePolicy:
    """The exact move distribution of ``TicTacToeEnv``'s opponent.

    Args:
        style: ``"random"`` or a key of :data:`.opponent.OPPONENT_STYLES`.
        random_move_prob: Probability of a uniformly random legal move instead of the style's,
            as an exact number (``Fraction``, ``int`` or a decimal string such as ``"0.25"``).

    Returns:
        A :data:`MovePolicy`: with probability ``p`` uniform over the legal moves, else uniform
        over the style's candidates.

    Raises:
        ValueError: for an unknown style, or a probability outside [0, 1].
    """
    p = Fraction(random_move_prob)
    if not 0 <= p <= 1:
        raise ValueError(f"Expected random_move_prob in [0, 1], got {random_move_prob!r}")
    if style == "random":
        return uniform_policy
    if style not in OPPONENT_STYLES:
        raise ValueError(
            f"Expected an opponent style in {['random', *OPPONENT_STYLES]}, got {style!r}"
        )
    strategy = OPPONENT_STYLES[style]

    def policy(board: str) -> dict[int, Fraction]:
        probs = {m: p * q for m, q in uniform_policy(board).items()}
        for m, q in _uniform_over(strategy(board)).items():
            probs[m] += (1 - p) * q
        return probs

    return policy


def _terminal(board: str, agent_mark: str) -> Outcome | None:
    won = board_winner(board)
    if won is not None:
        return _WIN if won == agent_mark else _LOSS
    return _DRAW if is_full(board) else None


def _mix(weighted: list[tuple[Fraction, Outcome]]) -> Outcome:
    return Outcome(*(sum((w * o[i] for w, o in weighted), Fraction(0)) for i in range(3)))


def _check_mark(agent_mark: str) -> None:
    if agent_mark not in ("X", "O"):
        raise ValueError(f'Expected agent_mark "X" or "O", got {agent_mark!r}')


def outcome_probabilities(
    agent_mark: str, agent: MovePolicy, opponent: MovePolicy, board: str = EMPTY_BOARD
) -> Outcome:
    """The agent's exact win/draw/loss probabilities from ``board`` (the empty one by default).

    Args:
        agent_mark: ``"X"`` (moves first) or ``"O"``.
        agent: The agent's :data:`MovePolicy`.
        opponent: The opponent's :data:`MovePolicy`.
        board: Starting position (:mod:`.board`).

    Raises:
        ValueError: for a mark other than ``"X"``/``"O"``.
    """
    _check_mark(agent_mark)
    memo: dict[str, Outcome] = {}

    def value(b: str) -> Outcome:
        if b not in memo:
            done = _terminal(b, agent_mark)
            if done is None:
                mover = agent if to_move(b) == agent_mark else opponent
                done = _mix([(q, value(apply_move(b, m))) for m, q in mover(b).items() if q])
            memo[b] = done
        return memo[b]

    return value(board)


def best_response(
    agent_mark: str,
    opponent: MovePolicy,
    objective: Literal["score", "win"] = "score",
    board: str = EMPTY_BOARD,
    allowed: Callable[[str], tuple[int, ...] | list[int]] = legal_moves,
) -> Outcome:
    """The best any player of ``agent_mark`` can do against ``opponent`` (exact expectimax).

    At the agent's turn it takes the move whose outcome is largest for ``objective`` (see
    :data:`OBJECTIVES`; the order is lexicographic, and lexicographic order is preserved by the
    opponent's probability-weighted averages, so choosing node by node is optimal overall);
    at the opponent's turn it averages over the opponent's moves.

    Args:
        agent_mark: ``"X"`` or ``"O"``.
        opponent: The opponent's :data:`MovePolicy`.
        objective: One of :data:`OBJECTIVES`.
        board: Starting position.
        allowed: The moves the agent may choose among on a board: every legal move by default;
            :func:`.opponent.value_preserving_moves` gives the best player that never loses
            against anyone.

    Raises:
        ValueError: for a mark other than ``"X"``/``"O"`` or an unknown objective.
    """
    _check_mark(agent_mark)
    keys = {
        "score": lambda o: (o.score, o.win),
        "win": lambda o: (o.win, o.score),
    }
    if objective not in keys:
        raise ValueError(f"Expected objective in {OBJECTIVES}, got {objective!r}")
    key = keys[objective]
    memo: dict[str, Outcome] = {}

    def value(b: str) -> Outcome:
        if b not in memo:
            done = _terminal(b, agent_mark)
            if done is None:
                if to_move(b) == agent_mark:
                    done = max((value(apply_move(b, m)) for m in allowed(b)), key=key)
                else:
                    done = _mix([(q, value(apply_move(b, m))) for m, q in opponent(b).items() if q])
            memo[b] = done
        return memo[b]

    return value(board)


def ceilings() -> dict[str, dict[str, dict[str, float | str]]]:
    """The ceiling table, per agent mark (``"X"``, ``"O"``), as :meth:`Outcome.as_dict` rows.

    Rows: ``minimax_vs_random`` (the env's minimax player, uniform among its optimal moves,
    against a uniformly random opponent), ``best_score_vs_random`` and ``best_win_vs_random``
    (:func:`best_response` for each objective), ``best_safe_vs_random`` (the best expected score
    of a player that never loses against anyone: its moves restricted to
    :func:`.opponent.value_preserving_moves`), ``minimax_vs_optimal`` (the minimax player
    against the env's optimal opponent: all draws) and ``random_vs_random`` (the floor).
    """
    optimal = opponent_policy("minimax", 0)
    table = {}
    for mark in ("X", "O"):
        rows = {
            "minimax_vs_random": outcome_probabilities(mark, minimax_policy, uniform_policy),
            "best_score_vs_random": best_response(mark, uniform_policy, "score"),
            "best_win_vs_random": best_response(mark, uniform_policy, "win"),
            "best_safe_vs_random": best_response(
                mark, uniform_policy, "score", allowed=value_preserving_moves
            ),
            "minimax_vs_optimal": outcome_probabilities(mark, minimax_policy, optimal),
            "random_vs_random": outcome_probabilities(mark, uniform_policy, uniform_policy),
        }
        table[mark] = {name: o.as_dict() for name, o in rows.items()}
    return table


#: Evaluation rows: name -> (opponent style, random_move_prob as an exact decimal string).
ROWS: dict[str, tuple[str, str]] = {
    "random": ("random", "1"),
    "optimal": ("minimax", "0"),
    "minimax p=0.25": ("minimax", "0.25"),
    "minimax p=0.5": ("minimax", "0.5"),
    "minimax p=0.75": ("minimax", "0.75"),
    **{style: (style, "0") for style in OPPONENT_STYLES if style not in ("minimax", "random")},
}


def exact_references() -> dict[str, dict[str, dict[str, dict[str, float | str]]]]:
    """``{row: {mark: {"minimax_player", "best_player"}}}``: exact W/D/L against each row."""
    table: dict[str, dict[str, dict[str, dict[str, float | str]]]] = {}
    for row, (style, prob) in ROWS.items():
        opponent = opponent_policy(style, prob)
        table[row] = {
            mark: {
                "minimax_player": outcome_probabilities(mark, minimax_policy, opponent).as_dict(),
                "best_player": best_response(mark, opponent, "score").as_dict(),
            }
            for mark in ("X", "O")
        }
    return table


@dataclass
class Config:
    """The command line of this script."""

    output: str = "ceilings.json"
    """JSON path of the ceiling table and the rows' exact references."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "tictactoe_ceilings.py", __doc__)
    result = {"ceilings": ceilings(), "rows": exact_references()}
    for row, marks in result["rows"].items():
        for mark, refs in marks.items():
            cells = "  ".join(
                f"{who} {r['win']:.3f}/{r['draw']:.3f}/{r['loss']:.3f}" for who, r in refs.items()
            )
            print(f"{row:>16} {mark}: {cells}")
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
