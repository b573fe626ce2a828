"""Checkpoints of the SFT and GRPO trainers: one layout, atomic and bounded saves, checked loads.

Both trainers save checkpoints in the same layout, so ``textgym train --model`` can start from a
``textgym sft`` output directory:

``checkpoint-{step}/`` holds the model (``save_pretrained``: full weights and the model's own
``config.json``, or with LoRA the adapter), the tokenizer, ``trainer_state.pt`` (RNG states,
step, extra trainer state), ``optimizer.pt`` (optimizer and scheduler state; only in the newest
checkpoint) and ``trainer_config.json`` (the trainer's arguments, which
:func:`~textgym.algos.resume.check_resumable` compares on resume). The ``.pt`` files hold tensors
and plain data only and are loaded with ``torch.load(..., weights_only=True)``. Saves are atomic
and bounded (:func:`save_checkpoint`: a free-disk check, a temporary folder renamed when
complete, then ``save_total_limit``), and a checkpoint is read and checked (keys, whole files,
finite weights) before a resumed run takes any step; every problem is a
:class:`~textgym.algos.checkpoint_layout.CheckpointError` naming the file and the fix.

Saving lives here (:func:`save_checkpoint`, :func:`save_model`, the disk estimates and the
rotation), the layout and its errors in :mod:`textgym.algos.checkpoint_layout`, loading and
resuming in :mod:`textgym.algos.resume`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from textgym.algos.checkpoint_layout import (
    OPTIMIZER_STATE,
    TRAINER_STATE,
    InsufficientDiskSpace,
    latest_checkpoint,
    list_checkpoints,
    rng_state,
)
from textgym.algos.common import check_finite_parameters, check_positive_ints
from textgym.algos.model_loading import saved_base
from textgym.errors import SetupError
from textgym.results import saving_into

#: The file that marks a hidden ``.checkpoint-*`` folder as textgym's own scratch (a save under
#: way, or a checkpoint being removed): only a folder holding it is ever deleted as leftover.
SCRATCH_MARK = ".textgym-scratch"

__all__ = [
    "check_checkpoint_settings",
    "check_disk_for_run",
    "check_free_disk",
    "checkpoint_bytes",
    "model_bytes",
    "optimizer_bytes",
    "prune_checkpoints",
    "save_checkpoint",
    "save_final_model",
    "save_model",
    "save_trainer_checkpoint",
    "tokenizer_bytes",
    "with_margin",
]


def save_model(
    model: Any, tokenizer: Any, path: str | Path, *, base: str, final_dir: str | Path | None = None
) -> None:
    """``save_pretrained`` of the model and tokenizer; a LoRA model saves only its adapter.

    Raises :class:`FloatingPointError` (and writes nothing) if a weight is NaN or inf.
    The adapter's ``base_model_name_or_path`` is set to ``base`` (the name or directory the run
    started from, as :func:`textgym.models.adapter_base` writes it relative to ``final_dir``,
    default ``path``), so :func:`textgym.models.load_model` can load the adapter directory alone
    and stack it on the right base: a few MB instead of the full weights. The files get the
    user's umask (``safetensors`` writes ``0o600``; :func:`textgym.results.apply_umask`).
    """
    from textgym.models import adapter_base
    from textgym.results import apply_umask

    check_finite_parameters(model)
    peft_config = getattr(model, "peft_config", None)
    with _no_progress_bars():
        if peft_config:
            recorded = adapter_base(base, final_dir if final_dir is not None else path)
            for adapter in peft_config.values():
                adapter.base_model_name_or_path = recorded
            # No embedding layer is adapted ("all-linear"), and peft would look for the base's
            # config.json relative to the working directory to decide.
            model.save_pretrained(path, save_embedding_layers=False)
        else:
            model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    apply_umask(Path(path))


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Turn off ``transformers``' progress bars for the block ("Writing model shards" would
    fill the training log at every checkpoint)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


_DISK_MARGIN = 1.05  # the estimate of the next save's size, times this ...
_DISK_SLACK = 4 * 2**20  # ... plus this many bytes (small config files; file system blocks)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e7 else f"{n / 1e6:,.0f} MB"


def with_margin(estimate: int) -> int:
    """The free bytes asked for a save estimated at ``estimate`` bytes: 5% more and 4 MiB."""
    return int(estimate * _DISK_MARGIN) + _DISK_SLACK


def check_free_disk(
    directory: str | Path, needed: int, *, what: str, keeps: str, fix: str | None = None
) -> None:
    """Raise :class:`InsufficientDiskSpace` unless ``directory`` has ``needed`` bytes free.

    Args:
        directory: Where the file or folder will be written.
        needed: Bytes it needs (an estimate with a margin, :func:`with_margin`).
        what: What is about to be saved, for the message (``"checkpoint-8"``).
        keeps: What stays good when the save is refused, for the message.
        fix: What to do, for the message; default: free some space, then ``--resume``.

    Raises:
        InsufficientDiskSpace: naming the directory, the bytes needed and free, and the fix.
    """
    free = shutil.disk_usage(directory).free
    if free < needed:
        fix = fix or "Free some space (or lower --save-total-limit), then continue with --resume"
        error = InsufficientDiskSpace(
            f"not enough free disk in {directory} to save {what}: needs about {needed:,} bytes "
            f"({_mb(needed)}), {free:,} free ({_mb(free)}); nothing was written and {keeps}. "
            f"{fix}"
        )
        error.needed, error.free = needed, free  # type: ignore[attr-defined]
        raise error


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _tensor_bytes(tensors: Any) -> int:
    """Bytes of the distinct tensors in ``tensors`` (tied weights counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def tokenizer_bytes(tokenizer: Any) -> int:
    """An upper estimate of the bytes ``tokenizer.save_pretrained`` writes: twice its
    ``tokenizer.json`` as serialized in memory (the file is indented), plus 64 KiB for its
    small files (config, chat template); 1 MiB for a tokenizer without a fast backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        return 2 * len(backend.to_str().encode()) + 2**16
    except Exception:  # no fast backend (None, a slow tokenizer): its files are small
        return 2**20


def optimizer_bytes(model: Any, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer state ``optimizer.pt`` holds: its tensors, or two float32
    moments per trainable weight (AdamW's) before its first step."""
    moments = [t for s in optimizer.state.values() for t in s.values()]
    trainable = [p for p in model.parameters() if p.requires_grad]
    return _tensor_bytes(moments) or 2 * 4 * sum(p.numel() for p in trainable)


def checkpoint_bytes(
    output_dir: str | Path,
    model: Any,
    optimizer: torch.optim.Optimizer,
    tokenizer: Any = None,
    *,
    optimizer_state: bool = True,
) -> int:
    """An estimate of the size of the next checkpoint in ``output_dir``, in bytes.

    The size of the newest full checkpoint (with optimizer state) when there is one (less its
    ``optimizer.pt`` without ``optimizer_state``); else what is saved counted from memory: the
    weights ``save_pretrained`` writes (the trainable adapter's with LoRA, all of them
    otherwise), the optimizer state (:func:`optimizer_bytes`, with ``optimizer_state``) and the
    tokenizer's files (:func:`tokenizer_bytes`; 1 MiB without ``tokenizer``).
    """
    last = latest_checkpoint(output_dir)
    if last is not None and (last / OPTIMIZER_STATE).is_file():
        size = _dir_bytes(last)
        return size if optimizer_state else size - (last / OPTIMIZER_STATE).stat().st_size
    state = optimizer_bytes(model, optimizer) if optimizer_state else 0
    words = tokenizer_bytes(tokenizer) if tokenizer is not None else 2**20
    return model_bytes(model) + state + words


def model_bytes(model: Any) -> int:
    """Bytes of the weights :func:`save_model` writes: the trainable adapter's with LoRA, every
    distinct weight otherwise (tied weights once)."""
    if getattr(model, "peft_config", None):
        return _tensor_bytes(p for p in model.parameters() if p.requires_grad)
    return _tensor_bytes(model.parameters())


def check_disk_for_run(state: Any, *, final_model: bool = False) -> None:
    """Check, before a run's first step, that ``config.output_dir`` has room for its next save:
    a checkpoint (weights, optimizer state and tokenizer, :func:`checkpoint_bytes`), or with
    ``final_model`` (SFT without ``save_every``) the finished model (weights and tokenizer).

    ``state`` is a trainer's state with ``config``, ``model``, ``optimizer`` and ``tokenizer``
    (a GRPO ``Learner``, an ``SFTRun``).

    Raises:
        InsufficientDiskSpace: naming the bytes needed and free, and the fix, before any step.
    """
    config = state.config
    out = Path(config.output_dir)
    size = checkpoint_bytes(
        out, state.model, state.optimizer, state.tokenizer, optimizer_state=not final_model
    )
    what = "its model" if final_model else "a checkpoint"
    parts = f"weights {_mb(model_bytes(state.model))}"
    if not final_model:
        parts += f", optimizer state {_mb(optimizer_bytes(state.model, state.optimizer))}"
    check_free_disk(
        out,
        with_margin(size),
        what=f"{what} of this run ({parts})",
        keeps="no step was run",
        fix=(
            f"Free some space or choose another --output-dir (the run keeps at most "
            f"--save-total-limit={config.save_total_limit} checkpoints, only the newest with "
            "its optimizer state)"
        ),
    )


def _remove_dir(path: Path) -> None:
    """Delete a directory so that it vanishes at once: renamed to a hidden name, then removed
    (a run killed while removing leaves a hidden folder, never a half checkpoint)."""
    doomed = path.with_name(f".{path.name}.deleting")
    _clear_scratch(path.parent)
    (path / SCRATCH_MARK).touch()
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _clear_scratch(root: Path) -> None:
    """Remove what a killed save or prune left behind: hidden ``.checkpoint-*.tmp`` and
    ``.deleting`` folders that hold :data:`SCRATCH_MARK` (a user's folder of such a name, not
    marked, is left as it is).

    Raises:
        SetupError: such a folder without the mark, where a save or prune must go.
    """
    for leftover in root.glob(".checkpoint-*"):
        if not leftover.name.endswith((".tmp", ".deleting")):
            continue
        ours = leftover.is_dir() and not leftover.is_symlink()
        if ours and (leftover / SCRATCH_MARK).is_file():
            shutil.rmtree(leftover, ignore_errors=True)
        elif ours and not any(leftover.iterdir()):
            leftover.rmdir()  # killed between making it and marking it: empty, nothing to lose
        else:
            raise SetupError(
                f"{leftover} is in the way of a checkpoint and is not textgym's scratch (no "
                f"{SCRATCH_MARK} in it); nothing was deleted: move it out of the run folder"
            )


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    config: Any,
    extra: Mapping[str, Any] | None = None,
    save_total_limit: int | None = None,
    optimizer_state: bool = True,
) -> Path:
    """Write ``output_dir/checkpoint-{step}`` (see the module docstring); return its path.

    In order: the free disk is checked against :func:`checkpoint_bytes` with a margin
    (:func:`with_margin`: 5% and 4 MiB); the checkpoint is written under a temporary name and renamed when complete (a run killed
    while saving never leaves a checkpoint that looks complete); then, and only then, the
    checkpoints beyond the newest ``save_total_limit`` are deleted (the meaning of TRL's and
    ``transformers``' ``save_total_limit``) and the optimizer state (``optimizer.pt``) is
    removed from every checkpoint but the new one: it is as large as the weights twice over,
    and a resume starts from the newest checkpoint.

    Args:
        save_total_limit: Most ``checkpoint-*`` folders kept (>= 1); ``None`` keeps all.
        optimizer_state: Write ``optimizer.pt``. Without it (a light save, when the disk is too
            full for a whole checkpoint) the older checkpoints keep theirs, and the checkpoint
            resumes only a run that has no step left to take
            (:func:`~textgym.algos.resume.read_trainer_state`).

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
        OutputWriteError: a file of it could not be written all the same (the disk filled up
            while saving, a quota, a read-only file system): one line; the part written is
            removed, nothing was deleted.
        FloatingPointError: a weight is NaN or inf; nothing was written or deleted.
    """
    root = Path(output_dir)
    final = root / f"checkpoint-{step}"
    root.mkdir(parents=True, exist_ok=True)
    _clear_scratch(root)
    last = latest_checkpoint(root)
    keeps = f"{last} is the last good checkpoint" if last else "no checkpoint was saved yet"
    size = checkpoint_bytes(root, model, optimizer, tokenizer, optimizer_state=optimizer_state)
    check_free_disk(root, with_margin(size), what=final.name, keeps=keeps)
    with saving_into(root / f".checkpoint-{step}.tmp", final, keeps) as scratch:
        scratch.mkdir()
        (scratch / SCRATCH_MARK).touch()
        save_model(model, tokenizer, scratch, base=saved_base(config), final_dir=final)
        state = {"step": step, "rng": rng_state(), "extra": dict(extra or {})}
        _torch_save(state, scratch / TRAINER_STATE)
        if optimizer_state:
            _torch_save(
                {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                scratch / OPTIMIZER_STATE,
            )
        (scratch / "trainer_config.json").write_text(
            json.dumps(asdict(config), indent=2, default=str) + "\n"
        )
    if final.exists():
        _remove_dir(final)
    scratch.rename(final)
    (final / SCRATCH_MARK).unlink()  # a whole checkpoint now, no longer scratch
    prune_checkpoints(root, save_total_limit, keep=final, strip=optimizer_state)
    return final


def _torch_save(value: Any, path: Path) -> None:
    """``torch.save`` into a file opened here, so a full disk is the ``OSError`` that torch's
    ``RuntimeError`` is raised during (:func:`textgym.results.os_error_behind`)."""
    with open(path, "wb") as fh:
        torch.save(value, fh)


def save_trainer_checkpoint(
    state: Any, step: int, *, extra: Mapping[str, Any] | None = None, final: bool = False
) -> Path:
    """:func:`save_checkpoint` of a trainer's state after ``step``: ``state``'s ``model``,
    ``tokenizer``, ``optimizer``, ``scheduler`` and ``config`` (a GRPO ``Learner``, an
    ``SFTRun``) into ``config.output_dir``, keeping ``config.save_total_limit`` checkpoints.

    With ``final`` (the run's last step: no step is left to take), a checkpoint the disk has no
    room for is saved without its optimizer state when that fits, so the finished weights are
    kept, and one line on stderr says what was kept and what works (``--resume`` finishes the
    run, ``--model`` starts a new one from it).

    Raises:
        InsufficientDiskSpace: too little free disk (with ``final``: even for the weights);
            nothing was written or deleted.
    """
    config = state.config
    save = functools.partial(
        save_checkpoint,
        config.output_dir,
        step,
        model=state.model,
        tokenizer=state.tokenizer,
        optimizer=state.optimizer,
        scheduler=state.scheduler,
        config=config,
        extra=extra,
        save_total_limit=config.save_total_limit,
    )
    try:
        return save()
    except InsufficientDiskSpace as whole:
        if not final:
            raise
        try:
            path = save(optimizer_state=False)
        except InsufficientDiskSpace:
            raise whole from None
        needed, free = getattr(whole, "needed", 0), getattr(whole, "free", 0)
    print(
        f"textgym: warning: not enough free disk for {path.name} with its optimizer state "
        f"(needs about {_mb(needed)}, {_mb(free)} were free); saved {path} without it "
        f"({_mb(_dir_bytes(path))}): the run's final weights are kept; --resume finishes the "
        f"run, --model {path} starts a new one from them",
        file=sys.stderr,
        flush=True,
    )
    return path


def prune_checkpoints(
    output_dir: str | Path, limit: int | None, *, keep: Path, strip: bool = True
) -> list[Path]:
    """Delete the oldest ``checkpoint-*`` folders beyond ``limit`` and (with ``strip``) the
    optimizer state of every checkpoint but ``keep`` (the one just written, never deleted).

    Returns:
        The checkpoints deleted.
    """
    others = [p for _, p in list_checkpoints(output_dir) if p != keep]  # oldest first
    doomed = others[: max(0, len(others) - (limit - 1))] if limit is not None else []
    for path in doomed:
        _remove_dir(path)
    for path in others[len(doomed) :] if strip else []:
        (path / OPTIMIZER_STATE).unlink(missing_ok=True)
    return doomed


def check_checkpoint_settings(config: Any) -> None:
    """Validate the checkpoint and evaluation settings a trainer config has.

    ``save_every`` and ``eval_every`` (intervals in steps; 0 has its documented meaning) must
    be ints >= 0, ``eval_episodes`` an int >= 1, ``save_total_limit`` ``None`` or an int >= 1
    (a limit of 0 would delete the checkpoint just written).

    Raises:
        ValueError: naming the field, the value and what is expected.
    """
    for name in ("save_every", "eval_every"):
        value = getattr(config, name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{name}: expected an int >= 0 (an interval in steps; 0 turns it off), got "
                f"{value!r}"
            )
    if hasattr(config, "eval_episodes"):
        check_positive_ints(config, ("eval_episodes",))
    limit = getattr(config, "save_total_limit", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"save_total_limit: expected None (keep every checkpoint) or an int >= 1, got {limit!r}"
        )


def save_final_model(model: Any, tokenizer: Any, config: Any) -> None:
    """Save the trained model into ``config.output_dir`` (the run's finished model, beside its
    checkpoints) through a scratch directory, so a run killed while
    saving never leaves a model that looks complete.

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written.
        OutputWriteError: a file could not be written all the same (a full disk): one line;
            the scratch directory is removed.
    """
    out = Path(config.output_dir)
    scratch = out / ".model.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    needed = with_margin(model_bytes(model) + tokenizer_bytes(tokenizer))
    check_free_disk(out, needed, what="the model", keeps="the checkpoints in it are intact")
    with saving_into(scratch, out, "the checkpoints in it are intact"):
        save_model(model, tokenizer, scratch, base=saved_base(config), final_dir=out)
    for item in scratch.iterdir():
        item.replace(out / item.name)
    scratch.rmdir()
