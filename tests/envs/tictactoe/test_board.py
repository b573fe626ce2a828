"""Pure rules: table-driven cases and a hypothesis state machine over the board."""

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from textgym.envs.tictactoe import board as B


@pytest.mark.parametrize(
    ("board", "move", "expected"),
    [
        (".........", 4, "....X...."),
        ("....X....", 0, "O...X...."),
        ("O...X....", 8, "O...X...X"),
        ("XO.......", 2, "XOX......"),
    ],
)
def test_apply_move(board, move, expected):
    assert B.apply_move(board, move) == expected


@pytest.mark.parametrize(
    ("board", "move", "message"),
    [
        ("....X....", 4, "occupied"),
        (".........", 9, "0..8"),
        (".........", -1, "0..8"),
        (".........", True, "0..8"),
        ("XXXOO....", 5, "game is over"),
        ("XOXXOOOXX", 0, "game is over"),
    ],
)
def test_apply_move_rejects(board, move, message):
    with pytest.raises(ValueError, match=message):
        B.apply_move(board, move)


@pytest.mark.parametrize(
    ("board", "winner"),
    [
        ("XXXOO....", "X"),
        ("OOOXX.X.X", "O"),
        ("X..X..X..", "X"),
        ("..O.O.O..", "O"),
        ("XOXXOOOXX", None),
        (".........", None),
        ("XO.......", None),
    ],
)
def test_winner(board, winner):
    assert B.winner(board) == winner


@pytest.mark.parametrize("board", ["XX.......", "X" * 9, "abc......", "....", "XXXOOO..."])
def test_validate_board_rejects(board):
    with pytest.raises(ValueError):
        B.validate_board(board)


def test_legal_moves_empty_when_won():
    assert B.legal_moves("XXXOO....") == []
    assert B.legal_moves("X........") == list(range(1, 9))


class BoardMachine(RuleBasedStateMachine):
    """Random move sequences, legal or not: the rules never overwrite and end games correctly."""

    def __init__(self):
        super().__init__()
        self.board = B.EMPTY_BOARD

    @rule(cell=st.integers(min_value=-2, max_value=10))
    def play(self, cell):
        before = self.board
        over = B.winner(before) is not None or B.is_full(before)
        if over or not 0 <= cell <= 8 or before[cell] != B.EMPTY:
            with pytest.raises(ValueError):
                B.apply_move(before, cell)
            return
        after = B.apply_move(before, cell)
        # No overwrite: exactly one cell changed, from empty to the mover's mark.
        changed = [i for i in range(9) if before[i] != after[i]]
        assert changed == [cell] and after[cell] == B.to_move(before)
        self.board = after

    @invariant()
    def consistent(self):
        B.validate_board(self.board)
        won = B.winner(self.board)
        if won is not None:
            assert any(all(self.board[i] == won for i in line) for line in B.LINES)
            # The winner is the player who moved last.
            assert won == B.other(B.to_move(self.board))
        draw = won is None and not B.legal_moves(self.board)
        if draw:
            assert B.is_full(self.board)


TestBoardMachine = BoardMachine.TestCase
