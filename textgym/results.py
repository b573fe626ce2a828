"""Result files that survive an interrupted run (``textgym eval --output``, ``textgym collect``).

Records are written as episodes finish: :func:`open_jsonl` gives a :class:`JsonlWriter` that
appends one JSON line per record and flushes it, and on leaving cuts off a line that an error
left half written, so the file always holds whole records (:attr:`JsonlWriter.count` of
them). :func:`hold_interrupts` holds a Ctrl-C back while a record is written and counted, so
the file and the count of what is in it agree. :func:`write_json` replaces a file in one step
(a temporary file, then ``os.replace``): a reader sees the old summary or the new one, never
half of one. :func:`check_dir` and :func:`check_file` find a bad output location (a file where
a directory is wanted, a path under a file, a read-only place) before a run starts, not after.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from textgym.errors import OutputWriteError, SetupError

__all__ = [
    "JsonlWriter",
    "apply_umask",
    "check_dir",
    "check_file",
    "default_file_mode",
    "hold_interrupts",
    "open_jsonl",
    "os_error_behind",
    "saving_into",
    "unshare",
    "write_atomic",
    "write_failure",
    "write_json",
    "write_lines",
]


def _reason(exc: OSError) -> str:
    """``"Not a directory: '/etc/hostname/x'"``: what failed, and where (not always the path given)."""
    return f"{exc.strerror}: {exc.filename!r}" if exc.strerror and exc.filename else str(exc)


def _file_above(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` if it is a file (nothing can be made under it)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _dangling(path: Path) -> Path | None:
    """``path`` or the nearest of its ancestors that is a symbolic link to nothing, if any."""
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():
            return link
    return None


def _dangling_message(link: Path, flag: str, path: Path) -> str:
    target = Path(os.path.join(link.parent, os.readlink(link)))
    where = f"{flag} {path}" if link == path else f"{flag} {path}: {link}"
    return (
        f"{where} is a symbolic link to {target}, which does not exist; create it "
        f"(mkdir -p {target}) or choose another {flag}"
    )


#: What a path that is neither a file nor a directory is, in words.
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def check_dir(path: Path, flag: str) -> None:
    """Create the directory ``path`` (with its parents) now, and check that files can be made in it.

    Args:
        path: The output directory.
        flag: The option that named it (``"--output"``), for the message.

    Raises:
        SetupError: ``path`` is an existing file, a symbolic link to nothing (or under one),
            cannot be created, or is not writable; the message names ``flag``, the path and the
            operating system's reason.
    """
    if path.exists() and not path.is_dir():
        raise SetupError(f"{flag} {path} is a file; expected a directory (or a path to create one)")
    if (blocker := _file_above(path)) is not None:
        raise SetupError(f"cannot write to {flag} {path}: {blocker} is a file, not a directory")
    if (link := _dangling(path)) is not None:
        raise SetupError(_dangling_message(link, flag, path))
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise SetupError(f"cannot write to {flag} {path}: {_reason(exc)}") from None


def check_file(path: Path, flag: str) -> None:
    """Check now that the file ``path`` can be written: create its folder, leave the file as it is.

    Nothing is opened that could block or write elsewhere: a path that is not a regular file (a
    device such as ``/dev/full``, a FIFO, a socket) is refused by its type alone.

    Args:
        path: The output file. An existing file is not changed; a new one is created and removed
            (through a symbolic link: where the link points).
        flag: The option that named it, for the message.

    Raises:
        SetupError: ``path`` is a directory or not a regular file, its folder cannot be created
            (e.g. it lies under a file), or the file cannot be opened for writing.
    """
    if path.is_dir():
        raise SetupError(
            f"{flag} {path} is a directory; expected a file, e.g. {path / 'sft.jsonl'}"
        )
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise SetupError(
                f"{flag} {path} is {_kind(mode)}, not a regular file; expected a file to write "
                f"JSONL records into, e.g. sft.jsonl"
            )
    if (blocker := _file_above(path)) is not None:
        raise SetupError(f"cannot write {flag} {path}: {blocker} is a file, not a directory")
    if (link := _dangling(path.parent)) is not None:
        raise SetupError(_dangling_message(link, flag, path))
    real = path.resolve()  # a dangling symlink: the file it names
    existed = real.exists()
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        with open(real, "ab"):  # append mode: an existing file keeps its bytes
            pass
    except OSError as exc:
        raise SetupError(f"cannot write {flag} {path}: {_reason(exc)}") from None
    if not existed:
        real.unlink()


@contextlib.contextmanager
def hold_interrupts() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block ends, then raise it as usual.

    For short blocks that must not stop half way: writing one record and counting it. Outside
    the main thread (where signal handlers cannot be set) the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and callable(previous):
            previous(*held[0])  # the default handler raises KeyboardInterrupt


def default_file_mode() -> int:
    """The permission bits ``open(path, "w")`` gives a new file: ``0o666`` less the umask.

    ``tempfile.mkstemp`` (and libraries that write through it, such as ``safetensors``) create
    files with mode ``0o600`` whatever the umask; files meant for the user get this mode
    instead. The umask is read from ``/proc/self/status`` where Linux has it (reading it with
    ``os.umask`` means setting it for a moment, which other threads could see).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def apply_umask(path: Path) -> None:
    """Give the file ``path``, or every file under the directory ``path``, the mode a plain
    ``open`` would have given it (:func:`default_file_mode`), e.g. after ``save_pretrained``,
    whose ``model.safetensors`` comes out ``0o600``."""
    mode = default_file_mode()
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        file.chmod(mode)


def write_failure(exc: OSError, path: Path, keeps: str) -> OutputWriteError:
    """The one-line error for ``exc``, met while writing ``path``: the file, the operating
    system's reason, what is kept, and the fix. ``errno``, ``strerror`` and ``filename`` are
    the failure's, as for any ``OSError``.

    Args:
        exc: The failure (``ENOSPC``: the disk is full).
        path: The file being written.
        keeps: What is still whole, in words (``"the earlier report.html is unchanged"``).
    """
    reason = exc.strerror or str(exc)
    error = OutputWriteError(
        f"cannot write {path}: {reason}; {keeps}; free some space (or fix the cause) and run again"
    )
    error.errno, error.strerror, error.filename = exc.errno, reason, str(path)
    return error


def os_error_behind(exc: BaseException) -> OSError | None:
    """The operating system's error behind ``exc``, when a library wrapped it: ``exc`` itself
    if it is an :class:`OSError`, else the first one it was raised from or during
    (``torch.save`` into a file raises ``RuntimeError("... unexpected pos ...")`` during the
    ``OSError`` of a full disk), else the ``(os error N)`` that ``safetensors``' Rust writer
    puts in its message. ``None`` when there is none: ``exc`` is not about a file.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, OSError):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    found = re.search(r"\(os error (\d+)\)", str(exc)[:1000])
    if found and type(exc).__name__ == "SafetensorError":
        number = int(found.group(1))
        return OSError(number, os.strerror(number))
    return None


def saving_into(scratch: Path, target: Path, keeps: str) -> contextlib.AbstractContextManager:
    """A block that fills the folder ``scratch``, renamed to ``target`` when whole: if it fails,
    ``scratch`` is removed, so nothing half-written is left (a bug's exception goes on as it
    was); if it failed writing a file (:func:`os_error_behind`: a full disk, a quota, a
    read-only file system) the error is one :class:`~textgym.errors.OutputWriteError` naming
    ``target`` and saying what ``keeps``.
    """
    return _SavingInto(scratch, target, keeps)


class _SavingInto:
    def __init__(self, scratch: Path, target: Path, keeps: str) -> None:
        self.scratch, self.target, self.keeps = scratch, target, keeps

    def __enter__(self) -> Path:
        return self.scratch

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None:
            return False
        shutil.rmtree(self.scratch, ignore_errors=True)
        cause = os_error_behind(exc)
        if cause is None or isinstance(exc, OutputWriteError):
            return False
        error = write_failure(cause, self.target, self.keeps)
        error.__suppress_context__ = True  # one error: the library's wrapping says no more
        raise error


def write_atomic(path: Path, data: str | bytes, *, keeps: str | None = None) -> None:
    """Replace the file ``path`` with ``data`` in one step: written to a temporary file beside
    it (``.NAME.XXXXXXXX.tmp``), flushed to disk, then renamed over it (``os.replace``).

    So a reader, a crash or a full disk sees the old file whole or the new one whole, never
    half of one; a hard link to the old file elsewhere keeps the old bytes (the name gets a new
    file, the other name is never written into); a symbolic link is followed (the file it names
    is replaced). A new file gets the user's umask (:func:`default_file_mode`, not
    ``mkstemp``'s ``0o600``); a replaced one keeps its permission bits. Text is UTF-8 (bytes
    that are not are replaced).

    Args:
        path: The file to write.
        data: Its whole content.
        keeps: What the error says is kept (default: the earlier file, or that none was made).

    Raises:
        OutputWriteError: the file cannot be written (a full disk, no permission, a folder
            that is not there): one line naming it; the temporary file is removed and ``path``
            is as it was.
    """
    target = Path(os.path.realpath(path))
    body = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = default_file_mode()
    temporary: str | None = None
    failure: OSError | None = None
    try:
        handle, temporary = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
        )
        with os.fdopen(handle, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())  # a full disk can answer only here (delayed allocation)
        os.replace(temporary, target)
        temporary = None
    except OSError as exc:
        failure = exc
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    if failure is not None:  # raised outside the except: one error, not a chain
        if keeps is None:
            keeps = f"the earlier {path.name} is unchanged" if target.exists() else "none made"
        raise write_failure(failure, path, keeps)


def write_json(path: Path, value: Any, *, keeps: str | None = None) -> None:
    """Write ``value`` as indented JSON to ``path`` in one step (:func:`write_atomic`).

    Raises:
        OutputWriteError: as :func:`write_atomic`.
        TypeError, ValueError: ``value`` is not JSON (nothing written).
    """
    write_atomic(path, json.dumps(value, indent=2) + "\n", keeps=keeps)


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (each without its newline) to ``path`` in one step: a temporary file
    beside it, then ``os.replace``, so a reader sees the old file or the whole new one; an error
    or a Ctrl-C while the lines are made leaves the old file and no temporary one.

    Returns:
        The number of lines written.
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    count = 0
    try:
        os.fchmod(handle, default_file_mode())
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
                count += 1
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count


def unshare(path: Path) -> None:
    """Give ``path`` a file of its own if it has other names (hard links): its bytes are copied
    to a new file that replaces it (:func:`write_atomic`), so what is appended to it later never
    reaches the other names. A file with one name, or none, is left as it is.

    Raises:
        OutputWriteError: the copy cannot be written (a full disk): ``path`` is as it was.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        keeps = f"{path} is unchanged (still a hard link, not written to)"
        write_atomic(path, path.read_bytes(), keeps=keeps)


class JsonlWriter:
    """A JSONL file written one record at a time, each on disk (unbuffered) as it is written.

    Made by :func:`open_jsonl`. A record that cannot be written in full (a full disk, an I/O
    error) is cut off at once, with ``ftruncate`` on the file descriptor (no buffer is flushed
    first: there is none), and an :class:`~textgym.errors.OutputWriteError` raised, naming the file; on leaving the
    block the file is cut back to its last whole record again (also on Ctrl-C). So the file
    always holds valid JSONL: exactly :attr:`count` records.
    """

    def __init__(self, fh: BinaryIO, path: Path):
        self._fh = fh
        self._path = path
        # (bytes of whole records, records): one attribute, so a Ctrl-C leaves both old or both new.
        self._written = (0, 0)

    @classmethod
    def append(cls, path: Path) -> JsonlWriter:
        """Open ``path`` (created if missing) to append records after the ones it holds; the
        caller closes it (:meth:`close`). A file with other names (hard links) first gets one
        of its own (:func:`unshare`), so the records never reach the other names.

        Raises:
            OutputWriteError: the file cannot be copied or opened (a full disk, no
                permission): one line; ``path`` is as it was.
        """
        unshare(path)
        failure: OSError | None = None
        try:
            fh = open(path, "ab", buffering=0)  # noqa: SIM115  (closed by close())
        except OSError as exc:
            failure = exc
        if failure is not None:  # raised outside the except: one error, not a chain
            raise write_failure(failure, path, f"{path.name} is unchanged")
        writer = cls(fh, path)
        writer._written = (os.fstat(fh.fileno()).st_size, 0)
        return writer

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._fh.closed

    def close(self) -> None:
        """Cut a half-written last line (:meth:`cut`) and close the file; safe to call twice."""
        if not self._fh.closed:
            try:
                self.cut()
            finally:
                self._fh.close()

    @property
    def count(self) -> int:
        """Records written in full."""
        return self._written[1]

    def write(self, line: str) -> None:
        """Append one record: ``line`` is its JSON text, without a newline.

        Raises:
            OutputWriteError: it could not be written in full (``ENOSPC``: the disk is full);
                the part that was written is cut off; ``errno`` and ``strerror`` are the
                write's, ``filename`` names the file.
        """
        data = memoryview(line.encode("utf-8") + b"\n")
        failure: OSError | None = None
        try:
            while data:  # an unbuffered write may take part of it
                data = data[self._fh.write(data) or 0 :]
        except OSError as exc:
            failure = exc
        if failure is not None:  # raised outside the except: one error, not a chain of two
            self.cut()
            path = failure.filename or str(self._path)
            raise OutputWriteError(failure.errno, failure.strerror, path)
        self._written = (self._written[0] + len(line.encode("utf-8")) + 1, self._written[1] + 1)

    def cut(self) -> None:
        """Drop a half-written last line, if any (nothing to cut on a device such as a pipe)."""
        fd = self._fh.fileno()
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size != self._written[0]:
            os.ftruncate(fd, self._written[0])


@contextlib.contextmanager
def open_jsonl(path: Path, *, fresh: bool = False) -> Iterator[JsonlWriter]:
    """Open ``path`` (truncated, unbuffered) for :class:`JsonlWriter`; on leaving, cut any
    half-written line.

    With ``fresh`` an existing file is unlinked first and a new one made: a hard link to it
    elsewhere keeps its bytes (``eval --overwrite`` never writes into another name).

    Raises:
        OSError: the file cannot be opened, or a record cannot be written (see
            :meth:`JsonlWriter.write`).
    """
    if fresh:
        path.unlink(missing_ok=True)
    with open(path, "wb", buffering=0) as fh:
        writer = JsonlWriter(fh, path)
        try:
            yield writer
        finally:
            writer.cut()
