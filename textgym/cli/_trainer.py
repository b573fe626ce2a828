"""What ``textgym sft`` and ``textgym train`` share: the checks before training starts.

What can be checked before training starts is, and is reported as a usage error: the config's
own validation (at parse time), the device, the env, wrappers and kwargs (``train``), the output
directory, and the errors of loading the model or reading the data.

The output directory follows the rule of every subcommand (:mod:`textgym.cli.outputs`): it is
locked while the run writes, and one that is not empty is refused unless ``--resume``
continues its run (``train``) or ``--overwrite`` replaces it (the earlier run's files are
deleted first). A run that fails after it started on a reward that is NaN, infinite or beyond
the reward tensor's range, or on a loss that keeps being non-finite, ends in one
``textgym: error:`` line and exit code 1.

SIGTERM (how ``kill``, SLURM and Kubernetes stop a job) is handled as a Ctrl-C: the step in
progress finishes (an evaluation is abandoned), the last completed step is saved as a
checkpoint whatever ``save_every`` says, the output directory's lock is released, and one line
says what was kept and how to continue; the exit code is 143 (128 + SIGTERM). A second SIGTERM
(or Ctrl-C) ends the process at once, with one line and exit code 143 (130), the last
checkpoint intact.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textgym.cli.building import build_env
from textgym.cli.outputs import claim_dir, json_safe
from textgym.errors import UsageError

__all__ = ["TERMINATED", "OutputOptions", "check_device", "run_trainer", "trainer_config"]


@dataclasses.dataclass(kw_only=True)
class OutputOptions:
    """The command line's own option for a trainer's output directory."""

    overwrite: bool = False
    """Replace the run already in output_dir: its files are deleted first (refused for a
    directory that holds no textgym run). Without it a non-empty output_dir is refused (train:
    unless --resume)."""


def trainer_config(config_class: type) -> type:
    """``config_class`` (a trainer's config dataclass) with :class:`OutputOptions` added, as the
    command line parses it; :func:`run_trainer` hands the trainer the plain config."""
    return dataclasses.make_dataclass(
        config_class.__name__,
        [],
        bases=(OutputOptions, config_class),
        kw_only=True,
        namespace={"__doc__": config_class.__doc__, "__module__": config_class.__module__},
    )


def _plain(config: Any) -> Any:
    """The trainer's own config from a :func:`trainer_config` instance (validated again)."""
    if not isinstance(config, OutputOptions):
        return config
    base = type(config).__bases__[1]
    return base(**{f.name: getattr(config, f.name) for f in dataclasses.fields(base) if f.init})


def check_device(device: str) -> None:
    """Check a trainer's ``--device`` on this machine before anything loads.

    Raises:
        UsageError: not ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (``tpu``, ``gpu``, ...), CUDA
            asked for on a machine without it, or a CUDA index this machine does not have
            (outside ``torchrun``, where each rank takes ``cuda:LOCAL_RANK``).
    """
    import torch

    if device == "auto":
        return
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise UsageError(
            f"--device {device!r} is not a device textgym trains on; expected auto, cpu, cuda "
            "or cuda:N (N a CUDA device index)"
        )
    if resolved.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: CUDA is not available on this machine; use --device cpu "
            "(or auto, which takes CUDA where there is one)"
        )
    count = torch.cuda.device_count()
    if resolved.index is not None and resolved.index >= count and _world_size() <= 1:
        raise UsageError(
            f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}; use one of them"
        )


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


#: Prints a finished run's summary: ``report(config, result, elapsed_s)``.
Report = Callable[[Any, dict[str, Any], float], None]


#: The exit code of a run stopped by SIGTERM: 128 + 15, as a shell reports a process it killed.
TERMINATED = 128 + signal.SIGTERM


class _SigtermAsInterrupt:
    """SIGTERM handled as a Ctrl-C for the block: the handler SIGINT has at that moment is
    called (the trainer's :class:`~textgym.algos.common.StopOnInterrupt`, which stops after the
    step with a checkpoint; else the default one, which raises ``KeyboardInterrupt`` so that
    the output directory's lock is released as the stack unwinds). A second SIGTERM ends the
    process at once with one line and exit code 143
    (:func:`~textgym.algos.common.exit_at_once`). Outside the main thread, where no handler can
    be set, it does nothing.

    Attributes:
        received: A SIGTERM arrived.
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> _SigtermAsInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        from textgym.algos.common import exit_at_once

        if self.received:  # the second SIGTERM, wherever it lands (a lock's release, a save)
            exit_at_once(signum)
        self.received = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signum, frame)
        else:  # SIGINT ignored (a background job) or not set from Python
            raise KeyboardInterrupt


def _terminated_line(exc: KeyboardInterrupt, output_dir: Path) -> str:
    """The one line for a run stopped by SIGTERM: what was kept and the command that works."""
    from textgym.algos.checkpoint_layout import latest_checkpoint
    from textgym.algos.common import TrainingInterrupted
    from textgym.algos.resume import RUN_RECORD

    if isinstance(exc, TrainingInterrupted):
        return (
            f"textgym: terminated (SIGTERM) after step {exc.step}; saved {exc.checkpoint} "
            "(continue with --resume)"
        )
    last = latest_checkpoint(output_dir) if output_dir.is_dir() else None
    if last is not None:
        return (
            f"textgym: terminated (SIGTERM) during a step; {last} is the last checkpoint "
            "(continue with --resume)"
        )
    if (output_dir / RUN_RECORD).is_file():
        return (
            "textgym: terminated (SIGTERM) before the first step was done; nothing to keep: "
            "the same command with --resume starts the run again"
        )
    return "textgym: terminated (SIGTERM) before the run started; run the same command again"


def run_trainer(
    config: Any, train: Callable[[Any], dict[str, Any]], report: Report | None = None
) -> int:
    """Check what can be checked, run ``train(config)`` and print its summary: ``report``
    (:mod:`textgym.cli.training_tables`), or the result as JSON without one; a SIGTERM is
    handled as a Ctrl-C (see the module docstring).

    Returns:
        0 when the run finished; 143 when a SIGTERM stopped it (one ``textgym: terminated``
        line).

    Raises:
        UsageError: a device this machine does not have, an env that cannot be made, an output
            directory that cannot be written, is locked by another run or holds a run that
            neither ``--resume`` nor ``--overwrite`` was given for, a model or data file that
            cannot be loaded, a resume that is refused.
        TextgymError: what the trainer raises (:mod:`textgym.errors`: a model, data file or
            checkpoint that cannot be used, a non-finite return or loss), which
            :func:`textgym.cli.main` reports in one line.
        KeyboardInterrupt: a Ctrl-C (:class:`~textgym.algos.common.TrainingInterrupted` when
            the last completed step was saved).
    """
    with _SigtermAsInterrupt() as sigterm:
        try:
            return _claim_and_train(config, train, report)
        except KeyboardInterrupt as exc:
            if not sigterm.received:
                raise
            print(_terminated_line(exc, Path(config.output_dir)), file=sys.stderr, flush=True)
            return TERMINATED


def _claim_and_train(
    config: Any, train: Callable[[Any], dict[str, Any]], report: Report | None
) -> int:
    """:func:`run_trainer` without its SIGTERM handling."""
    check_device(config.device)
    overwrite = getattr(config, "overwrite", False)
    config = _plain(config)
    env_id = getattr(config, "env_id", None)  # train has an env; sft has none
    if env_id is not None:  # build the env once, as train will
        wrappers, opponents = list(config.wrappers), config.opponent_random_move_prob
        _, probe = build_env(env_id, dict(config.env_kwargs), wrappers, opponents)
        probe.close()
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 claims the directory
        return _train(config, train, report)
    if getattr(config, "dry_run", False):  # writes nothing: the directory is left as it is
        return _train(config, train, None)
    resume = getattr(config, "resume", None)  # train has --resume; sft has none
    with claim_dir(
        Path(config.output_dir), "--output-dir", overwrite=overwrite, resume=resume, clear=True
    ):
        return _train(config, train, report)


def _train(config: Any, train: Callable[[Any], dict[str, Any]], report: Report | None) -> int:
    """:func:`run_trainer` once the output directory is claimed."""
    from textgym.algos.distributed import shutdown_distributed

    began = time.perf_counter()
    result = train(config)
    shutdown_distributed()  # under torchrun: the ranks leave together (a no-op otherwise)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 reports the run
        if report is None:
            print(json.dumps(json_safe(result), indent=2))
        else:
            report(config, result, time.perf_counter() - began)
    return 0
