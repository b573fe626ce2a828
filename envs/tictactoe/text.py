"""The text of tic-tac-toe: prompts, board rendering and reading a completion as a move.

Shared by the single-agent env (:mod:`.env`) and the two-seat PettingZoo env
(:mod:`.pettingzoo_env`) so both speak exactly the same language. Pure: no gymnasium.
"""

from __future__ import annotations

from functools import lru_cache

from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.parsing import extract_move_text, parse_move

__all__ = [
    "COMPACT_SYSTEM_PROMPT",
    "SYSTEM_PROMPT",
    "compact_status_text",
    "explain_invalid",
    "read_move",
    "render_board",
    "status_text",
]

SYSTEM_PROMPT = """You are playing tic-tac-toe on a 3x3 board. The cells are numbered 0-8, row by row:

 0 | 1 | 2
---+---+---
 3 | 4 | 5
---+---+---
 6 | 7 | 8

Players take turns placing their mark in an empty cell; X moves first. The first player with \
three marks in a row, a column or a diagonal wins; a full board without such a line is a draw.

You play {mark}; your opponent plays {other}. On each turn you may reason inside \
<think>...</think>, then give exactly one move as <move>N</move>, where N is the number of an \
empty cell. Example: <think>The centre is free.</think><move>4</move>"""


#: The ``prompt_style="compact"`` rules: the same game and answer format in a few words, for
#: small models with a byte-level tokenizer (every character is a token).
COMPACT_SYSTEM_PROMPT = "Tic-tac-toe. You are {mark}. Reply <move>N</move>, N a free cell 0-8."


@lru_cache(maxsize=1 << 14)
def render_board(board: str) -> str:
    """Render a board with each free cell shown as its row-major index."""
    cells = [c if c != B.EMPTY else str(i) for i, c in enumerate(board)]
    rows = [" " + " | ".join(cells[r : r + 3]) for r in (0, 3, 6)]
    return "\n---+---+---\n".join(rows)


@lru_cache(maxsize=1 << 14)
def status_text(board: str, mark: str) -> str:
    """Board, free cells and the turn prompt; cached per (board, mark) like the rules."""
    free = ", ".join(str(m) for m in B.legal_moves(board))
    return f"{render_board(board)}\n\nAvailable positions: {free}\nYour turn ({mark}): answer with <move>N</move>."


@lru_cache(maxsize=1 << 14)
def compact_status_text(board: str) -> str:
    """The board as three rows with free cells shown as their index, then the free cells.

    Example: ``"X1O\n3X5\n67O\nfree 1 3 5 6 7"``.
    """
    cells = "".join(c if c != B.EMPTY else str(i) for i, c in enumerate(board))
    free = " ".join(str(m) for m in B.legal_moves(board))
    return f"{cells[0:3]}\n{cells[3:6]}\n{cells[6:9]}\nfree {free}"


def read_move(board: str, action: str) -> tuple[int | None, str | None]:
    """Read a completion as a move on ``board``.

    Returns:
        ``(move, reason)``: ``reason`` is ``None`` for a legal move, else one of
        ``"no_move_tag"``, ``"not_an_integer"``, ``"out_of_range"``, ``"occupied"``; ``move`` is
        the parsed integer when there is one.
    """
    move = parse_move(action)
    if move is None:
        return None, "no_move_tag" if extract_move_text(action) is None else "not_an_integer"
    if not 0 <= move <= 8:
        return move, "out_of_range"
    if board[move] != B.EMPTY:
        return move, "occupied"
    return move, None


def explain_invalid(reason: str, board: str, action: str, move: int | None) -> str:
    """The sentence an invalid action gets back, for a ``reason`` from :func:`read_move`."""
    if reason == "no_move_tag":
        return "no <move>N</move> tag was found (moves inside <think> do not count)."
    if reason == "not_an_integer":
        shown = (extract_move_text(action) or "")[:40]
        return f"the move tag must hold one cell number 0-8, got {shown!r}."
    if reason == "out_of_range":
        return f"position {move} does not exist; cells are numbered 0-8."
    return f"position {move} is already taken by {board[move]}."
