"""Progress of a phase that plays episodes (``eval``, ``collect``, a trainer's evaluations).

:class:`EpisodeProgress` counts finished episodes and the actions taken so far, and shows them
with the elapsed time and the rate in episodes per second:

- in a terminal (stderr is a TTY), a ``rich`` bar that advances as each episode finishes and
  whose action count moves with every batched turn, so a batch whose episodes all end on the
  same turn still shows it is working;
- elsewhere (stderr piped to a file or a CI log), plain lines on stderr: none during the first
  :data:`QUIET_S` seconds (a phase shorter than that prints nothing), then one each time another
  :data:`EVERY_FRACTION` of the episodes has finished, or :data:`INTERVAL_S` seconds after the
  last line even when no episode finished (a heartbeat), and a last line when the phase ends.

``enabled=False`` (the commands' ``--no-progress``) shows nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["EVERY_FRACTION", "INTERVAL_S", "QUIET_S", "EpisodeProgress", "progress_text"]

#: Seconds before the first plain line: a phase shorter than this prints nothing.
QUIET_S = 1.0
#: Seconds between plain lines when no other reason to print came up (the heartbeat).
INTERVAL_S = 10.0
#: A plain line each time this fraction of the episodes more has finished.
EVERY_FRACTION = 0.1


def progress_text(
    description: str, done: int, total: int | None, actions: int, elapsed: float
) -> str:
    """One plain progress line.

    Args:
        description: What is being played, e.g. ``"eval textgym/TicTacToe-v0"``.
        done: Episodes finished.
        total: Episodes the phase plays (``None``: unknown).
        actions: Agent actions taken so far (one per live episode per batched turn).
        elapsed: Seconds since the phase began.

    Until the first episode finishes (a batch whose games all end on one turn finishes them
    together, at the end), the rate is of actions, which move with every batched turn.

    Example:
        >>> progress_text("eval textgym/TicTacToe-v0", 40, 100, 130, 12.5)
        'eval textgym/TicTacToe-v0: 40/100 episodes (40%), 130 actions, 12.5 s, 3.20 episodes/s'
        >>> progress_text("eval textgym/TicTacToe-v0", 0, 20, 60, 12.0)
        'eval textgym/TicTacToe-v0: 0/20 episodes (0%), 60 actions, 12.0 s, 5.00 actions/s, no episode finished yet'
    """
    share = f" ({done / total:.0%})" if total else ""
    count = f"{done}/{total}" if total is not None else str(done)
    rate = f"{done / elapsed:.2f} episodes/s" if elapsed > 0 else "- episodes/s"
    if done == 0 and actions > 0 and elapsed > 0:
        rate = f"{actions / elapsed:.2f} actions/s, no episode finished yet"
    return f"{description}: {count} episodes{share}, {actions} actions, {elapsed:.1f} s, {rate}"


class EpisodeProgress:
    """Shows the progress of a phase that plays episodes (see the module docstring).

    Use as a context manager; call :meth:`episode_done` as each episode finishes and
    :meth:`actions` after each batched turn (the ``on_episode_end`` and ``on_turn`` callbacks
    of :func:`textgym.rollout.rollout`).

    Args:
        description: What is being played, shown before the counts.
        total: Episodes the phase plays (``None``: unknown; :meth:`add_total` adds to it).
        enabled: ``False`` shows nothing (``--no-progress``).
        stream: Where to show it (default ``sys.stderr``).
        terminal: Draw a bar (``True``) or print plain lines (``False``); ``None``: a bar
            when ``stream`` is a terminal.
        transient: Remove the bar when the phase ends (the plain mode's last line stays).
        clock: Seconds, monotonic (for tests).
    """

    def __init__(
        self,
        description: str,
        total: int | None = None,
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        terminal: bool | None = None,
        transient: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description, self.total, self.enabled = description, total, enabled
        self.done = 0
        self.actions_taken = 0
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = _is_terminal(self._stream) if terminal is None else terminal
        self._transient, self._clock = transient, clock
        self._lock = threading.Lock()
        self._began = clock()
        self._last_line_at: float | None = None  # when the last plain line was printed
        self._last_line_done = 0
        self._bar: Any = None
        self._task: Any = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        # Read when created, so that a test can change them for the module.
        self._quiet_s, self._interval_s, self._every = QUIET_S, INTERVAL_S, EVERY_FRACTION

    @property
    def elapsed(self) -> float:
        """Seconds since the phase began."""
        return self._clock() - self._began

    def __enter__(self) -> EpisodeProgress:
        self._began = self._clock()
        if not self.enabled:
            return self
        if self._terminal:
            self._bar = _rich_bar(self._stream, self._transient)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, actions=0)
        else:
            self._heartbeat = threading.Thread(
                target=self._beat, name="textgym-progress", daemon=True
            )
            self._heartbeat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the display: stop the bar, or print the last plain line (if any was due)."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.enabled and not self._terminal:
            with self._lock:
                if self.elapsed >= self._quiet_s and (
                    self._last_line_at is None or self._last_line_done != self.done
                ):
                    self._print_line()

    def add_total(self, episodes: int) -> None:
        """Count ``episodes`` more to play (a phase made of several rollouts)."""
        with self._lock:
            self.total = (self.total or 0) + episodes
            if self._bar is not None:
                self._bar.update(self._task, total=self.total)

    def episode_done(self, *_: Any) -> None:
        """One more episode finished (takes and ignores the trajectory, as a callback)."""
        with self._lock:
            self.done += 1
            if self._bar is not None:
                self._bar.advance(self._task)
            elif self.enabled and self._due():
                self._print_line()

    def actions(self, count: int) -> None:
        """``count`` more agent actions were taken (one batched turn)."""
        with self._lock:
            self.actions_taken += count
            if self._bar is not None:
                self._bar.update(self._task, actions=self.actions_taken)

    def _due(self) -> bool:
        """Whether an episode that just finished brings another plain line (lock held)."""
        if self.elapsed < self._quiet_s:
            return False
        if self._last_line_at is None or not self.total:
            return True
        return self.done - self._last_line_done >= max(1.0, self._every * self.total)

    def _print_line(self) -> None:
        """Print the plain line now (lock held)."""
        line = progress_text(
            self.description, self.done, self.total, self.actions_taken, self.elapsed
        )
        print(line, file=self._stream, flush=True)
        self._last_line_at, self._last_line_done = self._clock(), self.done

    def _beat(self) -> None:
        """The heartbeat thread: a line when none was printed for ``INTERVAL_S`` seconds."""
        while not self._stop.wait(min(self._interval_s, 1.0) / 4):
            with self._lock:
                if self.elapsed < self._quiet_s:
                    continue
                since = self._last_line_at if self._last_line_at is not None else self._began
                if self._clock() - since >= self._interval_s:
                    self._print_line()


def _is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal a bar can be drawn on."""
    from rich.console import Console

    return Console(file=stream).is_terminal


def _rich_bar(stream: IO[str], transient: bool) -> Any:
    """The bar: description, bar, done/total episodes, actions, elapsed, episodes/s."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Finished episodes per second since the phase began (actions per second until the
        first episode finishes)."""

        def render(self, task: Any) -> Text:
            elapsed = task.elapsed or 0.0
            actions = task.fields.get("actions", 0)
            if not task.completed and actions and elapsed > 0:
                return Text(f"{actions / elapsed:.2f} actions/s")
            rate = f"{task.completed / elapsed:.2f}" if elapsed > 0 else "-"
            return Text(f"{rate} episodes/s")

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes, {task.fields[actions]} actions"),
        TimeElapsedColumn(),
        RateColumn(),
        console=Console(file=stream),
        transient=transient,
    )
