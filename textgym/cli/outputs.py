"""One rule for every subcommand's output: a lock against a second writer, and no silent
overwrite.

A run holds an exclusive lock on its output for as long as it writes
(:mod:`textgym.cli.output_locks`: ``DIR/.textgym.lock`` for ``eval --output-dir``, ``sft`` and
``train``; for ``collect --output`` a lock keyed by the file's inode and an ``flock`` on the
file); a second run on the same output is refused in one line that names the holder.

Under the lock, an output that already holds something is refused unless ``--overwrite`` (or
``--resume``, where a subcommand continues a run) says what to do with it, so no earlier result
is replaced without a word. ``--overwrite`` of a directory replaces only what textgym wrote
there (:func:`check_run_dir`: the files of an eval, of a trainer's run, its checkpoints); a
directory that holds anything else, or anything write-protected, is refused before a thing is
deleted, and the earlier run is moved aside in one step before it is deleted
(:func:`clear_run_dir`). What goes into a JSON output is first made :func:`json_safe` (no NaN).
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from textgym.cli.output_locks import (
    DIR_LOCK,
    flock_held,
    flocked,
    lock_path,
    locked,
    refuse_held_folders,
)
from textgym.collect import RECORDS_FILE
from textgym.errors import UsageError

__all__ = [
    "check_run_dir",
    "claim_dir",
    "claim_file",
    "clear_run_dir",
    "json_safe",
    "run_entries",
]

#: Where :func:`clear_run_dir` moves an earlier run before deleting it (a run killed while
#: deleting leaves it, and the next ``--overwrite`` deletes it).
_TRASH = ".textgym-overwrite.tmp"
#: The file :func:`clear_run_dir` puts in the trash folder first: a folder of that name without
#: it is not textgym's (a user's folder of the same name is refused, never deleted).
_TRASH_MARK = ".textgym-trash"

#: The results ``eval --output-dir`` and ``collect --output-dir`` write (and replace on
#: ``--overwrite``).
_RESULT_FILES = ("summary.json", "trajectories.jsonl", "per_task.jsonl", RECORDS_FILE)
#: The records ``train`` and ``sft`` write at the top of their run directory.
_TRAINER_FILES = (
    "run.json",
    "metrics.jsonl",
    "sft_summary.json",
    "final_eval.json",
    "train_episodes.jsonl",
)
#: A directory textgym wrote a run into holds one of these (train and sft: run.json, written
#: first; eval: summary.json or trajectories.jsonl; collect: summary.json or sft_data.jsonl).
_RUN_MARKERS = ("run.json", "summary.json", "trajectories.jsonl", RECORDS_FILE)
#: What ``save_pretrained`` of a model, a LoRA adapter and a tokenizer writes (patterns).
_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
    "adapter_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
#: What a checkpoint holds besides the model (:mod:`textgym.algos.checkpoint_layout`).
_CHECKPOINT_FILES = ("trainer_state.pt", "optimizer.pt", "trainer_config.json")
#: Folders a trainer saves a model into: its checkpoints, and the scratch folders of a save or a
#: prune that was cut short.
_MODEL_DIR = re.compile(r"^(checkpoint-\d+|\.checkpoint-\d+\.(tmp|deleting)|\.model\.tmp)$")


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


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _model_card(path: Path) -> bool:
    """Whether ``path`` is the ``README.md`` model card ``peft`` writes beside an adapter."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith("---") and "library_name: peft" in head


def _textgym_file(path: Path, *, top: bool, trainer_run: bool) -> bool:
    """Whether the file ``path`` (in a run directory, ``top``, or in one of its model folders)
    is one textgym writes."""
    name = path.name
    model = _matches(name, _MODEL_FILES) or (name == "README.md" and _model_card(path))
    if not top:
        return model or name in _CHECKPOINT_FILES
    if name in _RESULT_FILES or re.fullmatch(r"\.summary\.json\..*\.tmp", name):
        return True
    return trainer_run and (model or name in _TRAINER_FILES or name == "metrics.jsonl.tmp")


def _foreign(path: Path, rel: str, *, trainer_run: bool) -> tuple[str, str] | None:
    """The first entry at or under ``path`` (``rel`` in the run directory) that textgym did not
    write, and what it is; ``None`` when all of it is textgym's."""
    name = path.name
    if path.is_symlink():
        return rel, "a symbolic link"
    if not path.is_dir():
        if not stat.S_ISREG(path.lstat().st_mode):
            return rel, "not a regular file"
        return None if _textgym_file(path, top=True, trainer_run=trainer_run) else (rel, "a file")
    if name == _TRASH:
        return None if (path / _TRASH_MARK).is_file() else (rel, "a folder")
    allowed: dict[str, tuple[str, ...]] = {
        "plots": ("*.png",),
        "tensorboard": ("events.out.tfevents.*",),
    }
    if name in allowed and trainer_run:
        for child in sorted(path.iterdir()):
            if child.is_symlink() or child.is_dir() or not _matches(child.name, allowed[name]):
                return f"{rel}/{child.name}", "not a file textgym writes there"
        return None
    if trainer_run and name in ("wandb", "llama-server"):
        kept = {"wandb": ("run-*", "offline-run-*", "latest-run", "debug*.log")}
        kept["llama-server"] = ("rank*",)
        for child in sorted(path.iterdir()):
            if not _matches(child.name, kept[name]):
                return f"{rel}/{child.name}", f"not what {name} writes there"
        return None  # written by wandb or llama-server: not looked into
    if _MODEL_DIR.match(name):
        for child in sorted(path.iterdir()):
            if child.is_symlink() or not child.is_file():
                return f"{rel}/{child.name}", "not a file of a checkpoint"
            if not _textgym_file(child, top=False, trainer_run=True):
                return f"{rel}/{child.name}", "not a file of a checkpoint"
        return None
    return rel, "a folder"


def _protected(path: Path, rel: str, *, deep: bool = True) -> str | None:
    """The first entry at (and with ``deep``, under) ``path`` that is write-protected (read-only
    mode bits, or not writable by this process: e.g. immutable), so that deleting or replacing
    it, or an entry in it, would fail half way; ``rel`` names ``path`` in the answer."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return None
    wanted = os.W_OK | (os.X_OK if stat.S_ISDIR(info.st_mode) else 0)
    if not info.st_mode & stat.S_IWUSR or not os.access(path, wanted):
        return rel
    if deep and stat.S_ISDIR(info.st_mode):
        for child in sorted(path.iterdir()):
            if (found := _protected(child, f"{rel}/{child.name}")) is not None:
                return found
    return None


def check_run_dir(directory: Path, flag: str, *, replaces: tuple[str, ...] | None = None) -> None:
    """Check that ``--overwrite`` may replace what is in ``directory``: only textgym's files,
    none write-protected, none in use. Deletes nothing.

    Args:
        directory: The output directory, locked by this run.
        flag: The option that named it, for messages.
        replaces: The names the run replaces (eval's results); ``None``: all of it is deleted.

    Raises:
        UsageError: ``directory`` holds no textgym run, or an entry textgym did not write (a
            foreign file or folder, a symbolic link: named), or an entry that is read-only or
            cannot be deleted (named), or a file another run is writing.
    """
    names = run_entries(directory)
    if not names:
        return
    trainer_run = "run.json" in names  # the model files a trainer saves are its own
    if not any(name in _RUN_MARKERS for name in names):
        raise UsageError(
            f"{flag} {directory} holds {_listing(names)}, which is not a textgym run (no "
            f"{', '.join(_RUN_MARKERS)}); --overwrite replaces only a textgym run: choose an "
            f"empty or new {flag}"
        )
    for name in names:
        foreign = _foreign(directory / name, name, trainer_run=trainer_run)
        if foreign is not None:
            rel, what = foreign
            raise UsageError(
                f"{flag} {directory} holds {rel} ({what}), which textgym did not write; "
                f"--overwrite deletes only a textgym run's own files: move {rel} out of "
                f"{directory} or choose another {flag}"
            )
    doomed = names if replaces is None else [n for n in names if n in replaces]
    found = _protected(directory, ".", deep=False)
    for name in doomed:
        found = found or _protected(directory / name, name)
    if found is not None:
        where = directory if found == "." else directory / found
        raise UsageError(
            f"{flag} {where} is read-only (or cannot be deleted); --overwrite replaces nothing "
            f"write-protected and has deleted nothing: make it writable (chmod -R u+w "
            f"{directory}) or choose another {flag}"
        )
    for name in doomed:
        if (directory / name).is_file() and flock_held(directory / name):
            raise UsageError(
                f"{flag} {directory}/{name} is in use by another run; wait for it to finish or "
                f"choose another {flag}"
            )


def clear_run_dir(directory: Path, flag: str) -> None:
    """Delete what an earlier textgym run left in ``directory`` (all but the lock file), after
    :func:`check_run_dir`: the entries are first moved into one hidden folder (a rename each,
    undone if one fails), which is then deleted, so a failure never leaves half a run.

    Raises:
        UsageError: :func:`check_run_dir` refuses (nothing deleted), an entry cannot be moved
            (all put back: nothing deleted), or the moved run cannot be deleted (the message
            names the folder it is in).
    """
    from textgym.results import _reason

    check_run_dir(directory, flag)
    trash = directory / _TRASH
    names = [name for name in run_entries(directory) if name != _TRASH]
    moved: list[str] = []
    try:
        if trash.exists():  # what an earlier --overwrite was deleting when it was killed
            shutil.rmtree(trash)
        if not names:
            return
        trash.mkdir()
        (trash / _TRASH_MARK).touch()
        for name in names:
            os.rename(directory / name, trash / name)
            moved.append(name)
    except OSError as exc:
        for name in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(trash / name, directory / name)
        with contextlib.suppress(OSError):
            (trash / _TRASH_MARK).unlink(missing_ok=True)
            trash.rmdir()
        raise UsageError(
            f"cannot clear {flag} {directory} for --overwrite ({_reason(exc)}); nothing was "
            f"deleted: fix that or choose another {flag}"
        ) from None
    try:
        shutil.rmtree(trash)
    except OSError as exc:
        raise UsageError(
            f"cannot delete the earlier run in {flag} {directory} ({_reason(exc)}); it was moved "
            f"to {trash}: delete that folder, then run again"
        ) from None


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
        overwrite: ``--overwrite`` was given: a non-empty directory is accepted if all it holds
            is textgym's (:func:`check_run_dir`).
        resume: ``--resume`` was given (``None``: the subcommand has no ``--resume``): a
            non-empty directory is accepted, to be continued.
        clear: With ``overwrite``, delete the earlier run first (:func:`clear_run_dir`);
            otherwise the subcommand replaces its own files itself (eval's results).

    Raises:
        UsageError: the directory cannot be written (:func:`textgym.results.check_dir`), another
            run holds it (named), it is not empty and neither ``overwrite`` nor ``resume`` was
            given, or both were, or ``overwrite`` is refused (:func:`check_run_dir`).
    """
    from textgym.results import check_dir

    if overwrite and resume:
        raise UsageError("--overwrite and --resume contradict each other; give one of them")
    try:
        check_dir(directory, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # Every path to the directory reaches the same lock file inside it.
    with locked(directory, flag, lock_path(directory.resolve(), directory=True)):
        names = run_entries(directory)
        if names and not (overwrite or resume):
            keep_going = "--resume to continue its run, " if resume is not None else ""
            raise UsageError(
                f"{flag} {directory} is not empty (it holds {_listing(names)}); pass "
                f"{keep_going}--overwrite to replace it, or choose another {flag}"
            )
        if names and overwrite:
            if clear:
                clear_run_dir(directory, flag)
            else:
                check_run_dir(directory, flag, replaces=_RESULT_FILES)
        yield directory


@contextlib.contextmanager
def claim_file(path: Path, flag: str, *, overwrite: bool) -> Iterator[Path]:
    """Check and lock an output file for the block; refuse a non-empty one without
    ``overwrite``.

    The file is created (empty) if it is not there, so that its lock is keyed by its inode; a
    claim refused before the block removes a file it created.

    Raises:
        UsageError: the file cannot be written (:func:`textgym.results.check_file`), another
            run holds it (named; through any path: a symlink, a hard link, or a folder a running
            run holds), or it is not empty and ``overwrite`` was not given.
    """
    from textgym.results import _reason, check_file

    try:
        check_file(path, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    real = path.resolve()
    refuse_held_folders(real, path, flag)
    try:
        os.close(os.open(real, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        raise UsageError(f"cannot write {flag} {path}: {_reason(exc)}") from None
    claimed = False
    try:
        lock = lock_path(real, directory=False)
        with locked(path, flag, lock), flocked(real, path, flag):
            size = real.stat().st_size
            if size and not overwrite:
                raise UsageError(
                    f"{flag} {path} already holds {_lines(real)} lines ({size} bytes); pass "
                    f"--overwrite to replace it, or choose another {flag}"
                )
            claimed = True
            yield path
    finally:
        if created and not claimed:
            with contextlib.suppress(OSError):
                if real.stat().st_size == 0:
                    real.unlink()
