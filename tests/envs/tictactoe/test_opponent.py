"""The minimax opponent: exhaustive optimality, unbiased tie-breaking, seeded determinism."""

from collections import Counter
from functools import cache

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.opponent import best_moves, opponent_move, position_value


@cache
def reference_value(board: str) -> int:
    """Independent plain minimax: +1 if the player to move wins with best play, 0 draw, -1 loss."""
    if B.winner(board) is not None:
        return -1
    moves = [i for i, c in enumerate(board) if c == "."]
    if not moves:
        return 0
    return max(-reference_value(B.apply_move(board, m)) for m in moves)


def reachable_positions():
    seen, stack = set(), [B.EMPTY_BOARD]
    while stack:
        board = stack.pop()
        if board in seen:
            continue
        seen.add(board)
        stack.extend(B.apply_move(board, m) for m in B.legal_moves(board))
    return seen


POSITIONS = reachable_positions()


def test_reachable_position_count():
    assert len(POSITIONS) == 5478  # the well-known number of legal tic-tac-toe positions


def test_empty_board_is_a_draw():
    assert position_value(B.EMPTY_BOARD) == 0


def test_opponent_always_picks_an_optimal_move():
    keys = [0, 1, 2**62 + 12345]
    for board in POSITIONS:
        if not B.legal_moves(board):
            continue
        target = reference_value(board)
        for key in keys:
            cell, was_random = opponent_move(board, key, 0.0)
            assert not was_random
            assert -reference_value(B.apply_move(board, cell)) == target, (board, cell)


@pytest.mark.parametrize("opponent_mark", ["X", "O"])
def test_opponent_never_loses(opponent_mark):
    """Agent tries every move; the opponent may choose any of its optimal moves."""

    def explore(board):
        won = B.winner(board)
        if won is not None:
            assert won == opponent_mark, f"opponent lost on {board}"
            return
        moves = B.legal_moves(board)
        if not moves:
            return
        if B.to_move(board) == opponent_mark:
            moves = best_moves(board)
        for m in moves:
            explore(B.apply_move(board, m))

    explore(B.EMPTY_BOARD)


def test_takes_immediate_win_over_slower_win():
    # X to move can win at once on 2 (row 0); a slower win exists too. Fastest is preferred.
    assert best_moves("XX.OO....") == (2,)


def test_unbiased_opening_tie_breaking():
    counts = Counter(opponent_move(B.EMPTY_BOARD, key, 0.0)[0] for key in range(9000))
    assert set(counts) == set(range(9))
    assert max(counts.values()) <= 1.5 * min(counts.values()), counts


def test_random_move_prob_one_is_uniform_over_legal_moves():
    board = "X...O...."
    counts = Counter(opponent_move(board, key, 1.0) for key in range(7000))
    assert all(was_random for _, was_random in counts)
    assert {cell for cell, _ in counts} == set(B.legal_moves(board))


def test_random_move_prob_validated():
    with pytest.raises(ValueError, match=r"random_move_prob in \[0, 1\]"):
        opponent_move(B.EMPTY_BOARD, 0, 1.5)


def test_same_seed_same_board_same_reply_across_instances():
    replies = []
    for _ in range(2):
        env = gym.make("textgym/TicTacToe-v0", agent_mark="O", random_move_prob=0.5)
        obs, info = env.reset(seed=1234)
        moves = [info["opponent_move"]]
        for _ in range(3):
            if info.get("outcome"):
                break
            obs, _, term, _, info = env.step(f"<move>{info['legal_moves'][0]}</move>")
            moves.append(info["opponent_move"])
        replies.append(moves)
    assert replies[0] == replies[1]


def test_reply_depends_on_seed():
    first = {
        gym.make("textgym/TicTacToe-v0", agent_mark="O").reset(seed=s)[1]["opponent_move"]
        for s in range(50)
    }
    assert len(first) > 3
