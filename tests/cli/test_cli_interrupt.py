"""Ctrl-C during ``textgym eval`` / ``collect``: what finished is saved, marked, and counted.

A real SIGINT is sent to this process at a chosen moment (by a policy after N turns, or while
a trajectory is being written), as a Ctrl-C at the terminal would.
"""

import json
import os
import signal

import pytest

import textgym.cli
import textgym.cli.building
from textgym.cli import main
from textgym.rollout import Trajectory

TTT = "textgym/TicTacToe-v0"
MANY_EPISODES = str(
    20_000
)  # more than the Ctrl-C at turn 40 lets play; bounded, so a lost Ctrl-C fails the test instead of hanging the suite (it did once under load)


def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture(autouse=True)
def default_sigint():
    """A shell starts background jobs with SIGINT ignored (the suite then hung here once);
    these tests are about the default handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def ctrl_c_at_turn(monkeypatch):
    """``ctrl_c_at_turn(n)``: the policy presses Ctrl-C on its n-th batched turn."""

    def arm(turn):
        build = textgym.cli.building.build_policy

        def build_and_arm(name, kwargs, make=None):
            policy, calls = build(name, kwargs, make), []

            class Interrupting:
                name = policy.name
                tokens_generated = policy.tokens_generated

                def act(self, conversations, infos):
                    calls.append(1)
                    if len(calls) == turn:
                        ctrl_c()
                    return policy.act(conversations, infos)

            return Interrupting()

        monkeypatch.setattr(textgym.cli.building, "build_policy", build_and_arm)

    return arm


def run(argv):
    """``main(argv)``; a Ctrl-C that escapes it fails the test (pytest would stop the session)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped textgym.cli.main", pytrace=False)


def one_line(err):
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_eval_output_keeps_what_finished_and_marks_it_incomplete(
    tmp_path, capsys, ctrl_c_at_turn, memory_cap
):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"complete": true, "episodes": 60000}')  # a previous run
    ctrl_c_at_turn(40)
    code = run(
        [
            "eval",
            "--overwrite",  # replace the previous run (refused without it)
            TTT,
            "--policy",
            "minimax",
            "--episodes",
            MANY_EPISODES,
            "--rollout-batch-size",
            "4",
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    line = one_line(capsys.readouterr().err)
    assert code == 130 and records
    assert summary["complete"] is False and summary["episodes"] == len(records)
    assert summary["episodes_requested"] == int(MANY_EPISODES)
    assert line == (
        f"textgym: interrupted after {len(records)} of {MANY_EPISODES} episodes; wrote them to "
        f'{out / "trajectories.jsonl"} and {out / "summary.json"} ("complete": false)'
    )
    seeds = [r["seed"] for r in records]
    assert seeds == sorted(seeds) and seeds[0] == 0  # in episode order (a finished later one too)


def test_ctrl_c_while_a_trajectory_is_written(tmp_path, capsys, monkeypatch):
    to_json, calls = Trajectory.to_json, []

    def to_json_then_ctrl_c(self):
        calls.append(1)
        if len(calls) == 5:
            ctrl_c()  # lands inside the write of the 5th record
        return to_json(self)

    monkeypatch.setattr(Trajectory, "to_json", to_json_then_ctrl_c)
    code = run(
        [
            "eval",
            TTT,
            "--policy",
            "random",
            "--episodes",
            "20",
            "--rollout-batch-size",
            "1",
            "--output-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 130 and "interrupted after 5 of 20 episodes" in one_line(capsys.readouterr().err)
    assert len(lines) == summary["episodes"] == 5 and summary["complete"] is False
    assert [json.loads(line)["seed"] for line in lines] == [0, 1, 2, 3, 4]


def test_collect_leaves_valid_jsonl_and_says_how_many(tmp_path, capsys, ctrl_c_at_turn, memory_cap):
    out = tmp_path / "sft.jsonl"
    ctrl_c_at_turn(40)
    code = run(
        [
            "collect",
            TTT,
            "--policy",
            "minimax",
            "--episodes",
            MANY_EPISODES,
            "--rollout-batch-size",
            "4",
            "--env-kwargs",
            '{"opponent": "random"}',
            "--filter",
            "outcome == win",
            "--output",
            str(out),
            "--no-progress",
        ]
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    line = one_line(capsys.readouterr().err)
    assert code == 130 and records and all(r["outcome"] == "win" for r in records)
    assert line.startswith("textgym: interrupted after ")
    assert f"; kept {len(records)} of " in line and line.endswith(
        f"wrote {out} ({len(records)} whole records, valid JSONL)"
    )


def test_eval_without_output_says_nothing_was_saved(capsys, ctrl_c_at_turn):
    ctrl_c_at_turn(3)
    assert run(["eval", TTT, "--policy", "random", "--episodes", "100", "--no-progress"]) == 130
    assert one_line(capsys.readouterr().err).endswith("; nothing saved (no --output-dir)")


def test_ctrl_c_before_playing_is_one_line(capsys, monkeypatch):
    def interrupted(name, kwargs, make=None):
        raise KeyboardInterrupt  # e.g. while a model loads

    monkeypatch.setattr(textgym.cli.building, "build_policy", interrupted)
    assert run(["eval", TTT, "--episodes", "2", "--no-progress"]) == 130
    assert one_line(capsys.readouterr().err) == "textgym: interrupted"


def test_a_complete_run_says_so(tmp_path):
    assert (
        run(
            [
                "eval",
                TTT,
                "--policy",
                "random",
                "--episodes",
                "6",
                "--rollout-batch-size",
                "4",
                "--output-dir",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    seeds = [
        json.loads(line)["seed"]
        for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()
    ]
    assert summary["complete"] is True and summary["episodes"] == 6 and seeds == list(range(6))
