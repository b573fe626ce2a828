"""The options a study needs from the command line (issue 57): the expert's style and
tie-break, an opponent range for ``collect``/``eval``, and SFT on a covering subset."""

from __future__ import annotations

import json

import pytest

from textgym.cli import main


def _collect(tmp_path, *extra):
    out = tmp_path / "games.jsonl"
    argv = ["collect", "textgym/TicTacToe-v0", "--policy", "minimax", "--no-reasoning"]
    assert main([*argv, "--episodes", "40", "--output", str(out), "--no-progress", *extra]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def _first_moves(records):
    return {r["messages"][2]["content"] for r in records if r["messages"][1]["role"] == "user"}


def test_a_first_tie_break_answers_each_position_one_way(tmp_path):
    first = _collect(tmp_path, "--minimax-style", "safe_best", "--minimax-tie-break", "first")
    uniform = _collect(tmp_path, "--minimax-style", "safe_best", "--overwrite")
    assert len(_first_moves(first)) == 1  # the empty board, always the same answer
    assert len(_first_moves(uniform)) > 1


def test_an_opponent_range_draws_each_episode_s_opponent(tmp_path):
    weak = _collect(tmp_path, "--opponent-random-move-prob", "1", "1")
    strong = _collect(tmp_path, "--opponent-random-move-prob", "0", "0", "--overwrite")
    assert sum(r["return"] == 1.0 for r in weak) > 20  # the expert beats a random player
    assert all(r["return"] == 0.5 for r in strong)  # and draws the optimal one


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--env-url", "http://127.0.0.1:1"], "applies to a local env"),
        (["--minimax-style", "bogus"], "cannot build policy 'minimax'"),
        (["--policy", "lookup_expert"], "it is the expert of textgym/EmailToolUse-v1 only"),
    ],
)
def test_bad_study_options_are_one_line(tmp_path, capsys, argv, words):
    base = ["collect", "textgym/TicTacToe-v0", "--episodes", "2", "--output", str(tmp_path / "x")]
    if "--env-url" in argv:
        argv = [*argv, "--opponent-random-move-prob", "0", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, *argv])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("textgym: error: ") and words in line


@pytest.mark.llm
def test_sft_on_a_covering_subset_keeps_every_prompt(tmp_path):
    pytest.importorskip("torch")
    records = _collect(tmp_path, "--opponent-random-move-prob", "0", "1")
    out = tmp_path / "sft"
    argv = ["sft", "--data", str(tmp_path / "games.jsonl"), "--model", "tiny", "--cover"]
    assert main([*argv, "--output-dir", str(out), "--no-progress", "--no-tensorboard"]) == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["conversations_read"] == len(records) == 40
    assert 0 < summary["conversations"] < 40
