"""recipes/tictactoe_blunders.py: the positions where a policy's own games lost value."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from textgym.cli import main
from textgym.envs.tictactoe.board import board_after, to_move
from textgym.envs.tictactoe.opponent import value_preserving_moves

from ..._recipe_scripts import load

KWARGS = '{"agent_mark": "O", "opponent": "minimax", "prompt_style": "compact"}'


def _eval(tmp_path, policy, name):
    out = tmp_path / name
    argv = ["eval", "textgym/TicTacToe-v0", "--env-kwargs", KWARGS, "--policy", policy]
    assert main([*argv, "--episodes", "12", "--no-progress", "--output-dir", str(out)]) == 0
    return out


def test_random_play_against_optimal_blunders_where_it_loses(tmp_path, monkeypatch, capsys):
    script = load("tictactoe_blunders")
    games = _eval(tmp_path, "random", "random")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert script.main([str(games)]) == 0
    boards = json.loads((tmp_path / "blunders.json").read_text())
    assert boards and all(to_move(b) == "O" for b in boards)
    losses = sum(
        json.loads(line)["outcome"] == "loss"
        for line in (games / "trajectories.jsonl").read_text().splitlines()
    )
    lines = capsys.readouterr().out.splitlines()
    assert sum(int(line.rsplit("lost ", 1)[1]) for line in lines[:-1]) == losses > 0
    # Each listed position holds a move the policy played that loses value there.
    env_records = [json.loads(x) for x in (games / "trajectories.jsonl").read_text().splitlines()]
    env = gym.make("textgym/TicTacToe-v0", **json.loads(KWARGS))
    found = {b for r in env_records for b, m, _ in script.game_blunders(env, r)}
    assert found == set(boards)
    for record in env_records:
        for board, move, moves in script.game_blunders(env, record):
            assert move not in value_preserving_moves(board) and board_after(moves) == board
    # Each game starts at its first blunder's position, with the conversation that led there.
    games = json.loads((tmp_path / "blunder_games.json").read_text())
    firsts = {
        script.game_blunders(env, r)[0][2] for r in env_records if script.game_blunders(env, r)
    }
    assert {tuple(g) for g in games} == firsts and len(games) == len(firsts)
    for moves in games:
        _, info = env.reset(seed=0, options={"moves": moves})
        assert info["board"] in boards and len(info["history"]) == len(moves) - 1


def test_optimal_play_has_no_blunder(tmp_path, monkeypatch, capsys):
    games = _eval(tmp_path, "minimax", "minimax")
    monkeypatch.chdir(tmp_path)
    assert load("tictactoe_blunders").main([str(games)]) == 2
    assert "no move lost value" in capsys.readouterr().err
    assert not (tmp_path / "blunders.json").exists()
    assert not (tmp_path / "blunder_games.json").exists()


@pytest.mark.parametrize("argv", [[], ["{gsm}"]])
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, argv):
    if argv:
        out = tmp_path / "gsm"
        run = ["eval", "textgym/GSM8K-v0", "--policy", "gold", "--episodes", "1"]
        assert main([*run, "--no-progress", "--output-dir", str(out)]) == 0
        argv = [str(out)]
    capsys.readouterr()
    assert load("tictactoe_blunders").main(argv) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
