"""``reset(options={"moves": ...})``: a game part-way through, with its conversation so far."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.env import TicTacToeEnv
from textgym.policies import conversation_start
from textgym.policies.scripted import RandomPolicy
from textgym.rollout import rollout


def _played_game(env: TicTacToeEnv, seed: int, mark: str, picks: list[int]):
    """A game played through ``step`` from the empty board: its messages (without the system
    prompt), the cells in play order, the index in ``moves`` of each agent turn, the outcome."""
    obs, info = env.reset(seed=seed, options={"agent_mark": mark})
    messages, moves, turns = [{"role": "user", "content": obs}], [], []
    if info["opponent_move"] is not None:
        moves.append(info["opponent_move"])
    for pick in picks:
        cell = info["legal_moves"][pick % len(info["legal_moves"])]
        turns.append(len(moves))
        obs, _, terminated, _, info = env.step(f"<move>{cell}</move>")
        messages += [{"role": "assistant", "content": f"<move>{cell}</move>"}]
        messages += [{"role": "user", "content": obs}]
        moves.append(cell)
        if info["opponent_move"] is not None:
            moves.append(info["opponent_move"])
        if terminated:
            return messages, moves, turns, info["outcome"]
    raise AssertionError("the game did not end within 5 agent moves")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    mark=st.sampled_from(["X", "O"]),
    style=st.sampled_from(["full", "compact"]),
    picks=st.lists(st.integers(0, 8), min_size=5, max_size=5),
    random_move_prob=st.sampled_from([0.0, 0.5]),
)
def test_a_game_resumed_from_its_moves_is_the_same_conversation_and_game(
    seed, mark, style, picks, random_move_prob
):
    env = TicTacToeEnv(prompt_style=style, random_move_prob=random_move_prob)
    messages, moves, turns, outcome = _played_game(env, seed, mark, picks)
    for k, at in enumerate(turns):
        obs, info = env.reset(seed=seed, options={"moves": moves[:at]})
        # The conversation up to the agent's k-th turn, exactly as the game showed it.
        assert info["history"] + [{"role": "user", "content": obs}] == messages[: 2 * k + 1]
        assert info["agent_mark"] == mark and info["board"] == B.board_after(moves[:at])
        # The same seed plays on as the full game did: same opponent replies, same outcome.
        for j in range(k, len(turns)):
            obs, _, terminated, _, info = env.step(messages[2 * j + 1]["content"])
            assert obs == messages[2 * j + 2]["content"]
        assert terminated and info["outcome"] == outcome


def test_a_rollout_puts_the_history_between_the_system_prompt_and_the_first_observation():
    def make_env():
        return gym.make("textgym/TicTacToe-v0", prompt_style="compact", start_boards=[[4, 0, 8]])

    (trajectory,) = rollout(make_env, RandomPolicy(seed=0, reasoning=False), [3])
    first = trajectory.messages
    assert [m["role"] for m in first[:5]] == ["system", "user", "assistant", "user", "assistant"]
    assert first[2]["content"] == "<move>0</move>"  # O's earlier move, from the moves
    obs, info = make_env().reset(seed=3)
    assert first[:4] == conversation_start(obs, info)
    assert trajectory.num_steps == (len(first) - 4) // 2  # the history's turn is no step


def test_start_boards_mix_boards_and_games_from_a_json_file(tmp_path):
    path = tmp_path / "starts.json"
    path.write_text(json.dumps(["XO.......", [4, 0, 8]]), encoding="utf-8")
    env = TicTacToeEnv(start_boards=str(path))
    seen = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        seen.add((info["board"], len(info.get("history", ()))))
    assert seen == {("XO.......", 0), ("O...X...X", 2)}


def test_a_board_without_history_and_a_fresh_game_have_no_history_key():
    env = TicTacToeEnv()
    assert "history" not in env.reset(seed=0)[1]
    assert "history" not in env.reset(seed=0, options={"board": "X........"})[1]
    assert env.reset(seed=0, options={"moves": []})[1]["history"] == []


@pytest.mark.parametrize(
    "options, message",
    [
        ({"moves": [4, 4]}, "occupied"),
        ({"moves": [0, 3, 1, 4, 2, 5]}, "game is over"),
        ({"moves": [0, 3, 1, 4, 2]}, "leave a move to play"),
        ({"moves": "45"}, "list of cells"),
        ({"moves": [True]}, "list of cells"),
        ({"moves": [9]}, "0..8"),
        ({"moves": [4], "agent_mark": "X"}, "Expected agent_mark 'O'"),
        ({"moves": [4], "board": "X........"}, "'board' and 'moves'"),
    ],
)
def test_bad_moves_are_refused_in_one_line_and_the_env_is_unchanged(options, message):
    env = TicTacToeEnv()
    env.reset(seed=1)
    before = env.board
    with pytest.raises(ValueError, match=message) as error:
        env.reset(seed=2, options=options)
    assert "\n" not in str(error.value) and env.board == before


def test_a_bad_game_in_start_boards_is_refused_at_construction():
    with pytest.raises(ValueError, match="occupied"):
        TicTacToeEnv(start_boards=[[4, 4]])
