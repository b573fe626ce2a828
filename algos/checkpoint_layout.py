"""The layout of a trainer checkpoint: its folder and file names, where a run's checkpoints are,
the RNG states it keeps, and the errors of saving and loading one.

``output_dir/checkpoint-{step}/`` holds the model and tokenizer (``save_pretrained``),
``trainer_state.pt`` (:data:`TRAINER_STATE`: RNG states, step, extra trainer state),
``optimizer.pt`` (:data:`OPTIMIZER_STATE`: optimizer and scheduler state, only in the newest
checkpoint) and ``trainer_config.json``. Saving is :mod:`textgym.algos.checkpoints`, loading and
resuming :mod:`textgym.algos.resume`; both build on this module.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from textgym.errors import SetupError, TextgymError

__all__ = [
    "CheckpointError",
    "InsufficientDiskSpace",
    "OPTIMIZER_STATE",
    "TRAINER_STATE",
    "latest_checkpoint",
    "list_checkpoints",
    "rng_state",
    "set_rng_state",
]

#: Files of a checkpoint: the resumable state without the optimizer, and the optimizer and
#: scheduler state (kept only in the newest checkpoint, see
#: :func:`~textgym.algos.checkpoints.save_checkpoint`).
TRAINER_STATE = "trainer_state.pt"
OPTIMIZER_STATE = "optimizer.pt"

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


class CheckpointError(SetupError):
    """A checkpoint or model directory that cannot be resumed from or loaded: damaged or
    incomplete files, weights of another shape, NaN/inf weights, pickled objects, or nothing to
    resume. The message names the file and the fix; the CLI prints it as one line."""


class InsufficientDiskSpace(TextgymError, OSError):
    """Too little free disk for the next save; nothing of it was written, and the checkpoints
    already on disk are intact."""


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint-{step}`` directory, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name))]
    return sorted(p for p in found if p[1].is_dir())


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The ``checkpoint-{step}`` directory with the largest step, or ``None``."""
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None
