"""``textgym report``: one self-contained HTML page to look at eval, collect and train runs.

:func:`build_report` reads runs (:func:`~textgym.report.runs.load_run`) and renders the page
(:func:`~textgym.report.page.render_page`): a summary table with a column per run (mean return
± stderr, reward components, win/draw/loss, invalid-action and time-limit rates), the training
curves of train runs overlaid (reward and each component, invalid rate, KL, entropy, loss,
evaluation win/draw/loss over steps), and a browser of episodes with filters (run, outcome,
task, return range, invalid actions) that shows an episode turn by turn: tool calls and tool
responses as indented JSON, tic-tac-toe boards as boards, and the reward components of every
step. The file needs no server and no network; model text is data, never markup.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from textgym.checks import check_int
from textgym.report.page import render_page
from textgym.report.runs import Interner, NotARunError, Run, load_run
from textgym.results import write_atomic

__all__ = [
    "DEFAULT_MAX_EPISODES",
    "NotARunError",
    "Run",
    "build_report",
    "load_run",
    "write_report",
]

#: Episodes embedded per run by default. Measured: 2,000 random tic-tac-toe games make a 4.5 MB
#: page (system prompts and tool lists are stored once) that Chromium shows in 0.7 s.
DEFAULT_MAX_EPISODES = 2000


def _names(paths: Sequence[Path]) -> list[str]:
    """A distinct label per run: the directory name, with its parent's where two share it."""
    names = [p.name or str(p) for p in paths]
    for i, path in enumerate(paths):
        if names.count(path.name) > 1:
            names[i] = f"{path.parent.name}/{path.name}" if path.parent.name else str(path)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):  # still equal (the same path twice): number them
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[i] = f"{name} #{seen[name]}"
    return names


def build_report(
    run_paths: Sequence[str | os.PathLike[str]],
    *,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    title: str | None = None,
) -> tuple[str, list[Run]]:
    """Read the runs and render the report page.

    Args:
        run_paths: Run directories (``textgym eval --output-dir``, ``textgym train`` or
            ``sft --output-dir``) or ``textgym collect`` JSONL files, one column each.
        max_episodes: Embed at most this many episodes per run (the first ones); >= 0.
        title: The page's title (default: the run names).

    Returns:
        ``(html, runs)``: the page, and the runs as read (with their notes).

    Raises:
        NotARunError: a path holds no textgym run.
        ValueError: no paths, or ``max_episodes < 0``.
    """
    if not run_paths:
        raise ValueError("Expected at least one run directory or collect file, got none")
    check_int("max_episodes", max_episodes, low=0)
    paths = [Path(p) for p in run_paths]
    shared = Interner()
    runs = [
        load_run(path, name=name, max_episodes=max_episodes, interner=shared)
        for path, name in zip(paths, _names(paths))
    ]
    return render_page(runs, shared, max_episodes=max_episodes, title=title), runs


def write_report(
    run_paths: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    title: str | None = None,
) -> list[Run]:
    """:func:`build_report`, written to ``output`` (UTF-8); returns the runs as read.

    Raises:
        NotARunError, ValueError: as :func:`build_report`.
        OutputWriteError: ``output`` cannot be written (a full disk): the earlier page is
            unchanged (:func:`textgym.results.write_atomic`).
    """
    page, runs = build_report(run_paths, max_episodes=max_episodes, title=title)
    # In one step (a full disk keeps the old page whole); a name's bytes that are not UTF-8
    # are replaced.
    write_atomic(Path(output), page)
    return runs
