"""Opponent styles: each style's move choices, which styles never lose, their env integration."""

from __future__ import annotations

from functools import cache

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.envs.tictactoe import TicTacToeEnv
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.env import OPPONENTS
from textgym.envs.tictactoe.opponent import (
    OPPONENT_STYLES,
    OPTIMAL_STYLES,
    opponent_move,
    position_value,
    style_moves,
)
from textgym.envs.tictactoe.strategies import fork_cells, fork_moves, winning_cells

# (style, board with the style's player to move, expected candidate moves). Cells row-major:
# 0 1 2 / 3 4 5 / 6 7 8.
STYLE_ROWS = [
    # Empty board: centre, edges, any cell (every opening draws), the last optimal cell.
    ("greedy_center", ".........", (4,)),
    ("greedy_edge", ".........", (1, 3, 5, 7)),
    ("fork", ".........", (4,)),
    ("minimax", ".........", tuple(range(9))),
    ("minimax_last", ".........", (8,)),
    ("minimax_any", ".........", tuple(range(9))),
    # Every style takes an immediate win (X completes the top row) ...
    *((s, "XX.OO....", (2,)) for s in OPPONENT_STYLES),
    # ... and blocks the opponent's (O stops the top row).
    *((s, "XX..O....", (2,)) for s in OPPONENT_STYLES),
    # Win beats block: X wins on 6 (left column) although O threatens 7 (middle column).
    *((s, "XO.XO....", (6,)) for s in OPPONENT_STYLES),
    # O to move after X took two opposite corners around O's centre: a corner loses to a fork
    # (X takes the other corner), an edge forces X to block and draws.
    ("greedy_center", "X...O...X", (2, 6)),
    ("greedy_edge", "X...O...X", (1, 3, 5, 7)),
    ("fork", "X...O...X", (1, 3, 5, 7)),
    ("minimax", "X...O...X", (1, 3, 5, 7)),
    ("minimax_last", "X...O...X", (7,)),
    # X (corner 0, centre) to move against O's edge 1 and corner 8: 3 and 6 fork.
    ("fork", "XO..X...O", (3, 6)),
    ("greedy_center", "XO..X...O", (2, 6)),
    ("greedy_edge", "XO..X...O", (3, 5, 7)),
    ("minimax", "XO..X...O", (3, 6)),
    # O took a corner, X the centre: rule 6, the opposite corner.
    ("fork", "O...X....", (8,)),
    ("greedy_center", "O...X....", (2, 6, 8)),
    # O to move, X's only fork is the centre (rule 4 blocks it).
    ("fork", "......OXX", (4,)),
    # X has a quick win on 2 and slower ones: the minimax takes the fastest, minimax_any any win.
    ("minimax", ".....XOOX", (2,)),
    ("minimax_any", ".....XOOX", (0, 1, 2, 3, 4)),
    ("minimax_last", ".....XXOO", (4,)),
    ("minimax_any", ".....XXOO", (0, 1, 3, 4)),
]


@pytest.mark.parametrize(("style", "board", "expected"), STYLE_ROWS)
def test_style_candidate_moves(style, board, expected):
    assert style_moves(style, board) == expected


@pytest.mark.parametrize(
    ("board", "mark", "wins", "forks"),
    [
        ("XX.OO....", "X", (2,), ()),
        ("XX.OO....", "O", (5,), (2, 6)),  # a cell beside an existing threat counts
        ("X...O...X", "X", (), (2, 6)),
        ("X...O...X", "O", (), ()),
        ("X.X.O....", "X", (1,), (3, 5, 6, 8)),
        ("O...X....", "X", (), ()),
    ],
)
def test_winning_and_fork_cells(board, mark, wins, forks):
    assert winning_cells(board, mark) == wins
    assert fork_cells(board, mark) == forks


def test_style_on_finished_board_and_unknown_style_raise():
    for style in OPPONENT_STYLES:
        with pytest.raises(ValueError, match="finished board"):
            style_moves(style, "XXXOO....")
    with pytest.raises(ValueError, match=r"Expected an opponent style in .*got 'alphazero'"):
        style_moves("alphazero", B.EMPTY_BOARD)
    with pytest.raises(ValueError, match="opponent style"):
        opponent_move(B.EMPTY_BOARD, 0, 1.0, style="alphazero")


def _reachable() -> list[str]:
    seen, stack = set(), [B.EMPTY_BOARD]
    while stack:
        board = stack.pop()
        if board not in seen:
            seen.add(board)
            stack.extend(B.apply_move(board, m) for m in B.legal_moves(board))
    return sorted(b for b in seen if B.legal_moves(b))


@pytest.mark.parametrize("style", sorted(OPPONENT_STYLES))
def test_candidates_are_legal_sorted_and_nonempty_everywhere(style):
    for board in _reachable():
        moves = style_moves(style, board)
        assert moves and list(moves) == sorted(set(moves)), (board, moves)
        assert set(moves) <= set(B.legal_moves(board)), (board, moves)


@cache
def _can_lose(style: str, mark: str, board: str = B.EMPTY_BOARD) -> bool:
    """Whether ``style`` playing ``mark`` loses on some line: any opponent move, any candidate."""
    won = B.winner(board)
    if won is not None:
        return won != mark
    moves = B.legal_moves(board)
    if B.to_move(board) == mark and moves:
        moves = style_moves(style, board)
    return any(_can_lose(style, mark, B.apply_move(board, m)) for m in moves)


@pytest.mark.parametrize(
    ("style", "mark", "can_lose"),
    [
        *((s, m, False) for s in OPTIMAL_STYLES for m in "XO"),
        ("greedy_center", "X", False),  # opening in the centre, one-move look-ahead suffices
        ("greedy_center", "O", True),  # X opens in a corner and forks
        ("greedy_edge", "X", True),
        ("greedy_edge", "O", True),
    ],
)
def test_which_styles_can_lose(style, mark, can_lose):
    assert _can_lose(style, mark) is can_lose


def test_minimax_styles_only_play_optimal_moves():
    """The minimax styles keep every position's game-theoretic result. The fork player never
    loses but does not always convert a won position it could not have reached itself (on
    ``"......O.X"`` X wins with a corner; the fork player takes the centre and draws)."""
    assert fork_moves("......O.X") == (4,) and position_value("......O.X") > 0
    for board in _reachable():
        value = position_value(board)
        for style in ("minimax", "minimax_last", "minimax_any"):
            for m in style_moves(style, board):
                after = -position_value(B.apply_move(board, m))
                assert (after > 0) - (after < 0) == (value > 0) - (value < 0), (style, board, m)


@pytest.mark.parametrize("style", sorted(OPPONENT_STYLES))
def test_env_plays_the_style_and_group_copies_see_the_same_replies(style):
    histories = []
    for _ in range(2):  # two copies of a GRPO group: same seed, same moves
        env = gym.make("textgym/TicTacToe-v0", opponent=style, agent_mark="O")
        _, info = env.reset(seed=7)
        history = [info["opponent_move"]]
        assert info["opponent"] == style and info["task_id"] == f"tictactoe-O-{style}-p0.000"
        assert info["opponent_move"] in style_moves(style, B.EMPTY_BOARD)
        while info["outcome"] is None:
            before = info["board"]
            move = info["legal_moves"][0]
            _, _, _, _, info = env.step(f"<move>{move}</move>")
            mid = B.apply_move(before, move)
            if info["opponent_move"] is not None:
                assert not info["opponent_move_random"]
                assert info["opponent_move"] in style_moves(style, mid), (mid, info)
            history.append(info["opponent_move"])
        histories.append(history)
    assert histories[0] == histories[1]


def test_style_and_random_move_prob_through_reset_options():
    env = gym.make("textgym/TicTacToe-v0")
    _, info = env.reset(seed=3, options={"opponent": "fork", "random_move_prob": 1.0})
    assert info["opponent"] == "fork" and info["task_id"] == "tictactoe-X-fork-p1.000"
    *_, info = env.step("<move>0</move>")
    assert info["opponent_move_random"] is True
    _, info = env.reset(seed=3)  # options last one episode
    assert info["opponent"] == "minimax" and info["task_id"] == "tictactoe-X-minimax-p0.000"
    with pytest.raises(ValueError, match="opponent"):
        env.reset(seed=3, options={"opponent": "alphazero"})


def test_default_opponent_replies_unchanged():
    """Recorded before the styles were added (commit d18e169): seeds 0-7, agent O, p = 0.3."""
    env = gym.make("textgym/TicTacToe-v0", agent_mark="O", random_move_prob=0.3)
    replies = [env.reset(seed=s)[1]["opponent_move"] for s in range(8)]
    assert replies == [4, 6, 8, 0, 0, 8, 1, 1]


def test_docstring_lists_every_opponent():
    doc = TicTacToeEnv.__doc__
    arguments = doc.split("Arguments:", 1)[1].split("Raises:", 1)[0]
    listed = [o for o in OPPONENTS if f'``"{o}"``' in arguments]
    assert listed == list(OPPONENTS)
    assert set(OPPONENTS) == {"random", *OPPONENT_STYLES}
