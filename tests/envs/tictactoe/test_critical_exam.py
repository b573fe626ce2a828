"""``recipes/tictactoe_exam.py``: the critical-position exam and its exploration probe, in
process with scripted policies (no model)."""

from __future__ import annotations

import json

import pytest

from textgym.envs.tictactoe import MinimaxPolicy
from textgym.envs.tictactoe.board import to_move
from textgym.envs.tictactoe.opponent import critical_positions, value_preserving_moves
from textgym.policies import RandomPolicy
from textgym.types import Completion

from ..._recipe_scripts import load


@pytest.fixture(scope="module")
def exam_script():
    return load("tictactoe_exam")


@pytest.mark.parametrize(("mark", "count"), [("X", 1732), ("O", 1459)])
def test_every_critical_position_is_shown_once_as_a_start_state(exam_script, mark, count):
    positions = exam_script.critical_exam_positions(mark, "compact")
    boards = [info["board"] for _, info in positions]
    assert len(boards) == count == len(set(boards))
    assert boards == [b for b in critical_positions() if to_move(b) == mark]
    for conversation, info in positions[:50]:
        assert [m["role"] for m in conversation] == ["system", "user"]
        assert info["agent_mark"] == mark and f"You are {mark}" in conversation[0]["content"]
        assert info["legal_moves"] == [i for i, c in enumerate(info["board"]) if c == "."]


def test_the_minimax_passes_and_random_play_fails_the_critical_exam(exam_script):
    positions = exam_script.critical_exam_positions("O", "compact")
    minimax = exam_script.take_exam(MinimaxPolicy(reasoning=False), positions, 256)
    assert minimax["safe"]["rate"] == 1.0 and minimax["unsafe"] == []
    random = exam_script.take_exam(RandomPolicy(seed=0), positions, 256)
    assert 0.2 < random["safe"]["rate"] < 0.9
    assert len(random["unsafe"]) == sum(random["unsafe_by_marks"].values())


class _AlwaysCell:
    """Plays one fixed cell, or the first safe move on boards in ``safe_on``."""

    def __init__(self, cell: int, safe_on: set[str] = frozenset()) -> None:
        self.cell, self.safe_on = cell, safe_on

    def act(self, conversations, infos):
        moves = [
            value_preserving_moves(i["board"])[0] if i["board"] in self.safe_on else self.cell
            for i in infos
        ]
        return [Completion(text=f"<move>{m}</move>") for m in moves]


def test_explore_counts_safe_samples_per_unsafe_position(exam_script):
    positions = exam_script.critical_exam_positions("O", "compact")
    greedy = exam_script.take_exam(_AlwaysCell(4), positions, 256)
    unsafe = greedy["unsafe"][:6]
    assert len(unsafe) == 6 and all(u["move"] == 4 or u["move"] is None for u in unsafe)
    # A sampler that finds the safe move in two of the six positions and never in the rest.
    finds = {unsafe[0]["board"], unsafe[3]["board"]}
    explore = exam_script.explore_unsafe(_AlwaysCell(4, finds), positions, unsafe, 5, 7)
    assert [u["p_safe"] for u in unsafe] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert explore == {
        "samples": 5,
        "positions": 6,
        "mean_p_safe": pytest.approx(2 / 6),
        "never_safe": 4,
        "group_of_8_has_safe": pytest.approx(2 / 6),
    }
    assert sum(unsafe[1]["sampled_moves"].values()) == 5


def test_explore_samples_needs_a_model(exam_script, capsys):
    with pytest.raises(SystemExit):
        exam_script.main(["--policy", "minimax", "--explore-samples", "4"])
    assert "--explore-samples samples a model" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["minimax", "random"])
def test_the_exam_script_writes_each_mark(exam_script, tmp_path, capsys, policy):
    output = tmp_path / "exam.json"
    argv = ["--policy", policy, "--exam-set", "games", "--games", "100", "--output", str(output)]
    assert exam_script.main(argv) == 0
    result = json.loads(output.read_text())
    for mark in ("X", "O"):
        row = result[mark]
        assert row["positions"] > 0 and row["invalid"]["rate"] == 0.0
        if policy == "minimax":  # the optimal player keeps every position's value
            assert row["safe"]["rate"] == 1.0 and row["unsafe"] == []
        else:  # the unsafe moves listed are the ones the rate counts, each truly unsafe
            assert 0 < len(row["unsafe"]) == round((1 - row["safe"]["rate"]) * row["positions"])
            assert all(u["move"] not in value_preserving_moves(u["board"]) for u in row["unsafe"])
    assert capsys.readouterr().out.count("positions, safe") == 2
