"""The text of tic-tac-toe: every sentence both envs show, in both prompt styles.

Shared by the single-agent env (:mod:`.env`) and the two-seat PettingZoo env
(:mod:`.pettingzoo_env`) so both speak exactly the same language; no sentence of the game is
written anywhere else. No env state lives here.

A prompt style is one object, chosen once when an env is built (:data:`PROMPT_STYLES`):
:class:`FullText` (the rules, a drawn board and sentences) or :class:`CompactText` (a one-line
rule and the board as three rows, about a fifth of the tokens). Each turns the same facts into
an observation: the news since the seat last acted (sentences such as "You played position 4."
for the full style, the opponent's last cell for the compact one), the board, and whether the
seat is to move, waiting, or the game is over.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from gymnasium import spaces

from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.parsing import extract_move_text, parse_move
from textgym.spaces import TOO_LONG, too_long_message
from textgym.types import Message

__all__ = [
    "COMPACT_SYSTEM_PROMPT",
    "PROMPT_STYLES",
    "RESULT_SENTENCES",
    "SYSTEM_PROMPT",
    "CompactText",
    "FullText",
    "compact_status_text",
    "explain_invalid",
    "game_conversation",
    "new_game_sentence",
    "opponent_played_sentence",
    "played_sentence",
    "read_action",
    "start_position_sentence",
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


def read_action(board: str, action: str, space: spaces.Text) -> tuple[int | None, str | None, str]:
    """Read a whole completion as a move: the length rule first, then :func:`read_move`.

    An action over the action space's ``max_length`` characters is not parsed at all (the rule
    of :mod:`textgym.spaces`).

    Returns:
        ``(move, reason, why)``: ``reason`` as :func:`read_move` gives it, or ``"too_long"``;
        ``why`` the sentence that explains an invalid action (``""`` for a legal move).
    """
    too_long = too_long_message(action, space)
    if too_long is not None:
        return None, TOO_LONG, too_long[0].lower() + too_long[1:]
    move, reason = read_move(board, action)
    return move, reason, "" if reason is None else explain_invalid(reason, board, action, move)


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


#: The sentence of each result, from the seat's point of view.
RESULT_SENTENCES = {"win": "You win!", "loss": "You lose.", "draw": "It is a draw."}


def new_game_sentence(mark: str) -> str:
    """The first news of a game: ``"A new game begins. You play X and move first."``."""
    if mark == "X":
        return "A new game begins. You play X and move first."
    return f"A new game begins. You play {mark}."


def start_position_sentence(mark: str, to_move: bool = True) -> str:
    """The first news of a game started from a given position (``reset(options={"board":
    ...})``): ``"A game continues from this position. You play O and it is your move."``
    (``to_move=False``, for the PettingZoo twin's waiting seat: without the last clause)."""
    turn = " and it is your move" if to_move else ""
    return f"A game continues from this position. You play {mark}{turn}."


def played_sentence(move: int) -> str:
    """News of the seat's own legal move."""
    return f"You played position {move}."


def opponent_played_sentence(opponent_mark: str, move: int) -> str:
    """News of the opponent's move."""
    return f"Opponent ({opponent_mark}) played position {move}."


class FullText:
    """The ``"full"`` prompt style: the rules, a drawn board, and the news as sentences."""

    name = "full"
    #: The system prompt, the rules and the answer format, for ``{mark}`` against ``{other}``.
    rules = SYSTEM_PROMPT

    def system_prompt(self, mark: str) -> str:
        """:attr:`rules` for the player of ``mark``."""
        return self.rules.format(mark=mark, other=B.other(mark))

    def observation(
        self,
        board: str,
        mark: str,
        news: Sequence[str],
        opponent_move: int | None,
        result: str | None = None,
        waiting: bool = False,
    ) -> str:
        """What the player of ``mark`` sees after a reset or a legal move.

        Args:
            board: The board now (9 characters, row-major).
            mark: The seat's mark.
            news: The sentences of what happened since the seat last acted, in order.
            opponent_move: The opponent's cell since then, or ``None`` (read by the compact
                style; the full style reads ``news``).
            result: ``"win"``, ``"draw"`` or ``"loss"`` once the game is over, else ``None``.
            waiting: True when the other seat is to move (two-seat play only).
        """
        told = " ".join(news)
        if result is not None:
            return (
                f"{told} {RESULT_SENTENCES[result]}\n\n{render_board(board)}\n\n"
                f"Game over: {result}."
            )
        if waiting:
            return f"{told}\n\n{render_board(board)}\n\nWaiting for the opponent ({B.other(mark)})."
        return f"{told}\n\n{status_text(board, mark)}"

    def invalid(self, board: str, mark: str, reason: str, why: str) -> str:
        """What the seat sees after an invalid action (``why`` from :func:`read_action`)."""
        return f"Invalid move: {why} The board is unchanged.\n\n{status_text(board, mark)}"


class CompactText(FullText):
    """The ``"compact"`` prompt style: ``opp N``, the board as three rows, ``free ...``,
    ``invalid REASON``, ``over OUTCOME``, ``waiting``; the same game in about a fifth of the
    tokens, for small models with a byte-level tokenizer (every character is a token)."""

    name = "compact"
    rules = COMPACT_SYSTEM_PROMPT  # the one-line rule and answer format

    def observation(
        self,
        board: str,
        mark: str,
        news: Sequence[str],
        opponent_move: int | None,
        result: str | None = None,
        waiting: bool = False,
    ) -> str:
        """As :meth:`FullText.observation`, in the compact style (``news`` is not shown)."""
        head = f"opp {opponent_move}\n" if opponent_move is not None else ""
        if result is not None:
            return f"{head}over {result}"
        status = compact_status_text(board)
        if waiting:
            return head + status.rsplit("\n", 1)[0] + "\nwaiting"  # the rows, not the free cells
        return head + status

    def invalid(self, board: str, mark: str, reason: str, why: str) -> str:
        """``invalid REASON`` and the board."""
        return f"invalid {reason}\n{compact_status_text(board)}"


#: The prompt styles by name (the envs' ``prompt_style`` argument).
PROMPT_STYLES: dict[str, FullText] = {"full": FullText(), "compact": CompactText()}


def game_conversation(
    text: FullText, moves: Sequence[int], action_template: str
) -> tuple[str, list[Message]]:
    """A game part-way through as the player to move saw it: the board and the chat so far.

    Args:
        text: The prompt style.
        moves: The cells played from the empty board, in order (X first); the game must not be
            over after them. The player to move afterwards is the conversation's player: its
            earlier moves become assistant turns, the other mark's moves the news of the next
            observation, as ``TicTacToe-v0`` would have shown them.
        action_template: How a move is written as an action (``"<move>{}</move>"``).

    Returns:
        ``(board, messages)``: the board after ``moves`` and the user/assistant messages from the
        game's first observation to the current one (the last message, a user turn).

    Raises:
        ValueError: a cell that is not an int in 0..8 or is occupied, a move after the game
            ended, or a game over after the last move.
    """
    mark = "X" if len(moves) % 2 == 0 else "O"
    board, news, opponent, rest = B.EMPTY_BOARD, [new_game_sentence(mark)], None, list(moves)
    if mark == "O":  # X's opening move is news of the first observation
        opponent, rest = rest[0], rest[1:]
        board = B.apply_move(board, opponent)
        news.append(opponent_played_sentence("X", opponent))
    messages = [{"role": "user", "content": text.observation(board, mark, news, opponent)}]
    for own, opponent in zip(rest[0::2], rest[1::2]):
        board = B.apply_move(B.apply_move(board, own), opponent)
        news = [played_sentence(own), opponent_played_sentence(B.other(mark), opponent)]
        messages.append({"role": "assistant", "content": action_template.format(own)})
        messages.append({"role": "user", "content": text.observation(board, mark, news, opponent)})
    if B.winner(board) is not None or B.is_full(board):
        raise ValueError(f"Expected moves that leave a move to play, got {list(moves)}")
    return board, messages
