"""TicTacToe-v0's start positions checked: a board (the ``board`` reset option), a game so far
(the ``moves`` reset option) and the ``start_boards`` argument that lists either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textgym.checks import excerpt
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.opponent import critical_positions

__all__ = ["check_start_board", "check_start_boards", "check_start_moves"]


def check_start_board(board: Any, agent_mark: Any) -> str | None:
    """The ``board`` reset option checked: ``None``, or a legal unfinished position whose mark
    to move is ``agent_mark`` when that is given as ``"X"``/``"O"``.

    Raises:
        ValueError: a board that is not 9 characters of X/O/., unreachable in a legal game,
            already won or full, or whose mark to move differs from ``agent_mark``.
    """
    if board is None:
        return None
    B.validate_board(board)
    if B.winner(board) is not None or B.is_full(board):
        raise ValueError(
            f"Expected a start board with a move left to play, got the finished {excerpt(board)}"
        )
    mover = B.to_move(board)
    if agent_mark in ("X", "O") and agent_mark != mover:
        raise ValueError(
            f"Expected agent_mark {mover!r} for the start board {excerpt(board)} ({mover} is to "
            f"move), got {agent_mark!r}; leave agent_mark out to play the mark to move"
        )
    return board


def check_start_moves(moves: Any, agent_mark: Any) -> tuple[int, ...]:
    """The ``moves`` reset option checked, as a tuple: a list of cells from the empty board
    that leaves a move to play, for ``agent_mark`` when that is given as ``"X"``/``"O"``.

    Raises:
        ValueError: not a list/tuple of ints, an illegal or occupied cell, a game over, or a
            mark to move other than ``agent_mark``.
    """
    if not isinstance(moves, (list, tuple)) or any(
        not isinstance(cell, int) or isinstance(cell, bool) for cell in moves
    ):
        raise ValueError(f"Expected moves as a list of cells 0-8, got {excerpt(moves)}")
    board = B.board_after(moves)
    if B.winner(board) is not None or B.is_full(board):
        raise ValueError(f"Expected moves that leave a move to play, got {list(moves)}")
    mover = B.to_move(board)
    if agent_mark in ("X", "O") and agent_mark != mover:
        raise ValueError(
            f"Expected agent_mark {mover!r} after the moves {list(moves)} ({mover} is to move), "
            f"got {agent_mark!r}; leave agent_mark out to play the mark to move"
        )
    return tuple(moves)


def check_start_boards(value: Any) -> tuple[str | tuple[int, ...], ...]:
    """The ``start_boards`` argument as a tuple of checked boards and move tuples (empty for
    ``None``).

    Raises:
        ValueError: a str other than ``"critical"``, a value that is not a list/tuple of
            boards or move lists, an empty list, or an entry the ``board`` or ``moves`` reset
            option would refuse.
    """
    if value is None:
        return ()
    if value == "critical":
        return critical_positions()
    if isinstance(value, str) and value.endswith(".json"):
        value = _read_boards(Path(value))
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"Expected start_boards to be 'critical', a non-empty list of boards or a .json "
            f"file of one, got {value!r}"
        )
    return tuple(
        check_start_board(entry, None) if isinstance(entry, str) else check_start_moves(entry, None)
        for entry in value
    )


def _read_boards(path: Path) -> Any:
    """The JSON value of a ``start_boards`` file (checked by the caller).

    Raises:
        ValueError: the file cannot be read or is not JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"start_boards: cannot read a JSON list of boards from {path}: {error}"
        ) from None
