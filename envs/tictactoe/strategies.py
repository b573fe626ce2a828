"""Rule-based tic-tac-toe strategies: the candidate moves of each scripted opponent style.

Pure functions of the board, with no randomness: each strategy returns the moves it considers
equally good, in increasing cell order, and the caller (:func:`.opponent.opponent_move`) draws
one of them uniformly from its seeded uniforms. The player is always the one to move
(:func:`.board.to_move`). Cells are row-major (:mod:`.board`): the centre is 4, the corners
0, 2, 6, 8 and the edges 1, 3, 5, 7.

- :func:`greedy_center_moves` and :func:`greedy_edge_moves`: win if possible, else block the
  opponent's immediate win, else a preferred kind of cell. They look one move ahead only, so a
  fork beats them.
- :func:`fork_moves`: the rules of Crowley & Siegler (1993, "Flexible strategy use in young
  children's tic-tac-toe", Cognitive Science 17(4), 531-561), after Newell & Simon's (1972)
  program: win, block, fork, block the opponent's fork, centre, the corner opposite an
  opponent's corner, an empty corner, an empty edge. With rule 4 as Wikipedia's "Tic-tac-toe"
  article words it (block the opponent's only fork; against two or more, make a two-in-a-row
  that forces a reply which does not give the opponent a fork) it never loses
  (``tests/envs/tictactoe/test_strategies.py`` checks the whole game tree).
"""

from __future__ import annotations

from functools import cache

from textgym.envs.tictactoe.board import EMPTY, LINES, legal_moves, other, to_move

__all__ = [
    "CENTER",
    "CORNERS",
    "EDGES",
    "fork_cells",
    "fork_moves",
    "greedy_center_moves",
    "greedy_edge_moves",
    "winning_cells",
]

CENTER = 4
CORNERS = (0, 2, 6, 8)
EDGES = (1, 3, 5, 7)


@cache
def winning_cells(board: str, mark: str) -> tuple[int, ...]:
    """Empty cells where ``mark`` would complete a line at once, in increasing order.

    Args:
        board: A position (:mod:`.board`); whose turn it is does not matter.
        mark: ``"X"`` or ``"O"``.
    """
    cells = {
        cell
        for line in LINES
        if sum(board[i] == mark for i in line) == 2
        for cell in line
        if board[cell] == EMPTY
    }
    return tuple(sorted(cells))


@cache
def fork_cells(board: str, mark: str) -> tuple[int, ...]:
    """Empty cells where playing ``mark`` leaves it two or more distinct winning cells (a fork).

    The cell is played as ``mark`` whatever the turn, so this also finds the opponent's forks.
    A winning cell that ``mark`` already had counts too; the strategies ask only once neither
    player has one (rules 1 and 2 come first).
    """
    return tuple(
        cell for cell in _empty(board) if len(winning_cells(_put(board, cell, mark), mark)) >= 2
    )


def _empty(board: str) -> tuple[int, ...]:
    return tuple(i for i, c in enumerate(board) if c == EMPTY)


def _put(board: str, cell: int, mark: str) -> str:
    return board[:cell] + mark + board[cell + 1 :]


def _first_nonempty(*groups: tuple[int, ...]) -> tuple[int, ...]:
    return next((g for g in groups if g), ())


def _greedy(board: str, preference: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    moves = legal_moves(board)
    if not moves:
        raise ValueError(f"No legal move on finished board {board!r}")
    me = to_move(board)
    free = set(moves)
    return _first_nonempty(
        winning_cells(board, me),
        winning_cells(board, other(me)),
        *(tuple(c for c in kind if c in free) for kind in preference),
    )


@cache
def greedy_center_moves(board: str) -> tuple[int, ...]:
    """Win, else block, else the centre, else a corner, else an edge.

    Raises:
        ValueError: if the game is over.
    """
    return _greedy(board, ((CENTER,), CORNERS, EDGES))


@cache
def greedy_edge_moves(board: str) -> tuple[int, ...]:
    """Win, else block, else an edge, else a corner, else the centre.

    Raises:
        ValueError: if the game is over.
    """
    return _greedy(board, (EDGES, CORNERS, (CENTER,)))


def _block_fork(board: str, me: str, opp_forks: tuple[int, ...]) -> tuple[int, ...]:
    """Crowley & Siegler's rule 4 against two or more opponent forks (see the module docstring)."""
    safe_threats = []
    for cell in _empty(board):
        after = _put(board, cell, me)
        threats = winning_cells(after, me)
        if len(threats) != 1:  # no threat; two would be a fork, which rule 3 already took
            continue
        reply = _put(after, threats[0], other(me))  # the opponent's forced block
        if len(winning_cells(reply, other(me))) < 2:
            safe_threats.append(cell)
    blocking = tuple(c for c in safe_threats if c in opp_forks)
    return _first_nonempty(blocking, tuple(safe_threats), opp_forks)


@cache
def fork_moves(board: str) -> tuple[int, ...]:
    """Crowley & Siegler's (1993) eight rules, the first that yields a move.

    1. Win. 2. Block the opponent's win. 3. Fork. 4. Block the opponent's fork (the only one;
    against several, a safe forcing two-in-a-row, preferably on a fork cell). 5. Centre.
    6. A corner opposite an opponent's corner. 7. An empty corner. 8. An empty edge.

    Raises:
        ValueError: if the game is over.
    """
    moves = legal_moves(board)
    if not moves:
        raise ValueError(f"No legal move on finished board {board!r}")
    me = to_move(board)
    opp = other(me)
    free = set(moves)
    opp_forks = fork_cells(board, opp)
    return _first_nonempty(
        winning_cells(board, me),
        winning_cells(board, opp),
        fork_cells(board, me),
        opp_forks if len(opp_forks) <= 1 else _block_fork(board, me, opp_forks),
        (CENTER,) if CENTER in free else (),
        tuple(c for c in CORNERS if c in free and board[8 - c] == opp),
        tuple(c for c in CORNERS if c in free),
        tuple(c for c in EDGES if c in free),
    )
