"""Resuming a training run: which checkpoint to continue, whether the new config may continue
it, and reading the checkpoint back (trainer state, whole and finite weights) into live objects.

Every file is read and checked before a resumed run takes any step, and every problem is a
:class:`~textgym.algos.checkpoint_layout.CheckpointError` naming the file and the fix. The
``.pt`` files are loaded with ``torch.load(..., weights_only=True)``: a checkpoint is data, never
code.
"""

from __future__ import annotations

import json
import math
import pickle
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from textgym.algos.checkpoint_layout import (
    OPTIMIZER_STATE,
    TRAINER_STATE,
    CheckpointError,
    latest_checkpoint,
    set_rng_state,
)
from textgym.errors import SetupError

__all__ = [
    "RESUME_MAY_CHANGE",
    "RUN_RECORD",
    "check_epochs_left",
    "check_resumable",
    "check_weight_files",
    "checkpoint_to_resume",
    "evaluation_row",
    "load_checkpoint",
    "read_trainer_state",
    "run_to_continue",
]


#: Config fields a resumed run may change: how long it runs and how it reports, not what it
#: learns (changing those would make the saved config describe a run that did not happen).
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",
        "epochs",
        "resume",
        "time_limit_minutes",
        "env_workers",
        "env_url",  # where the episodes run; a server of another env recipe is refused anyway
        "save_every",
        "save_total_limit",
        "eval_every",
        "eval_episodes",
        "load_best_model_at_end",
        "log_every",
        "tensorboard",
        "report_to",
        "progress",
        "log_completions",
        "dry_run",
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
        raise CheckpointError(
            f"Cannot resume from {checkpoint} with steps={steps}: the run is already past it; "
            f"pass steps >= {done}"
        )
    saved_file = Path(checkpoint) / "trainer_config.json"
    if not saved_file.exists():
        return
    try:
        saved = json.loads(saved_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise CheckpointError(
            f"{saved_file} does not read as JSON ({reason}); it is damaged: restore it from the "
            "run's record (run.json holds the config) or start a new --output-dir"
        ) from None
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"{saved_file} holds a {type(saved).__name__}, expected a JSON object of the run's "
            "config; it is damaged: restore it from the run's record (run.json holds the "
            "config) or start a new --output-dir"
        )
    now = json.loads(json.dumps(asdict(config), default=str))
    changed = [
        f"{key}: {saved[key]!r} -> {value!r}"
        for key, value in now.items()
        if key not in RESUME_MAY_CHANGE and key in saved and saved[key] != value
    ]
    if changed:
        raise CheckpointError(
            f"Cannot resume from {checkpoint} with a different config ({'; '.join(changed)}); "
            f"only {', '.join(sorted(RESUME_MAY_CHANGE))} may change on resume. Use the saved "
            "values or start a new output_dir."
        )


#: What a trainer writes into its output directory when a run starts (before any step).
RUN_RECORD = "run.json"


def check_epochs_left(checkpoint: Path | None, total_steps: int, epochs: int) -> None:
    """Refuse an SFT resume whose checkpoint is past the run's last step: ``epochs`` epochs of
    ``total_steps // epochs`` optimizer steps are fewer than the run it continues made.

    Raises:
        SetupError: naming the checkpoint's step, the run's steps and the ``--epochs`` needed.
    """
    if checkpoint is None:
        return
    done = int(checkpoint.name.rsplit("-", 1)[1])
    if done > total_steps:
        per_epoch = total_steps // epochs
        raise SetupError(
            f"Cannot resume from {checkpoint} with epochs={epochs}: the run is already "
            f"past it (step {done}; {epochs} epoch(s) of {per_epoch} steps are "
            f"{total_steps}); pass --epochs >= {-(-done // per_epoch)}"
        )


def run_to_continue(output_dir: str | Path, config: Any, finished_marker: str) -> Path | None:
    """What a trainer (SFT, GRPO) checks of ``output_dir`` before it writes anything there:
    with ``config.resume``, the checkpoint to continue (:func:`checkpoint_to_resume`); without,
    ``None`` once it is sure no earlier run is there to be overwritten.

    Raises:
        SetupError: without ``resume``, ``output_dir`` already holds a run (a non-empty
            ``metrics.jsonl``, or ``finished_marker``, the file a finished run writes last).
        CheckpointError, ValueError: as :func:`checkpoint_to_resume`.
    """
    if config.resume:
        return checkpoint_to_resume(output_dir, config)
    out = Path(output_dir)
    metrics = out / "metrics.jsonl"
    if (out / finished_marker).exists() or (metrics.is_file() and metrics.stat().st_size > 0):
        raise SetupError(
            f"output_dir: expected {out} to hold no training run yet, got one (metrics.jsonl "
            f"or {finished_marker}); choose a new --output-dir, delete that one, or pass "
            "--resume to continue its newest checkpoint"
        )
    return None


def checkpoint_to_resume(output_dir: str | Path, config: Any) -> Path | None:
    """The checkpoint ``--resume`` continues: the newest in ``output_dir``, checked against
    ``config`` (:func:`check_resumable`) and read (:func:`read_trainer_state`) before anything
    else happens.

    A run that stopped before its first checkpoint (killed, or stopped by a signal before its
    first step was done) has its record (``run.json``) and no checkpoint: it has nothing to
    keep, so it is started again from scratch (``None``, with one line on stderr saying so).

    Raises:
        CheckpointError: ``output_dir`` holds no run and no checkpoint (nothing to resume), or
            its newest checkpoint is damaged.
        ValueError: the resume is refused by :func:`check_resumable`.
    """
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        if (Path(output_dir) / RUN_RECORD).is_file():
            print(
                f"textgym: {output_dir} holds a run that stopped before its first checkpoint; "
                "nothing to keep, so --resume starts it from scratch",
                file=sys.stderr,
                flush=True,
            )
            return None
        held = "does not exist" if not Path(output_dir).exists() else "holds no checkpoint-*"
        raise CheckpointError(
            f"resume: nothing to resume: {output_dir} {held}; run without --resume to start a "
            "new run, or pass the --output-dir of the run to continue"
        )
    check_resumable(checkpoint, config)
    read_trainer_state(checkpoint, optimizer_needed=not _last_step(checkpoint, config))
    check_weight_files(checkpoint)
    return checkpoint


def _last_step(checkpoint: Path, config: Any) -> bool:
    """Whether ``checkpoint`` is of the run's last step (``config.steps``; a GRPO run), after
    which no optimizer step is left to take."""
    steps = getattr(config, "steps", None)
    return steps is not None and Path(checkpoint).name == f"checkpoint-{steps}"


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


def read_trainer_state(path: str | Path, *, optimizer_needed: bool = True) -> dict[str, Any]:
    """The saved trainer state of a checkpoint: ``step``, ``rng``, ``extra``, ``optimizer`` and
    ``scheduler`` (from ``optimizer.pt``, or from ``trainer_state.pt`` in checkpoints written
    before the optimizer state got its own file), checked for every key.

    Without ``optimizer_needed`` (the run's last step, saved without its optimizer state when
    the disk was full) a checkpoint without ``optimizer.pt`` gives no ``optimizer`` and
    ``scheduler`` keys.

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
        if not optimizer_file.is_file() and not optimizer_needed:
            return state
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
            a tensor that is not floating-point (integer or quantized weights would be cast
            into the model's floats, most of them to 0:
            :func:`~textgym.model_files.read_weight_header`, the check of eval and
            ``--model``), or a tensor holding NaN or inf (naming the file and the tensor).
    """
    from safetensors import safe_open

    from textgym.model_files import ModelLoadError, read_weight_header

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{path} holds no *.safetensors weights; resume from a checkpoint-* folder that "
            "textgym train or sft wrote"
        )
    for file in files:
        try:
            read_weight_header(file)  # floating point only, as eval and --model check
        except ModelLoadError as error:
            raise CheckpointError(
                f"{error}; or resume from an earlier checkpoint, or start a new --output-dir"
            ) from None
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
    path: str | Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    optimizer_needed: bool = True,
) -> dict[str, Any]:
    """Load weights, optimizer, scheduler and RNG states from a checkpoint into live objects.

    Args:
        optimizer_needed: Refuse a checkpoint without optimizer state (see
            :func:`read_trainer_state`); without it, such a checkpoint leaves ``optimizer`` and
            ``scheduler`` as they are.

    Returns:
        The saved trainer state (``step``, ``extra``).

    Raises:
        CheckpointError: (a ValueError) ``path`` is not a complete checkpoint, a file is
            truncated or lacks a key, ``trainer_state.pt`` holds anything but tensors and plain
            data (it is loaded with ``weights_only=True`` and never unpickled as arbitrary
            objects), the weights do not fit ``model`` or are not finite, or the optimizer
            state does not fit ``model``'s trainable weights (other counts or shapes).
    """
    path = Path(path)
    state = read_trainer_state(path, optimizer_needed=optimizer_needed)
    _load_weights(model, path)
    try:
        if "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as error:
        raise _damaged(
            path / OPTIMIZER_STATE, f"does not fit this run ({type(error).__name__}: {error})"
        ) from None
    _check_optimizer_shapes(optimizer, path / OPTIMIZER_STATE)
    return state


def _check_optimizer_shapes(optimizer: torch.optim.Optimizer, file: Path) -> None:
    """Raise :class:`CheckpointError` if a loaded optimizer state tensor (AdamW's moments) has
    another shape than its weight: ``load_state_dict`` checks only the counts, and the first
    update would then fail deep inside the optimizer."""
    for group in optimizer.param_groups:
        for index, param in enumerate(group["params"]):
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise CheckpointError(
                        f"{file} holds optimizer state {key!r} of shape {tuple(value.shape)} "
                        f"for weight {index} of shape {tuple(param.shape)}; it was written for "
                        "another model: resume with the --model the run was started with, or "
                        "start a new --output-dir"
                    )


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


def evaluation_row(metrics_file: str | Path, step: int) -> dict[str, float] | None:
    """The metrics of step ``step``'s evaluation as ``metrics.jsonl`` holds them (``null`` read
    back as NaN), or ``None`` when it holds none (or does not exist): a resumed run plays an
    evaluation it lacks and reads back one it has, so no row is missing or there twice.

    Raises:
        ValueError: a line of the file that is not a JSON object.
    """
    from textgym.algos.metric_rows import RESERVED_KEYS, read_metrics

    if not Path(metrics_file).is_file():
        return None
    rows = [r for r in read_metrics(metrics_file) if r.get("stage") == "eval" and r["step"] == step]
    if not rows:
        return None
    return {
        key: math.nan if value is None else value
        for key, value in rows[-1].items()
        if key not in RESERVED_KEYS
    }
