"""Output rules of the study scripts (issue 52): what a study may write, replace and refuse.

A study writes inside its work dir and its named outputs only. ``benchmarks/results/`` is
read-only unless ``--update-results`` asks for it; a derived sibling of ``--output`` (a plots
folder) is replaced only when it is recognisably the script's own (the record beside it names
it and it holds only files the script writes), otherwise it is refused and nothing is deleted.
Errors are :class:`~textgym.errors.SetupError` and :func:`run_main` prints them as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from _provenance import REPO_ROOT

from textgym.cli.outputs import check_run_dir
from textgym.cli.usage import UsageError
from textgym.errors import SetupError, TextgymError
from textgym.results import write_atomic

__all__ = [
    "RESULTS_DIR",
    "OwnFiles",
    "at_least",
    "check_results_write",
    "checked_device",
    "claim_sibling_dir",
    "claim_sibling_file",
    "clear_own_run",
    "one_line_errors",
    "own_record",
    "run_main",
    "sha256_of",
]

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def at_least(low: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer ``>= low`` (a bad one is a one-line usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def checked_device(device: str | None) -> None:
    """Check ``--device`` before anything loads (``None``: the script's default).

    Raises:
        SetupError: a device torch does not know or this machine does not have (``tpu``,
            ``cuda`` without CUDA), quoted in a bounded excerpt.
    """
    if device is None:
        return
    from textgym.algos.model_loading import resolve_device

    try:
        resolve_device(device)
    except (RuntimeError, ValueError, TypeError) as exc:
        text = " ".join(str(exc).split())[:200]
        raise SetupError(
            f"expected --device auto, cpu, cuda or cuda:N, got {device[:40]!r} ({text})"
        ) from None


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with its usage errors printed as one ``PROG: error:`` line (no usage block),
    exit code 2."""

    def error(message: str) -> None:
        print(f"{parser.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]
    return parser


def check_results_write(path: Path, flag: str, *, update_results: bool) -> None:
    """Refuse a write under ``benchmarks/results/`` unless ``--update-results`` was given.

    Raises:
        SetupError: ``path`` lies under it and ``update_results`` is false.
    """
    if update_results:
        return
    real = path.resolve()
    if real == RESULTS_DIR or RESULTS_DIR in real.parents:
        raise SetupError(
            f"{flag} {path} is under {RESULTS_DIR}, which keeps committed results and is "
            f"read-only unless asked; pass --update-results to replace them, or choose "
            f"another {flag}"
        )


def own_record(path: Path, benchmark: str) -> bool:
    """Whether ``path`` is a JSON record this ``benchmark`` wrote (its ``"benchmark"`` key)."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.loads(fh.read(64 * 2**20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and record.get("benchmark") == benchmark


def _foreign(folder: Path, patterns: tuple[str, ...]) -> str | None:
    """The first entry under ``folder`` (a relative path) that is a link, not a regular file or
    folder, or a file matching none of ``patterns``; ``None`` when all of it matches."""
    for entry in sorted(folder.rglob("*")):
        rel = entry.relative_to(folder).as_posix()
        if entry.is_symlink():
            return rel
        if entry.is_dir():
            continue
        if not entry.is_file() or not any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            return rel
    return None


def claim_sibling_dir(
    folder: Path, output: Path, benchmark: str, patterns: tuple[str, ...]
) -> None:
    """Check that the derived folder ``folder`` beside ``--output`` may be replaced, then
    empty it of the script's own files (nothing else is ever deleted).

    It may when it does not exist, or when the record at ``output`` is ``benchmark``'s and
    names it (``"plots"``) and every file in it matches ``patterns`` (paths relative to it).

    Raises:
        SetupError: ``folder`` is not a folder, or not recognisably the script's (named).
    """
    if not folder.exists() and not folder.is_symlink():
        return
    how = f"move it away or choose another --output (it is derived from --output {output})"
    if folder.is_symlink() or not folder.is_dir():
        raise SetupError(f"{folder} is not a folder this script wrote; nothing was deleted: {how}")
    named = False
    if own_record(output, benchmark):
        with contextlib.suppress(OSError, ValueError):
            recorded = json.loads(output.read_text(encoding="utf-8")).get("plots")
            named = recorded is not None and Path(recorded).name == folder.name
    if not named:
        raise SetupError(
            f"{folder} exists and is not the plots folder of a {benchmark} record at {output}; "
            f"nothing was deleted: {how}"
        )
    if (rel := _foreign(folder, patterns)) is not None:
        raise SetupError(
            f"{folder} holds {rel}, which {benchmark} does not write; nothing was deleted: {how}"
        )
    shutil.rmtree(folder)  # every file in it is one of ours (checked above)


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file ``path`` (read in 1 MiB pieces)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(2**20):
            digest.update(piece)
    return digest.hexdigest()


def _is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def claim_sibling_file(file: Path, output: Path, benchmark: str, key: str = "plot") -> None:
    """Check that the derived file ``file`` beside ``--output`` (a PNG) may be replaced.

    It may when it does not exist, or when the record at ``output`` is ``benchmark``'s and its
    ``key`` entry (``{"file": NAME, "sha256": HEX}``) names it with the bytes it holds now.

    Raises:
        SetupError: ``file`` is not a plain file, or not recognisably the script's (named).
    """
    if not file.exists() and not file.is_symlink():
        return
    named = False
    if _is_plain_file(file) and own_record(output, benchmark):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            entry = json.loads(output.read_text(encoding="utf-8")).get(key)
            named = entry["file"] == file.name and entry["sha256"] == sha256_of(file)
    if not named:
        raise SetupError(
            f"{file} exists and is not the {key} of a {benchmark} record at {output} (as that "
            f"record wrote it); nothing was replaced: move it away or choose another --output "
            f"(it is derived from --output {output})"
        )


class OwnFiles:
    """The files a study wrote into its work dir, by SHA-256, in a manifest there
    (``WORK/.BENCHMARK-files.json``): a file there is replaced only when it holds what the
    manifest says the study wrote, or the very bytes the study writes now."""

    def __init__(self, work: Path, benchmark: str) -> None:
        self.work, self.benchmark = work, benchmark
        self.manifest = work / f".{benchmark}-files.json"

    def _files(self) -> dict[str, str]:
        """The manifest's ``{path relative to WORK: sha256}``.

        Raises:
            SetupError: a manifest file that is not this study's.
        """
        if not self.manifest.exists() and not self.manifest.is_symlink():
            return {}
        if not (_is_plain_file(self.manifest) and own_record(self.manifest, self.benchmark)):
            raise SetupError(
                f"{self.manifest} exists and is not the {self.benchmark} manifest of files; "
                f"nothing was replaced: move it away or choose another --work-dir"
            )
        files = json.loads(self.manifest.read_text(encoding="utf-8")).get("files")
        return files if isinstance(files, dict) else {}

    def _key(self, path: Path) -> str:
        return Path(path).relative_to(self.work).as_posix()

    def check(self, path: Path, data: bytes | None = None) -> None:
        """Refuse to replace ``path`` (inside WORK) unless it is the study's own.

        Raises:
            SetupError: ``path`` exists and is a link, not a file, or holds neither the bytes
                the manifest recorded for it nor ``data``; nothing was replaced.
        """
        if not path.exists() and not path.is_symlink():
            return
        if _is_plain_file(path):
            if data is not None and path.stat().st_size == len(data) and path.read_bytes() == data:
                return
            if self._files().get(self._key(path)) == sha256_of(path):
                return
        raise SetupError(
            f"{path} exists and is not a file {self.benchmark} wrote there (not the bytes it "
            f"writes, nor those its manifest {self.manifest.name} records); nothing was "
            f"replaced: move it away or choose another --work-dir"
        )

    def record(self, path: Path) -> None:
        """Record ``path``'s bytes now as the study's own (after it wrote them)."""
        files = {**self._files(), self._key(path): sha256_of(path)}
        record = {"benchmark": self.benchmark, "files": dict(sorted(files.items()))}
        write_atomic(self.manifest, json.dumps(record, indent=2) + "\n")

    def write(self, path: Path, data: str | bytes) -> None:
        """:meth:`check`, then replace ``path`` with ``data`` in one step and :meth:`record` it.

        Raises:
            SetupError: as :meth:`check`.
            OutputWriteError: as :func:`~textgym.results.write_atomic`.
        """
        body = data.encode("utf-8") if isinstance(data, str) else data
        self.check(path, body)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, body)
        self.record(path)


def clear_own_run(directory: Path, flag: str) -> None:
    """Delete an earlier textgym run in ``directory`` (the CLI's ``--overwrite`` rule:
    :func:`~textgym.cli.outputs.check_run_dir` first, so a foreign file refuses it whole).

    Raises:
        SetupError: ``directory`` holds anything textgym did not write (named), or read-only.
    """
    if not directory.exists():
        return
    try:
        check_run_dir(directory, flag)
    except UsageError as exc:
        raise SetupError(str(exc)) from None
    shutil.rmtree(directory)


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """``main(argv)``, with a :class:`TextgymError` (or ``UsageError``) printed as one
    ``SCRIPT: error:`` line and its exit code returned (2 for bad input)."""
    try:
        return main(argv)
    except (TextgymError, UsageError) as exc:
        name = Path(sys.argv[0]).name
        print(f"{name}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
