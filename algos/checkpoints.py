"""Checkpoints of the SFT and GRPO trainers: one layout, atomic and bounded saves, checked loads.

Both trainers save checkpoints in the same layout, so ``textgym train --model`` can start from a
``textgym sft`` output directory:

``checkpoint-{step}/`` holds the model (``save_pretrained``: full weights and the model's own
``config.json``, or with LoRA the adapter), the tokenizer, ``trainer_state.pt`` (RNG states,
step, extra trainer state), ``optimizer.pt`` (optimizer and scheduler state; only in the newest
checkpoint) and ``trainer_config.json`` (the trainer's arguments, which :func:`check_resumable`
compares on resume). The ``.pt`` files hold tensors and plain data only and are loaded with
``torch.load(..., weights_only=True)``. Saves are atomic and bounded (:func:`save_checkpoint`:
a free-disk check, a temporary folder renamed when complete, then ``save_total_limit``), and a
checkpoint is read and checked (keys, whole files, finite weights) before a resumed run takes
any step; every problem is a :class:`CheckpointError` naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import random
import re
import shutil
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from textgym.algos.common import check_finite_parameters, check_positive_ints

__all__ = [
    "CheckpointError",
    "InsufficientDiskSpace",
    "OPTIMIZER_STATE",
    "RESUME_MAY_CHANGE",
    "TRAINER_STATE",
    "check_checkpoint_settings",
    "check_free_disk",
    "check_resumable",
    "check_weight_files",
    "checkpoint_bytes",
    "checkpoint_to_resume",
    "latest_checkpoint",
    "load_checkpoint",
    "model_bytes",
    "prune_checkpoints",
    "read_trainer_state",
    "rng_state",
    "save_checkpoint",
    "save_model",
    "set_rng_state",
]

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) global RNG states, as tensors and plain data only (so a
    checkpoint loads with ``torch.load(..., weights_only=True)``)."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["kind"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointError(ValueError):
    """A checkpoint or model directory that cannot be resumed from or loaded: damaged or
    incomplete files, weights of another shape, NaN/inf weights, pickled objects, or nothing to
    resume. The message names the file and the fix; the CLI prints it as one line."""


class InsufficientDiskSpace(OSError):
    """Too little free disk for the next save; nothing of it was written, and the checkpoints
    already on disk are intact."""


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


#: Files of a checkpoint: the resumable state without the optimizer, and the optimizer and
#: scheduler state (kept only in the newest checkpoint, see :func:`save_checkpoint`).
TRAINER_STATE = "trainer_state.pt"
OPTIMIZER_STATE = "optimizer.pt"
_DISK_MARGIN = 1.1  # the estimate of the next checkpoint's size, times this ...
_DISK_SLACK = 64 * 2**20  # ... plus this many bytes (a tokenizer; file system overhead)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def check_free_disk(directory: str | Path, needed: int, *, what: str, keeps: str) -> None:
    """Raise :class:`InsufficientDiskSpace` unless ``directory`` has ``needed`` bytes free.

    Args:
        directory: Where the file or folder will be written.
        needed: Bytes it needs (an estimate with a margin).
        what: What is about to be saved, for the message (``"checkpoint-8"``).
        keeps: What stays good when the save is refused, for the message.

    Raises:
        InsufficientDiskSpace: naming the directory, the bytes needed and free, and the fix.
    """
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise InsufficientDiskSpace(
            f"not enough free disk in {directory} to save {what}: needs about {needed:,} bytes "
            f"({_mb(needed)}), {free:,} free ({_mb(free)}); nothing was written and {keeps}. "
            "Free some space (or lower --save-total-limit), then continue with --resume"
        )


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _tensor_bytes(tensors: Any) -> int:
    """Bytes of the distinct tensors in ``tensors`` (tied weights counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def checkpoint_bytes(output_dir: str | Path, model: Any, optimizer: torch.optim.Optimizer) -> int:
    """An estimate of the size of the next checkpoint in ``output_dir``, in bytes.

    The size of the newest full checkpoint (with optimizer state) when there is one; else what
    is saved counted from memory: the weights ``save_pretrained`` writes (the trainable
    adapter's with LoRA, all of them otherwise) plus the optimizer state (its tensors, or two
    float32 moments per trainable weight, AdamW's, before its first step).
    """
    last = latest_checkpoint(output_dir)
    if last is not None and (last / OPTIMIZER_STATE).is_file():
        return _dir_bytes(last)
    trainable = [p for p in model.parameters() if p.requires_grad]
    moments = [t for s in optimizer.state.values() for t in s.values()]
    state = _tensor_bytes(moments) or 2 * 4 * sum(p.numel() for p in trainable)
    return model_bytes(model) + state


def model_bytes(model: Any) -> int:
    """Bytes of the weights :func:`save_model` writes: the trainable adapter's with LoRA, every
    distinct weight otherwise (tied weights once)."""
    if getattr(model, "peft_config", None):
        return _tensor_bytes(p for p in model.parameters() if p.requires_grad)
    return _tensor_bytes(model.parameters())


def _remove_dir(path: Path) -> None:
    """Delete a directory so that it vanishes at once: renamed to a hidden name, then removed
    (a run killed while removing leaves a hidden folder, never a half checkpoint)."""
    doomed = path.with_name(f".{path.name}.deleting")
    shutil.rmtree(doomed, ignore_errors=True)
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _clear_scratch(root: Path) -> None:
    """Remove what a killed save or prune left behind (hidden ``.checkpoint-*`` folders)."""
    for leftover in root.glob(".checkpoint-*"):
        if leftover.is_dir() and leftover.name.endswith((".tmp", ".deleting")):
            shutil.rmtree(leftover, ignore_errors=True)


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
) -> Path:
    """Write ``output_dir/checkpoint-{step}`` (see the module docstring); return its path.

    In order: the free disk is checked against :func:`checkpoint_bytes` times 1.1 plus 64 MiB;
    the checkpoint is written under a temporary name and renamed when complete (a run killed
    while saving never leaves a checkpoint that looks complete); then, and only then, the
    checkpoints beyond the newest ``save_total_limit`` are deleted (the meaning of TRL's and
    ``transformers``' ``save_total_limit``) and the optimizer state (``optimizer.pt``) is
    removed from every checkpoint but the new one: it is as large as the weights twice over,
    and a resume starts from the newest checkpoint.

    Args:
        save_total_limit: Most ``checkpoint-*`` folders kept (>= 1); ``None`` keeps all.

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
        FloatingPointError: a weight is NaN or inf; nothing was written or deleted.
    """
    root = Path(output_dir)
    final = root / f"checkpoint-{step}"
    root.mkdir(parents=True, exist_ok=True)
    _clear_scratch(root)
    last = latest_checkpoint(root)
    keeps = f"{last} is the last good checkpoint" if last else "no checkpoint was saved yet"
    needed = int(checkpoint_bytes(root, model, optimizer) * _DISK_MARGIN) + _DISK_SLACK
    check_free_disk(root, needed, what=final.name, keeps=keeps)
    scratch = root / f".checkpoint-{step}.tmp"
    scratch.mkdir()
    save_model(model, tokenizer, scratch, base=config.model, final_dir=final)
    state = {"step": step, "rng": rng_state(), "extra": dict(extra or {})}
    torch.save(state, scratch / TRAINER_STATE)
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
        scratch / OPTIMIZER_STATE,
    )
    (scratch / "trainer_config.json").write_text(
        json.dumps(asdict(config), indent=2, default=str) + "\n"
    )
    if final.exists():
        _remove_dir(final)
    scratch.rename(final)
    prune_checkpoints(root, save_total_limit, keep=final)
    return final


def prune_checkpoints(output_dir: str | Path, limit: int | None, *, keep: Path) -> list[Path]:
    """Delete the oldest ``checkpoint-*`` folders beyond ``limit`` and the optimizer state of
    every checkpoint but ``keep`` (the one just written, never deleted).

    Returns:
        The checkpoints deleted.
    """
    others = [p for _, p in _checkpoints(output_dir) if p != keep]  # oldest first
    doomed = others[: max(0, len(others) - (limit - 1))] if limit is not None else []
    for path in doomed:
        _remove_dir(path)
    for path in others[len(doomed) :]:
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


#: Config fields a resumed run may change: how long it runs and how it reports, not what it
#: learns (changing those would make the saved config describe a run that did not happen).
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",
        "epochs",
        "resume",
        "time_limit_minutes",
        "env_workers",
        "save_every",
        "save_total_limit",
        "eval_every",
        "eval_episodes",
        "log_every",
        "tensorboard",
        "report_to",
        "progress",
        "device",
        "output_dir",
    }
)


def check_resumable(checkpoint: str | Path, config: Any) -> None:
    """Raise ValueError if ``checkpoint`` (``checkpoint-{step}``) is past ``config.steps``, or if
    ``config`` differs from the checkpoint's saved config in a field outside
    :data:`RESUME_MAY_CHANGE` (a new learning rate would otherwise be silently overridden by the
    restored optimizer and scheduler while the new config is recorded)."""
    done = int(Path(checkpoint).name.rsplit("-", 1)[1])
    steps = getattr(config, "steps", None)
    if steps is not None and done > steps:
        raise ValueError(
            f"Cannot resume from {checkpoint} with steps={steps}: the run is already past it; "
            f"pass steps >= {done}"
        )
    saved_file = Path(checkpoint) / "trainer_config.json"
    if not saved_file.exists():
        return
    try:
        saved = json.loads(saved_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{saved_file} does not read as JSON ({error}); it is damaged: restore it from the "
            "run's record (run.json holds the config) or start a new --output-dir"
        ) from None
    now = json.loads(json.dumps(asdict(config), default=str))
    changed = [
        f"{key}: {saved[key]!r} -> {value!r}"
        for key, value in now.items()
        if key not in RESUME_MAY_CHANGE and key in saved and saved[key] != value
    ]
    if changed:
        raise ValueError(
            f"Cannot resume from {checkpoint} with a different config ({'; '.join(changed)}); "
            f"only {', '.join(sorted(RESUME_MAY_CHANGE))} may change on resume. Use the saved "
            "values or start a new output_dir."
        )


def _checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint-{step}`` directory, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name))]
    return sorted(p for p in found if p[1].is_dir())


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The ``checkpoint-{step}`` directory with the largest step, or ``None``."""
    found = _checkpoints(output_dir)
    return found[-1][1] if found else None


def checkpoint_to_resume(output_dir: str | Path, config: Any) -> Path:
    """The checkpoint ``--resume`` continues: the newest in ``output_dir``, checked against
    ``config`` (:func:`check_resumable`) and read (:func:`read_trainer_state`) before anything
    else happens.

    Raises:
        CheckpointError: ``output_dir`` holds no checkpoint (nothing to resume), or its newest
            one is damaged.
        ValueError: the resume is refused by :func:`check_resumable`.
    """
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        held = "does not exist" if not Path(output_dir).exists() else "holds no checkpoint-*"
        raise CheckpointError(
            f"resume: nothing to resume: {output_dir} {held}; run without --resume to start a "
            "new run, or pass the --output-dir of the run to continue"
        )
    check_resumable(checkpoint, config)
    read_trainer_state(checkpoint)
    check_weight_files(checkpoint)
    return checkpoint


def _damaged(file: Path, problem: str) -> CheckpointError:
    """The error for a checkpoint file that does not load, with the fix."""
    return CheckpointError(
        f"{file} {problem}; the checkpoint is damaged (a run killed while copying it, or a full "
        f"disk): delete {file.parent} and resume from the one before, or start a new "
        "--output-dir (--model can start from an earlier checkpoint's weights)"
    )


def _load_data(file: Path) -> Any:
    """``torch.load(file, weights_only=True)``, every failure a :class:`CheckpointError`."""
    try:
        # weights_only: a checkpoint is data, never code (a pickled object could run anything).
        with warnings.catch_warnings():  # a foreign pickle protocol: refused below, in one line
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(file, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{file} holds objects other than tensors and plain data, so it was not loaded "
            f"(unpickling them could run code); it was not written by this version of textgym: "
            f"use a checkpoint that textgym wrote ({str(error).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise _damaged(file, f"does not load ({type(error).__name__}: {error})") from None


def read_trainer_state(path: str | Path) -> dict[str, Any]:
    """The saved trainer state of a checkpoint: ``step``, ``rng``, ``extra``, ``optimizer`` and
    ``scheduler`` (from ``optimizer.pt``, or from ``trainer_state.pt`` in checkpoints written
    before the optimizer state got its own file), checked for every key.

    Raises:
        CheckpointError: a file is missing, truncated, not data (pickled objects), or lacks a
            key; or the checkpoint holds no optimizer state (only the newest keeps it).
    """
    path = Path(path)
    state_file = path / TRAINER_STATE
    if not state_file.is_file():
        raise CheckpointError(
            f"Expected a checkpoint directory with {TRAINER_STATE}, got {path} without one; "
            "resume from a checkpoint-* folder that textgym train or sft wrote"
        )
    state = _load_data(state_file)
    needed = ("step", "rng", "extra")
    if not isinstance(state, dict) or any(key not in state for key in needed):
        seen = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise _damaged(state_file, f"lacks keys (expected {', '.join(needed)}, got {seen})")
    if "optimizer" not in state:
        optimizer_file = path / OPTIMIZER_STATE
        if not optimizer_file.is_file():
            raise CheckpointError(
                f"{path} holds no optimizer state ({OPTIMIZER_STATE}): only the newest "
                "checkpoint of a run keeps it (--save-total-limit), so resume continues the "
                f"newest; to start a new run from {path.name}'s weights pass --model {path}"
            )
        extra = _load_data(optimizer_file)
        if not isinstance(extra, dict) or {"optimizer", "scheduler"} - set(extra):
            raise _damaged(optimizer_file, "lacks keys (expected optimizer, scheduler)")
        state |= extra
    if not isinstance(state["step"], int) or not isinstance(state["extra"], dict):
        raise _damaged(state_file, "holds a step or extra state of the wrong type")
    return state


def check_weight_files(path: str | Path) -> None:
    """Read every ``*.safetensors`` file of a model or checkpoint directory, one tensor at a
    time, and check that it is whole and finite.

    Raises:
        CheckpointError: no weights file, a file that does not read (truncated, a bad header),
            or a tensor holding NaN or inf (naming the file and the tensor).
    """
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{path} holds no *.safetensors weights; resume from a checkpoint-* folder that "
            "textgym train or sft wrote"
        )
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as weights:
                for name in weights.keys():  # noqa: SIM118  (safe_open is not a mapping)
                    tensor = weights.get_tensor(name)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        raise CheckpointError(
                            f"{file}: tensor {name} holds NaN or inf values, so training from "
                            "it would be NaN from the first step; resume from an earlier "
                            "checkpoint or start a new --output-dir"
                        )
        except CheckpointError:
            raise
        except Exception as error:  # safetensors raises its own SafetensorError, OSError, ...
            raise _damaged(file, f"does not read ({type(error).__name__}: {error})") from None


def load_checkpoint(
    path: str | Path, *, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any
) -> dict[str, Any]:
    """Load weights, optimizer, scheduler and RNG states from a checkpoint into live objects.

    Returns:
        The saved trainer state (``step``, ``extra``).

    Raises:
        CheckpointError: (a ValueError) ``path`` is not a complete checkpoint, a file is
            truncated or lacks a key, ``trainer_state.pt`` holds anything but tensors and plain
            data (it is loaded with ``weights_only=True`` and never unpickled as arbitrary
            objects), or the weights do not fit ``model`` or are not finite.
    """
    path = Path(path)
    state = read_trainer_state(path)
    _load_weights(model, path)
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as error:
        raise _damaged(
            path / OPTIMIZER_STATE, f"does not fit this run ({type(error).__name__}: {error})"
        ) from None
    return state


def _load_weights(model: Any, path: Path) -> None:
    """Copy saved weights (full model or LoRA adapter) into ``model`` in place, then check
    that every weight is finite.

    Raises:
        CheckpointError: the files do not read, do not fit ``model`` (other names or shapes),
            or hold NaN or inf.
    """
    try:
        if hasattr(model, "load_adapter") and (path / "adapter_config.json").exists():
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
        else:
            from safetensors.torch import load_file

            saved: dict[str, torch.Tensor] = {}
            for file in sorted(path.glob("*.safetensors")):  # model.safetensors, or its shards
                saved |= load_file(str(file))
            own = model.state_dict()
            wrong = [
                f"{name} {tuple(tensor.shape)} (the model's {tuple(own[name].shape)})"
                for name, tensor in saved.items()
                if name in own and own[name].shape != tensor.shape
            ]
            if wrong:
                raise CheckpointError(
                    f"{path} holds weights of another shape than the model's: "
                    f"{'; '.join(wrong[:3])}; resume with the --model the run was started with"
                )
            missing, unexpected = model.load_state_dict(saved, strict=False)
            if unexpected or [m for m in missing if "lm_head" not in m]:
                raise CheckpointError(
                    f"Checkpoint {path} does not match the model: missing {missing}, unexpected "
                    f"{unexpected}; resume with the --model the run was started with"
                )
    except CheckpointError:
        raise
    except Exception as error:  # safetensors' own errors, peft's size mismatch, ...
        raise CheckpointError(
            f"The weights in {path} do not load into the model "
            f"({type(error).__name__}: {' '.join(str(error).split())[:300]}); resume with the "
            "--model the run was started with, or start a new --output-dir"
        ) from None
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise CheckpointError(
                f"{path}: weight {name} holds NaN or inf values after loading, so training "
                "from it would be NaN from the first step; resume from an earlier checkpoint "
                "or start a new --output-dir"
            )
