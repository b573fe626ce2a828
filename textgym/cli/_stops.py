"""How ``textgym train`` and ``textgym sft`` report a run that stops before its end.

- Ctrl-C or SIGTERM: the trainer gives up the step in progress at its next check (between
  dynamic sampling rounds, after an evaluation turn) or finishes it, saves the last whole step
  and raises :class:`~textgym.algos.common.TrainingInterrupted`; one line names the checkpoint,
  exit 130 (143 for SIGTERM). A second signal stops at once
  (:func:`~textgym.algos.common.exit_at_once`: one ``textgym: ... again`` line, exit 130 or
  143, the last checkpoint intact).
- A checkpoint that cannot be resumed (nothing to resume, damaged or truncated files, missing
  keys, pickled objects, weights of another shape or holding NaN/inf):
  :class:`~textgym.algos.checkpoint_layout.CheckpointError`, one ``textgym: error:`` line naming
  the file and the fix, exit 2, before any step runs.
- Too little free disk for the next save:
  :class:`~textgym.algos.checkpoint_layout.InsufficientDiskSpace`, one ``textgym: error:`` line
  naming the directory and the bytes needed and free, exit 1, the last checkpoint intact.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from textgym.cli._trainer import Report, run_trainer

__all__ = ["run_training"]


def run_training(
    config: Any, train: Callable[[Any], dict[str, Any]], report: Report | None = None
) -> int:
    """:func:`~textgym.cli._trainer.run_trainer`, with the early stops above as one line each.

    Returns:
        ``run_trainer``'s code; 130 after a Ctrl-C that saved a checkpoint.

    Raises:
        CheckpointError: a checkpoint that cannot be resumed (a
            :class:`~textgym.errors.SetupError`: exit code 2).
        InsufficientDiskSpace: the disk is too full for the next save (exit code 1).
        UsageError: what ``run_trainer`` raises.
    """
    from textgym.algos.common import TrainingInterrupted

    try:
        return run_trainer(config, train, report)
    except TrainingInterrupted as exc:
        print(f"textgym: {exc}", file=sys.stderr)
        return 130
