"""``benchmarks/tictactoe_eval.py``'s invalid-move trace, in process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from textgym.rollout import Trajectory

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _eval_script():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # its sibling _provenance
    spec = importlib.util.spec_from_file_location(
        "bench_tictactoe_eval", BENCH / "tictactoe_eval.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_each_invalid_move_with_the_position_it_answered():
    trace = _eval_script().invalid_move_trace(
        [_game(7, [False, True, False]), _game(8, [False]), _game(9, [True, True])]
    )
    assert [(t["seed"], t["step"]) for t in trace] == [(7, 1), (9, 0), (9, 1)]
    assert trace[0]["observation"] == "board 1" and trace[0]["completion"] == "<move>1</move>"
    assert trace[0]["reply"] == "board 2"
    assert trace[2]["reply"] == "game over"


def test_the_trace_stops_at_its_limit():
    games = [_game(seed, [True, True]) for seed in range(5)]
    assert len(_eval_script().invalid_move_trace(games, limit=3)) == 3
