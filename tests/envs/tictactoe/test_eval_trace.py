"""``benchmarks/tictactoe_eval.py``'s invalid-move trace, in process."""

from __future__ import annotations

import json

import pytest

from textgym.rollout import Trajectory


def _game(seed: int, invalid: list[bool]) -> Trajectory:
    messages = [{"role": "system", "content": "rules"}]
    for step in range(len(invalid)):
        messages += [
            {"role": "user", "content": f"board {step}"},
            {"role": "assistant", "content": f"<move>{step}</move>"},
        ]
    messages.append({"role": "user", "content": "game over"})
    return Trajectory(
        env_id="textgym/TicTacToe-v0", seed=seed, task_id=None, messages=messages,
        invalid_actions=invalid,
    )  # fmt: skip


def test_each_invalid_move_with_the_position_it_answered(eval_script):
    trace = eval_script.invalid_move_trace(
        [_game(7, [False, True, False]), _game(8, [False]), _game(9, [True, True])]
    )
    assert [(t["seed"], t["step"]) for t in trace] == [(7, 1), (9, 0), (9, 1)]
    assert trace[0]["observation"] == "board 1" and trace[0]["completion"] == "<move>1</move>"
    assert trace[0]["reply"] == "board 2"
    assert trace[2]["reply"] == "game over"


def test_the_trace_stops_at_its_limit(eval_script):
    games = [_game(seed, [True, True]) for seed in range(5)]
    assert len(eval_script.invalid_move_trace(games, limit=3)) == 3


@pytest.mark.llm
@pytest.mark.slow
def test_selfplay_rows_play_the_model_against_another_as_each_mark(eval_script, tmp_path):
    pytest.importorskip("pettingzoo")
    pytest.importorskip("transformers")
    output = tmp_path / "eval.json"
    argv = "--model tiny --selfplay-against tiny --selfplay-temperature 0 --rows --games 2"
    argv += " --max-new-tokens 4"
    assert eval_script.main([*argv.split(), "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    rows = record["results"]["greedy"]["selfplay:tiny"]
    assert set(rows) == {"X", "O"} and record["complete"]
    assert all(row["games"] == 2 and row["opponent_temperature"] == 0 for row in rows.values())
    # The random tiny model answers nothing legal. As X ours moves first: every move invalid,
    # traced. As O it never moves: the other model, X, never made a legal first move.
    assert rows["X"]["invalid_action"]["rate"] == 1.0 and rows["X"]["invalid_moves"]
    assert rows["O"]["actions"] == 0 and rows["O"]["opponent_invalid_action"]["rate"] == 1.0


def test_selfplay_needs_a_model(eval_script):
    with pytest.raises(SystemExit):
        eval_script.parse_args(["--policy", "minimax", "--selfplay-against", "tiny"])
