"""``textgym report``: one self-contained HTML page of eval, collect and train runs.

The page holds the summary table (a column per run), the training curves (overlaid when
several runs are given) and a browser of the episodes (filters by run, outcome, task and
return; each episode turn by turn, with tool calls, boards and per-step rewards). It needs no
server and no network: open it in any browser. Lines of a run that cannot be read are listed
in the page, not fatal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Annotated

import tyro

from textgym.data import file_kind
from textgym.errors import OutputWriteError, UsageError
from textgym.report import DEFAULT_MAX_EPISODES, NotARunError, write_report
from textgym.results import check_file

__all__ = ["ReportConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class ReportConfig:
    """Write one self-contained HTML report of eval, collect and train runs."""

    runs: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="RUN")]
    """Run directories (eval --output-dir, train or sft --output-dir) or collect JSONL files,
    space-separated; one column each."""
    output: str = "report.html"
    """The HTML file to write."""
    max_episodes: int = DEFAULT_MAX_EPISODES
    """Embed at most this many episodes per run (the first ones; the summary counts all)."""
    title: str | None = None
    """Title of the page (None: the run names)."""

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("expected at least one run directory or collect file")
        if self.max_episodes < 0:
            raise ValueError(f"expected --max-episodes >= 0, got {self.max_episodes}")


Config = ReportConfig


def run(config: ReportConfig) -> int:
    """Read the runs, write the page, print where it is and what was left out."""
    out = Path(config.output)
    for path in config.runs:
        _check_run_file(path)
    try:
        check_file(out, "--output")
        runs = write_report(config.runs, out, max_episodes=config.max_episodes, title=config.title)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    except OutputWriteError:  # a full disk: one line (exit 1), the earlier page unchanged
        raise
    except (ValueError, OSError) as exc:
        raise UsageError(f"report: {exc}") from None
    episodes = sum(len(r.episodes) for r in runs)
    total = sum(r.episodes_total for r in runs)
    notes = sum(len(r.notes) for r in runs)
    parts = [f"{len(runs)} run{'s' * (len(runs) != 1)}", f"{episodes} episodes"]
    if total > episodes:
        parts[-1] += f" of {total} (--max-episodes {config.max_episodes} per run)"
    if notes:
        parts.append(f"{notes} note{'s' * (notes != 1)} on unreadable input, shown in the page")
    print(f"wrote {out} ({'; '.join(parts)}; {out.stat().st_size / 1e6:.2f} MB)")
    return 0


#: Non-blank lines of a file run read to find one episode record before it is refused.
_LINES_LOOKED_AT = 100


def _is_record(line: bytes) -> bool:
    """Whether a line is an episode record: a JSON object with a ``messages`` list and a
    numeric ``return`` (a ``textgym collect`` record, or a trajectory of ``eval``); one whose
    return is NaN or infinite counts (the report notes it)."""
    try:
        row = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return False
    ret = row.get("return") if isinstance(row, dict) else None
    return (
        isinstance(row, dict)
        and isinstance(row.get("messages"), list)
        and isinstance(ret, (int, float))
        and not isinstance(ret, bool)
    )


def _check_run_file(path: str) -> None:
    """Refuse a run argument that exists and is not a directory unless it is a regular file
    that is empty or holds an episode record in its first non-blank lines (a directory, or a
    path that is not there, is left to :func:`textgym.report.write_report`).

    Raises:
        UsageError: one line naming the path and what it is: a FIFO or a device (never
            opened, so nothing blocks), unreadable, or a file with no episode record
            (``/etc/hostname``).
    """
    expected = (
        "expected a run directory (eval --output-dir, train or sft --output-dir) or the JSONL "
        "file of textgym collect --output (or an eval's trajectories.jsonl)"
    )
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # not there: write_report says so
    if stat.S_ISDIR(mode):
        return
    if not stat.S_ISREG(mode):
        raise UsageError(f"report: {path!r} is {file_kind(mode)}, not a file; {expected}")
    looked = 0
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                if _is_record(line):
                    return
                looked += 1
                if looked >= _LINES_LOOKED_AT:
                    break
    except OSError as exc:
        raise UsageError(
            f"report: cannot read {path!r} ({exc.strerror or exc}); {expected}"
        ) from None
    if looked:
        raise UsageError(
            f"report: {path!r} is not a textgym run: no episode record (a JSON object with "
            f"messages and return) in its first {looked} non-blank line{'s' * (looked != 1)}; "
            f"{expected}"
        )
