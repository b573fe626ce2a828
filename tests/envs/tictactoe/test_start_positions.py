"""``reset(options={"board": ...})``: an episode from a given position, the agent to move."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.env import TicTacToeEnv
from textgym.envs.tictactoe.opponent import critical_positions, move_values


def _unfinished_positions() -> list[str]:
    """Every position reachable in a legal game with a move left to play."""
    seen, frontier = set(), [B.EMPTY_BOARD]
    while frontier:
        board = frontier.pop()
        if board in seen or B.winner(board) is not None or B.is_full(board):
            continue
        seen.add(board)
        frontier += [B.apply_move(board, cell) for cell in B.legal_moves(board)]
    return sorted(seen)


POSITIONS = _unfinished_positions()


@settings(max_examples=60, deadline=None)
@given(
    board=st.sampled_from(POSITIONS),
    seed=st.integers(0, 2**31),
    style=st.sampled_from(["full", "compact"]),
)
def test_an_episode_starts_from_the_board_with_the_mark_to_move(board, seed, style):
    env = TicTacToeEnv(opponent="minimax", prompt_style=style, agent_mark="X")
    obs, info = env.reset(seed=seed, options={"board": board})
    assert info["board"] == env.board == board
    assert info["agent_mark"] == B.to_move(board)
    assert info["legal_moves"] == B.legal_moves(board)
    assert info["opponent_move"] is None and info["outcome"] is None
    move = B.legal_moves(board)[0]
    _, reward, terminated, truncated, info = env.step(f"<move>{move}</move>")
    assert not info["invalid_action"] and info["agent_move"] == move
    after = B.apply_move(board, move)
    if info["opponent_move"] is None:
        assert info["board"] == after and terminated
    else:
        assert info["board"] == B.apply_move(after, info["opponent_move"])
    assert not truncated and isinstance(reward, float)


def test_the_same_seed_and_board_give_the_same_episode():
    env = gym.make("textgym/TicTacToe-v0", opponent="minimax", random_move_prob=0.5)
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=7, options={"board": "X...O...."})
        trace = [obs]
        done = False
        while not done:
            move = info["legal_moves"][0]
            obs, reward, terminated, truncated, info = env.step(f"<move>{move}</move>")
            trace.append((obs, reward))
            done = terminated or truncated
        runs.append(trace)
    assert runs[0] == runs[1]


def test_the_start_position_is_reported_in_the_first_observation():
    env = TicTacToeEnv()
    obs, info = env.reset(seed=0, options={"board": "XX.OO...."})
    assert "continues from this position" in obs and "You play X" in obs
    assert info["agent_mark"] == "X"
    _, reward, terminated, _, info = env.step("<move>2</move>")  # completes the top row
    assert terminated and reward == 1.0 and info["outcome"] == "win"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"board": "XXX......"}, "Impossible mark counts"),
        ({"board": "XXXOO...."}, "finished"),
        ({"board": "XOXXOOOXX"}, "finished"),
        ({"board": "X........", "agent_mark": "X"}, "Expected agent_mark 'O'"),
        ({"board": "abc"}, "9-character"),
        ({"board": 123}, "9-character"),
    ],
)
def test_a_bad_start_board_is_refused_in_one_line(options, message):
    env = TicTacToeEnv()
    with pytest.raises(ValueError, match=message) as caught:
        env.reset(seed=0, options=options)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("mark", ["X", "O"])
def test_without_a_board_a_game_starts_empty(mark):
    """The option is off by default: a new game (the golden-text tests pin its text)."""
    obs, info = TicTacToeEnv(agent_mark=mark, opponent="random").reset(seed=3)
    assert "A new game begins" in obs and "continues from this position" not in obs
    assert info["board"].count(".") == (9 if mark == "X" else 8)
    assert (info["opponent_move"] is None) == (mark == "X")


def test_critical_positions_are_the_unfinished_boards_where_a_move_can_change_the_result():
    critical = set(critical_positions())
    assert critical < set(POSITIONS)
    for board in POSITIONS:
        results = {
            (v > 0) - (v < 0) for _, v in move_values(board)
        }  # the result each legal move leads to, for the player to move
        assert (board in critical) == (len(results) > 1), board


def test_start_boards_draw_a_position_per_episode_from_its_seed():
    boards = ["X...O....", "XX.OO....", "....X...."]
    env = TicTacToeEnv(opponent="minimax", start_boards=boards)
    drawn = [env.reset(seed=seed)[1] for seed in range(40)]
    assert {info["board"] for info in drawn} == set(boards)
    assert all(info["agent_mark"] == B.to_move(info["board"]) for info in drawn)
    again = TicTacToeEnv(opponent="minimax", start_boards=boards)
    assert [again.reset(seed=seed)[1]["board"] for seed in range(40)] == [
        info["board"] for info in drawn
    ]


def test_start_board_prob_mixes_new_games_with_start_positions():
    env = TicTacToeEnv(agent_mark="X", start_boards="critical", start_board_prob=0.5)
    starts = [env.reset(seed=seed)[1]["board"] for seed in range(400)]
    new_games = sum(board == B.EMPTY_BOARD for board in starts)
    assert 150 < new_games < 250  # 200 expected; the stderr is 10
    assert all(board in set(critical_positions()) for board in starts if board != B.EMPTY_BOARD)
    never = TicTacToeEnv(start_boards="critical", start_board_prob=0.0)
    assert all(never.reset(seed=seed)[1]["board"] == B.EMPTY_BOARD for seed in range(50))


def test_the_board_option_wins_over_the_start_boards():
    env = TicTacToeEnv(start_boards=["XX.OO...."])
    assert env.reset(seed=0, options={"board": "X...O...."})[1]["board"] == "X...O...."


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("all", "'critical', a non-empty list"),
        ([], "'critical', a non-empty list"),
        ("no/such/boards.json", "cannot read a JSON list of boards from no/such/boards.json"),
        (["XXX......"], "Impossible mark counts"),
        (["XXXOO...."], "finished"),
    ],
)
def test_bad_start_boards_are_refused_in_one_line(value, message):
    with pytest.raises(ValueError, match=message) as caught:
        TicTacToeEnv(start_boards=value)
    assert "\n" not in str(caught.value)


def test_start_boards_reach_the_env_through_gymnasium_make():
    env = gym.make("textgym/TicTacToe-v0", start_boards=["XX.OO...."], start_board_prob=1.0)
    assert env.reset(seed=1)[1]["board"] == "XX.OO...."


def test_start_boards_come_from_a_json_file(tmp_path):
    boards = ["X...O....", "XX.OO...."]
    listed = tmp_path / "boards.json"
    listed.write_text(json.dumps(boards), encoding="utf-8")
    from_file = TicTacToeEnv(opponent="minimax", start_boards=str(listed))
    inline = TicTacToeEnv(opponent="minimax", start_boards=boards)
    assert [from_file.reset(seed=s)[1]["board"] for s in range(20)] == [
        inline.reset(seed=s)[1]["board"] for s in range(20)
    ]
    (tmp_path / "bad.json").write_text('{"boards": 1}', encoding="utf-8")
    with pytest.raises(ValueError, match="a .json file of one"):
        TicTacToeEnv(start_boards=str(tmp_path / "bad.json"))
    (tmp_path / "broken.json").write_text("[", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read a JSON list"):
        TicTacToeEnv(start_boards=str(tmp_path / "broken.json"))
