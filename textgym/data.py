"""Task data for dataset environments: local files, Hugging Face hub datasets, task selection.

Dataset envs (``textgym/GSM8K-v0``, ``textgym/ReverseText-v0``) read their items from a local
JSON Lines file, a plain text file, or a Hugging Face dataset loaded with ``datasets`` (an
optional dependency, imported only when a hub dataset is asked for: ``pip install
"textgym[data]"``). Nothing here downloads anything unless a hub dataset is named explicitly.

:func:`select_task` is the one rule for picking an episode's item: ``options["task_index"]`` or
``options["task_id"]`` when given, else a uniform draw from the env's ``np_random``.
"""

from __future__ import annotations

import codecs
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from textgym.checks import check_int
from textgym.errors import MissingExtraError, SetupError

__all__ = [
    "DATA_EXTRA_HINT",
    "DataFileError",
    "TASK_OPTIONS",
    "check_data_file",
    "file_fingerprint",
    "file_kind",
    "iter_jsonl",
    "load_hub_rows",
    "read_jsonl",
    "read_paragraphs",
    "select_task",
]

#: How to install the optional hub loader.
DATA_EXTRA_HINT = 'pip install "textgym[data]"'

#: The ``reset`` options every dataset env understands.
TASK_OPTIONS = ("task_index", "task_id")


def file_fingerprint(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """Return ``(absolute path, mtime in ns, size in bytes)``: a cache key that follows the file.

    Raises:
        FileNotFoundError: if ``path`` is not an existing file.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise FileNotFoundError(
            f"Expected a data file at {str(path)!r} ({resolved}), but there is none"
        )
    stat = resolved.stat()
    return str(resolved), stat.st_mtime_ns, stat.st_size


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words, from its ``st_mode``: ``"a
    directory"``, ``"a named pipe"``, ``"a character device"`` (``/dev/null``), ..."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def check_data_file(path: str | os.PathLike[str], name: str, *, hint: str = "") -> None:
    """Check that ``path`` is a regular file that can be read and is UTF-8 text, without
    opening anything that could block (a FIFO, a device) and before anything loads.

    The whole file is decoded once, in chunks (a data file is read whole afterwards anyway).

    Args:
        path: The data file.
        name: The argument's name as the user wrote it (``--data``), which each message names.
        hint: Appended after ``; `` (how to make such a file).

    Raises:
        ValueError: one line naming ``name``, the path and what it is instead: not found, a
            directory, a FIFO or a device (``/dev/null``), unreadable (permissions), or not
            UTF-8 (a binary file), e.g. ``--data: expected a JSONL file (UTF-8 text), got 'runs'
            (a directory)``.
    """
    fix = f"; {hint}" if hint else ""

    def refuse(why: str) -> ValueError:
        return ValueError(
            f"{name}: expected a JSONL file (UTF-8 text), got {str(path)!r} ({why}){fix}"
        )

    try:
        mode = os.stat(path).st_mode  # follows links; never opens the file
    except FileNotFoundError:
        raise refuse("not found") from None
    except OSError as exc:
        raise refuse(exc.strerror or type(exc).__name__) from None
    if not stat.S_ISREG(mode):
        raise refuse(file_kind(mode))
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:  # exc.object: buffered bytes + chunk
                    at = offset + len(chunk) - len(exc.object) + exc.start
                    raise refuse(
                        f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {at}; "
                        "is it a binary file?"
                    ) from None
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise refuse("not UTF-8 text: it ends inside a character") from None
    except PermissionError:
        raise refuse("permission denied: it cannot be read; check its permissions") from None
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror or exc}") from None


class DataFileError(SetupError):
    """A data file that does not read as the format it should have; the message names the
    file and line."""


def iter_jsonl(
    path: str | os.PathLike[str], skip: Callable[[int, str], None] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each line of a UTF-8 JSON Lines file, streaming;
    blank lines are skipped.

    Args:
        path: The file.
        skip: ``None``: a line that is not a JSON object is an error. Else it is called as
            ``skip(line number, what was found)`` (``"invalid JSON (Expecting value)"``,
            ``"list"``, ``"JSON nested too deeply to read"``) and the line is passed over, and
            bytes that are not UTF-8 are read as U+FFFD: for a file a crash may have cut in
            half a line.

    Raises:
        FileNotFoundError: if the file does not exist.
        DataFileError: (without ``skip``) naming the line, for a line that is not valid JSON
            or not a JSON object: ``rows.jsonl:2: expected a JSON object per line, got list``.
            Also (without ``skip``) for bytes that are not UTF-8.
    """
    try:
        with open(path, encoding="utf-8", errors="strict" if skip is None else "replace") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    found = f"invalid JSON ({exc.msg})"
                except RecursionError:  # nested deeper than Python's parser goes
                    found = "JSON nested too deeply to read"
                else:
                    if isinstance(row, dict):
                        yield number, row
                        continue
                    found = type(row).__name__
                if skip is None:
                    raise DataFileError(
                        f"{path}:{number}: expected a JSON object per line, got {found}"
                    )
                skip(number, found)
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a UTF-8 JSON Lines file: one JSON object per line; blank lines are skipped.

    Raises:
        FileNotFoundError: if the file does not exist.
        DataFileError: naming the line, for a line that is not valid JSON or not a JSON object.
    """
    return [row for _, row in iter_jsonl(path)]


def read_paragraphs(path: str | os.PathLike[str]) -> list[str]:
    """Read a UTF-8 text file as paragraphs separated by blank lines.

    The lines of one paragraph are stripped and joined with single spaces, so hard-wrapped text
    reads as one paragraph.

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    paragraphs: list[str] = []
    current: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            stripped = line.strip()
            if stripped:
                current.append(stripped)
            elif current:
                paragraphs.append(" ".join(current))
                current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def load_hub_rows(
    name: str, config: str | None = None, split: str = "train"
) -> list[dict[str, Any]]:
    """Load one split of a Hugging Face dataset: ``datasets.load_dataset(name, config, split=split)``.

    This is the only function in textgym that may download data, and only because a hub dataset
    was named. ``datasets`` caches downloads on disk.

    Raises:
        MissingExtraError: if ``datasets`` is not installed (the message gives the install command).
    """
    try:
        import datasets
    except ImportError as exc:
        raise MissingExtraError(
            f"Loading the Hugging Face dataset {name!r} needs the `datasets` package, which is not "
            f"installed; {DATA_EXTRA_HINT}, or pass a local file with data_path=..."
        ) from exc
    return [dict(row) for row in datasets.load_dataset(name, config, split=split)]


def select_task(
    options: Mapping[str, Any] | None,
    task_ids: tuple[str, ...],
    index_of: Mapping[str, int],
    np_random: np.random.Generator,
) -> int:
    """Pick the index of an episode's item.

    Args:
        options: ``reset`` options: ``{"task_index": int}`` or ``{"task_id": str}`` (not both),
            or neither (or ``None``) for a uniform draw from ``np_random``.
        task_ids: The env's task ids in item order (the draw is over ``len(task_ids)`` items).
        index_of: Task id -> item index.
        np_random: The env's generator, already seeded by ``reset``.

    Returns:
        An index in ``[0, len(task_ids))``.

    Raises:
        ValueError: for an unknown option, both options at once, an index out of range or not an
            integer, or an unknown task id.
    """
    options = dict(options or {})
    unknown = set(options) - set(TASK_OPTIONS)
    if unknown:
        raise ValueError(
            f"Unknown reset options {sorted(unknown)}; expected 'task_index' or 'task_id'"
        )
    n = len(task_ids)
    if "task_index" in options and "task_id" in options:
        raise ValueError("Give options['task_index'] or options['task_id'], not both")
    if "task_index" in options:
        return check_int(
            "options['task_index']", options["task_index"], low=0, high=n - 1, hint=f"{n} tasks"
        )
    if "task_id" in options:
        task_id = options["task_id"]
        if not isinstance(task_id, str) or task_id not in index_of:
            example = task_ids[0] if task_ids else "?"
            raise ValueError(
                f"Unknown options['task_id'] {task_id!r}; expected one of this env's {n} ids, "
                f"e.g. {example!r}"
            )
        return index_of[task_id]
    return int(np_random.integers(n))
