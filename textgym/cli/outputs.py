"""One rule for every subcommand's output: a lock against a second writer, and no silent
overwrite.

A run holds an exclusive lock on its output (``filelock``, an ``flock`` on Unix) for as long as
it writes: ``DIR/.textgym.lock`` for ``eval --output-dir``, ``sft`` and ``train``, and
``.NAME.lock`` beside the file for ``collect --output``. The lock file names its holder (pid,
host, start time, command); a second run on the same output is refused in one line that quotes
it. The kernel drops the lock when its holder dies, however it dies, so a crashed run never
blocks the next one; the lock file is removed when the run ends.

Under the lock, an output that already holds something is refused unless ``--overwrite`` (or
``--resume``, where a subcommand continues a run) says what to do with it, so no earlier result
is replaced without a word. What goes into a JSON output is first made :func:`json_safe` (no
NaN).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from textgym.cli.usage import UsageError

__all__ = [
    "DIR_LOCK",
    "claim_dir",
    "claim_file",
    "clear_run_dir",
    "json_safe",
    "lock_path",
    "run_entries",
]

#: The lock file inside a locked output directory.
DIR_LOCK = ".textgym.lock"

#: A directory textgym wrote a run into holds one of these (train and sft: run.json; eval:
#: summary.json or trajectories.jsonl).
_RUN_MARKERS = ("run.json", "summary.json", "trajectories.jsonl")


def json_safe(value: Any) -> Any:
    """``value`` with NaN floats as ``None`` (JSON has no NaN), through dicts and lists: what
    a subcommand writes into its JSON outputs."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def lock_path(output: Path, *, directory: bool) -> Path:
    """The lock file of an output: ``output/.textgym.lock`` for a directory, else
    ``.NAME.lock`` beside the file."""
    return output / DIR_LOCK if directory else output.parent / f".{output.name}.lock"


def _holder(lock: Path) -> str:
    """Who holds ``lock``, from what it wrote into the file, as words."""
    try:
        info = json.loads(lock.read_text(encoding="utf-8"))
        command = " ".join(str(part) for part in info["command"])
        if len(command) > 200:
            command = command[:197] + "..."
        return f"pid {info['pid']} on {info['host']}, started {info['started']}, command: {command}"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "its holder has not written its name yet"


@contextlib.contextmanager
def _locked(output: Path, flag: str, *, directory: bool) -> Iterator[None]:
    """Hold the lock of ``output`` for the block, with the holder written into the lock file.

    Raises:
        UsageError: another process holds it (named), or the lock file cannot be made.
    """
    from filelock import FileLock, Timeout

    path = lock_path(output, directory=directory)
    lock = FileLock(path, timeout=0, is_singleton=False, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(
            f"{flag} {output} is in use by another run ({_holder(path)}); wait for it to "
            f"finish or choose another {flag} (the lock is {path})"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot lock {flag} {output}: {exc}") from None
    try:
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        }
        # The name is a courtesy (the flock is the lock); "r+" opens without truncating.
        with contextlib.suppress(OSError), open(path, "r+", encoding="utf-8") as fh:
            fh.truncate()
            fh.write(json.dumps(record))
        yield
    finally:
        # Unlink while still holding it: a process that opened the old file before this sees
        # it unlinked once it gets the flock, and filelock starts over on a fresh file.
        with contextlib.suppress(OSError):
            path.unlink()
        lock.release()


def _lines(path: Path) -> int:
    """Newlines in the file ``path`` (its JSONL records), read in chunks."""
    count = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(2**20):
            count += chunk.count(b"\n")
    return count


def run_entries(directory: Path) -> list[str]:
    """The names in ``directory`` other than its lock file, sorted."""
    return sorted(p.name for p in directory.iterdir() if p.name != DIR_LOCK)


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def clear_run_dir(directory: Path, flag: str) -> None:
    """Delete what an earlier textgym run left in ``directory`` (all but the lock file).

    Raises:
        UsageError: ``directory`` holds no file textgym writes into every run (``run.json``,
            ``summary.json``, ``trajectories.jsonl``): it is not a run directory, and nothing is
            deleted.
    """
    names = run_entries(directory)
    if names and not any(name in names for name in _RUN_MARKERS):
        raise UsageError(
            f"{flag} {directory} holds {_listing(names)}, which is not a textgym run (no "
            f"{', '.join(_RUN_MARKERS)}); --overwrite replaces only a textgym run: choose an "
            f"empty or new {flag}"
        )
    for name in names:
        entry = directory / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@contextlib.contextmanager
def claim_dir(
    directory: Path,
    flag: str,
    *,
    overwrite: bool,
    resume: bool | None = None,
    clear: bool = False,
) -> Iterator[Path]:
    """Create and lock an output directory for the block; refuse one that holds a run.

    Args:
        directory: The output directory (created with its parents).
        flag: The option that named it, for messages (``"--output-dir"``).
        overwrite: ``--overwrite`` was given: a non-empty directory is accepted.
        resume: ``--resume`` was given (``None``: the subcommand has no ``--resume``): a
            non-empty directory is accepted, to be continued.
        clear: With ``overwrite``, delete the earlier run first (:func:`clear_run_dir`);
            otherwise the subcommand replaces its own files itself.

    Raises:
        UsageError: the directory cannot be written (:func:`textgym.results.check_dir`), another
            run holds it (named), it is not empty and neither ``overwrite`` nor ``resume`` was
            given, or both were.
    """
    from textgym.results import check_dir

    if overwrite and resume:
        raise UsageError("--overwrite and --resume contradict each other; give one of them")
    try:
        check_dir(directory, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with _locked(directory, flag, directory=True):
        names = run_entries(directory)
        if names and not (overwrite or resume):
            keep_going = "--resume to continue its run, " if resume is not None else ""
            raise UsageError(
                f"{flag} {directory} is not empty (it holds {_listing(names)}); pass "
                f"{keep_going}--overwrite to replace it, or choose another {flag}"
            )
        if names and overwrite and clear:
            clear_run_dir(directory, flag)
        yield directory


@contextlib.contextmanager
def claim_file(path: Path, flag: str, *, overwrite: bool) -> Iterator[Path]:
    """Check and lock an output file for the block; refuse a non-empty one without
    ``overwrite``.

    Raises:
        UsageError: the file cannot be written (:func:`textgym.results.check_file`), another
            run holds it (named), or it is not empty and ``overwrite`` was not given.
    """
    from textgym.results import check_file

    try:
        check_file(path, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with _locked(path, flag, directory=False):
        size = path.stat().st_size if path.exists() else 0
        if size and not overwrite:
            raise UsageError(
                f"{flag} {path} already holds {_lines(path)} lines ({size} bytes); pass "
                f"--overwrite to replace it, "
                f"or choose another {flag}"
            )
        yield path
