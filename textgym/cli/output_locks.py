"""The locks on a subcommand's output (:mod:`textgym.cli.outputs` claims it under them).

A run holds an exclusive lock on its output (``filelock``, an ``flock`` on Unix) for as long as
it writes: ``DIR/.textgym.lock`` for a directory (the same file through every path to it), and
for a file both a lock file named from its device and inode (:func:`lock_path`) and an
``flock`` on the file itself (:func:`flocked`), so a symlink or a hard link to a file being
written meets the same lock; a file inside a folder that a running run holds is refused
(:func:`refuse_held_folders`). The lock file names its holder (pid, host, start time, command)
and is removed when the run ends; the kernel drops the lock when its holder dies, however it
dies, so a crashed run never blocks the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from textgym.errors import UsageError

__all__ = ["DIR_LOCK", "flock_held", "flocked", "lock_path", "locked", "refuse_held_folders"]

#: The lock file inside a locked output directory.
DIR_LOCK = ".textgym.lock"


def lock_path(output: Path, *, directory: bool) -> Path:
    """The lock file of an output: ``output/.textgym.lock`` for a directory; for a file,
    ``.textgym-DEV-INO.lock`` in the folder the path resolves to, named from the file's device
    and inode (the same through a symlink or a hard link), or ``.NAME.lock`` beside the resolved
    path while no file is there."""
    if directory:
        return output / DIR_LOCK
    real = output.resolve()
    try:
        info = real.stat()
    except OSError:
        return real.parent / f".{real.name}.lock"
    return real.parent / f".textgym-{info.st_dev}-{info.st_ino}.lock"


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


def _in_use(output: Path, flag: str, lock: Path, *, held: str = "") -> UsageError:
    what = f"{flag} {output}{held}"
    return UsageError(
        f"{what} is in use by another run ({_holder(lock)}); wait for it to finish or choose "
        f"another {flag} (the lock is {lock})"
    )


@contextlib.contextmanager
def locked(output: Path, flag: str, path: Path) -> Iterator[None]:
    """Hold the lock file ``path`` of ``output`` for the block, with the holder written into it.

    Raises:
        UsageError: another process holds it (named), or the lock file cannot be made.
    """
    from filelock import FileLock, Timeout

    lock = FileLock(path, timeout=0, is_singleton=False, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise _in_use(output, flag, path) from None
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


def flock_held(path: Path) -> bool:
    """Whether another open file holds an ``flock`` on ``path`` now (a live lock file, or an
    output file a run writes); ``False`` where it cannot be opened or there is no ``flock``."""
    try:
        import fcntl
    except ImportError:  # not Unix
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops the flock just taken
    return False


@contextlib.contextmanager
def flocked(real: Path, output: Path, flag: str) -> Iterator[None]:
    """Hold an ``flock`` on the output file itself for the block: every path to it (a hard link
    in another folder too) meets it. A no-op where there is no ``flock``.

    Raises:
        UsageError: another run holds it.
    """
    try:
        import fcntl
    except ImportError:  # not Unix: the lock file alone
        yield
        return
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its lock file is beside another name: holder unknown here
            raise UsageError(
                f"{flag} {output} is in use by another run, which writes the same file through "
                f"another path (a hard link); wait for it to finish or choose another {flag}"
            ) from None
        yield
    finally:
        os.close(fd)


def refuse_held_folders(real: Path, output: Path, flag: str) -> None:
    """Refuse a file inside a folder that a running run holds (a live ``.textgym.lock`` in one
    of the folders above the resolved file).

    Raises:
        UsageError: one of them is held (its holder named).
    """
    for folder in real.parents:
        lock = folder / DIR_LOCK
        if lock.is_file() and flock_held(lock):
            raise _in_use(output, flag, lock, held=f" is inside {folder}, which")
