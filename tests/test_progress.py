"""Progress of the phases that play episodes: a bar in a terminal that advances as each episode
finishes, plain periodic lines on stderr elsewhere, with elapsed time and episodes per second;
``--no-progress`` silences it."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import textgym  # noqa: F401  (registers the envs)
import textgym.progress
from textgym.cli import main
from textgym.envs.tictactoe.expert import MinimaxPolicy
from textgym.progress import EpisodeProgress, progress_text
from textgym.rollout import rollout

LINE = re.compile(r"^eval textgym/TicTacToe-v0: (\d+)/20 episodes \(\d+%\), (\d+) actions, .* s, ")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def plain(total, clock, monkeypatch, quiet=1.0, interval=1000.0):
    monkeypatch.setattr(textgym.progress, "QUIET_S", quiet)
    monkeypatch.setattr(textgym.progress, "INTERVAL_S", interval)
    stream = io.StringIO()
    return EpisodeProgress("eval x", total, stream=stream, terminal=False, clock=clock), stream


def test_plain_lines_wait_a_second_then_come_every_tenth_and_at_the_end(monkeypatch):
    clock = Clock()
    progress, stream = plain(100, clock, monkeypatch)
    with progress:
        for episode in range(100):
            clock.now = 0.05 * episode  # the first 20 episodes finish within the quiet second
            progress.actions(1)
            progress.episode_done()
        clock.now = 5.5
    lines = stream.getvalue().splitlines()
    done = [int(re.search(r": (\d+)/100", line).group(1)) for line in lines]
    # first line once a second has passed (episode 21 at 1.0 s), then every 10 episodes
    assert done == [21, 31, 41, 51, 61, 71, 81, 91, 100]
    assert lines[-1] == "eval x: 100/100 episodes (100%), 100 actions, 5.5 s, 18.18 episodes/s"


def test_a_phase_shorter_than_a_second_prints_nothing(monkeypatch):
    clock = Clock()
    progress, stream = plain(10, clock, monkeypatch)
    with progress:
        for _ in range(10):
            clock.now += 0.05
            progress.episode_done()
    assert stream.getvalue() == ""


def test_the_heartbeat_speaks_while_no_episode_finishes(monkeypatch):
    """A batch whose episodes all end together still shows it is alive (real time here)."""
    progress, stream = plain(4, time.monotonic, monkeypatch, quiet=0.0, interval=0.05)
    with progress:
        progress.actions(4)
        time.sleep(0.5)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("eval x: 0/4 episodes (0%), 4 actions, ") for line in lines)


def test_disabled_progress_shows_nothing(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(textgym.progress, "QUIET_S", 0.0)
    stream = io.StringIO()
    with EpisodeProgress("x", 3, enabled=False, stream=stream, terminal=False, clock=clock) as p:
        clock.now = 30.0
        for _ in range(3):
            p.episode_done()
    assert stream.getvalue() == ""


def test_the_bar_advances_with_each_episode():
    stream = io.StringIO()
    with EpisodeProgress("eval x", 3, stream=stream, terminal=True) as progress:
        task = progress._bar.tasks[0]
        seen = []
        for _ in range(3):
            progress.actions(2)
            progress.episode_done()
            seen.append((task.completed, task.fields["actions"]))
    assert seen == [(1, 2), (2, 4), (3, 6)]


def test_progress_text_counts_and_rate():
    assert progress_text("collect e", 3, None, 9, 2.0) == (
        "collect e: 3 episodes, 9 actions, 2.0 s, 1.50 episodes/s"
    )
    assert progress_text("collect e", 0, 8, 0, 0.0).endswith("- episodes/s")


def test_the_rollout_reports_each_finished_episode_before_the_last_turn():
    """on_episode_end fires as each episode ends, between turns, not all at the end."""
    events = []
    trajectories = rollout(
        lambda: gym.make("textgym/TicTacToe-v0", random_move_prob=1.0),
        MinimaxPolicy(seed=0),
        list(range(8)),
        batch_size=8,
        on_episode_end=lambda traj: events.append("episode"),
        on_turn=lambda actions: events.append(actions),
    )
    turns = [e for e in events if e != "episode"]
    assert sum(turns) == sum(t.num_steps for t in trajectories)  # every action counted
    assert turns[0] == 8 and turns == sorted(turns, reverse=True)  # live episodes per turn
    assert events.count("episode") == 8
    first_done = events.index("episode")
    assert first_done < len(events) - 1 - events[::-1].index(turns[-1])  # before the last turn


def stderr_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if LINE.match(line)]


def test_eval_prints_plain_progress_lines_when_piped(monkeypatch, capsys):
    monkeypatch.setattr(textgym.progress, "QUIET_S", 0.0)
    argv = ["eval", "textgym/TicTacToe-v0", "--episodes", "20", "--rollout-batch-size", "4"]
    assert main(argv) == 0
    lines = stderr_lines(capsys)
    done = [int(LINE.match(line).group(1)) for line in lines]
    assert done[-1] == 20 and done == sorted(done) and len(done) >= 5, lines
    assert done[0] < 20  # the count moved while episodes were still being played
    assert all(line.endswith(" episodes/s") for line in lines)
    assert main([*argv, "--no-progress"]) == 0
    assert stderr_lines(capsys) == []


def test_collect_shows_progress_too(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(textgym.progress, "QUIET_S", 0.0)
    out = tmp_path / "games.jsonl"
    assert main(["collect", "textgym/TicTacToe-v0", "--episodes", "6", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "collect textgym/TicTacToe-v0: 6/6 episodes (100%)" in err


@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
def test_eval_draws_a_bar_in_a_terminal():
    """stderr on a pseudo-terminal: rich draws the bar (episodes/s and the count), and the
    plain lines are not printed."""
    main_fd, child_fd = os.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    code = "import time, textgym.envs.tictactoe.expert as s\n"
    code += "act = s.MinimaxPolicy.act\n"
    code += "s.MinimaxPolicy.act = lambda self, c, i: (time.sleep(0.05), act(self, c, i))[1]\n"
    code += "from textgym.cli import main\n"
    code += (
        "main(['eval', 'textgym/TicTacToe-v0', '--episodes', '12', '--rollout-batch-size', '4'])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=child_fd,
        env=env,
    )
    os.close(child_fd)
    chunks = []
    while True:
        ready, _, _ = select.select([main_fd], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(main_fd)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "episodes/s" in screen and "eval textgym/TicTacToe-v0" in screen
    assert re.search(r"\b([1-9]|1[01])/12\b", screen), screen  # a frame before the end
    assert "episodes (" not in screen  # no plain line: the bar is drawn instead
