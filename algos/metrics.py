"""Training metrics: one JSON Lines file per run, optional TensorBoard scalars and trackers.

:class:`MetricsLogger` appends one row per call to ``run_dir/metrics.jsonl`` (``{"step": ...,
"stage": ..., **metrics}``, flushed at once so a crash loses nothing) and, when asked, mirrors
every finite value to TensorBoard under ``run_dir/tensorboard`` as the tag ``"{stage}/{key}"``,
and to the experiment trackers named in ``report_to`` (:data:`REPORT_TO`: Weights & Biases,
Trackio), each through its own library, under the same names. :func:`write_run_record` writes
``run.json``, how to reproduce the run.

The rows are read back with :func:`~textgym.algos.metric_rows.read_metrics`, drawn with
:func:`~textgym.algos.metric_plots.plot_metrics` and
:func:`~textgym.algos.metric_plots.plot_runs` and put in words with
:func:`~textgym.algos.metric_summaries.progress_line`,
:func:`~textgym.algos.metric_summaries.training_summary` and
:func:`~textgym.algos.metric_summaries.compare_runs`.

TensorBoard (``torch.utils.tensorboard``, which needs the ``tensorboard`` package),
``wandb``, ``trackio`` and ``matplotlib`` are imported only when used, so importing this module
needs none of them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textgym.algos.metric_rows import METRICS_FILENAME, RESERVED_KEYS, read_metrics
from textgym.errors import MissingExtraError, OutputWriteError
from textgym.results import JsonlWriter, write_atomic, write_failure

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["REPORT_TO", "TENSORBOARD_DIRNAME", "MetricsLogger", "rank_logger", "write_run_record"]

#: Name of the TensorBoard log folder inside a run directory.
TENSORBOARD_DIRNAME = "tensorboard"

#: What ``report_to`` may name, as TRL's ``report_to``: ``tensorboard`` (the same as
#: ``tensorboard=True``), ``wandb`` (Weights & Biases; ``WANDB_MODE=offline`` logs without an
#: account, ``wandb sync`` uploads later), ``trackio`` (local-first; ``trackio show`` opens its
#: dashboard), ``none`` (nothing beyond ``metrics.jsonl``).
REPORT_TO = ("tensorboard", "wandb", "trackio", "none")


def _to_scalar(key: str, value: Any) -> int | float | bool:
    """Return ``value`` as a Python ``int``, ``float`` or ``bool``.

    NumPy scalars, 0-d NumPy arrays and 0-d torch tensors are unwrapped with ``.item()``.

    Raises:
        TypeError: naming ``key``, if the value is not a real scalar.
    """
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return value
    raise TypeError(
        f"Expected metric {key!r} to be an int, float, bool or a 0-d numpy/torch scalar, got "
        f"{type(value).__name__} ({value!r:.60}); log numbers only and convert with float()"
    )


def _json_value(value: float) -> float | None:
    """Return ``value`` with NaN and ±inf replaced by ``None`` (JSON ``null``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _check_step(step: Any) -> int:
    """Return ``step`` as an ``int``.

    Raises:
        TypeError: if ``step`` is a bool or not an integer.
        ValueError: if ``step`` is negative.
    """
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(f"Expected step to be an int, got {type(step).__name__} ({step!r})")
    step = int(step.__index__())
    if step < 0:
        raise ValueError(f"Expected step >= 0, got {step}")
    return step


def _tags(stage: str, row: Mapping[str, Any]) -> dict[str, float]:
    """The finite metric values of ``row`` by tag ``"{stage}/{key}"`` (how trackers name them)."""
    return {
        f"{stage}/{key}": float(value)
        for key, value in row.items()
        if key not in RESERVED_KEYS and _json_value(value) is not None
    }


def _build_row(step: int, stage: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Return the row ``{"step", "stage", **metrics}`` with values checked and converted.

    Raises:
        TypeError: for a non-string key or a value that is not a real scalar.
        ValueError: for a key that collides with ``"step"`` or ``"stage"``.
    """
    row: dict[str, Any] = {"step": step, "stage": stage}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"Expected metric names to be str, got {type(key).__name__} ({key!r})")
        if key in RESERVED_KEYS:
            raise ValueError(
                f"Expected metric names other than {RESERVED_KEYS}, got {key!r}; pass the step "
                f"and stage as arguments of log() and rename the metric"
            )
        row[key] = _to_scalar(key, value)
    return row


def _open_summary_writer(log_dir: Path, purge_step: int | None = None) -> Any:
    """Return a ``torch.utils.tensorboard.SummaryWriter`` writing to ``log_dir``.

    Args:
        log_dir: folder for the event files.
        purge_step: when given, TensorBoard hides events of earlier writers at steps
            ``>= purge_step`` (used after :meth:`MetricsLogger.truncate_after`).

    Raises:
        ImportError: if torch or the ``tensorboard`` package is not installed.
        OutputWriteError: the folder or its event file cannot be made (a full disk): one
            line naming it.
    """
    try:
        import tensorboard  # noqa: F401  (torch's message for a missing package is vaguer)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise MissingExtraError(
            f"Expected torch and tensorboard to be installed for tensorboard=True, got "
            f'ImportError ({exc}); fix: pip install "textgym[train]", or pass '
            f"--no-tensorboard to log JSON Lines only"
        ) from exc
    try:  # makes the folder and writes the event file's header now
        return SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
    except OSError as exc:
        failure = exc
    raise _write_failure(failure, log_dir)  # outside the except: one error, not a chain


def _write_failure(exc: OSError, path: Path) -> OutputWriteError:
    """The one-line error of a metrics file or folder that cannot be written."""
    if isinstance(exc, OutputWriteError):
        return exc
    keeps = f"the rows already in {METRICS_FILENAME} are whole"
    return write_failure(exc, Path(exc.filename) if exc.filename else path, keeps)


class _Tracker:
    """A run of an experiment tracker with the W&B-style API (``init``, ``log``, ``finish``):
    ``wandb`` or ``trackio``, fed every finite value as ``"{stage}/{key}"`` at its step.

    The run is named after the run directory, in the project ``$WANDB_PROJECT`` /
    ``$TRACKIO_PROJECT`` (default ``textgym``), with the trainer's config. W&B keeps its files in
    the run directory (``run_dir/wandb``), Trackio in its own store (``$TRACKIO_DIR``).

    Raises:
        ImportError: the tracker's library is not installed (the message gives the extra).
    """

    def __init__(self, name: str, run_dir: Path, config: Mapping[str, Any] | None) -> None:
        try:
            module = __import__(name)
        except ImportError as exc:
            raise MissingExtraError(
                f"Expected the {name} package for report_to={name!r}, got ImportError ({exc}); "
                f'fix: pip install "textgym[{name}]", or leave {name} out of report_to'
            ) from exc
        self.name = name
        project = os.environ.get(f"{name.upper()}_PROJECT", "textgym")
        options: dict[str, Any] = {"project": project, "name": run_dir.name, "config": config}
        if name == "wandb":
            options["dir"] = str(run_dir)
        self._run = module.init(**options)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        if values:
            self._run.log(dict(values), step=step)

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    """Append training and evaluation metrics to ``run_dir/metrics.jsonl`` and TensorBoard.

    Each :meth:`log` call writes one JSON object on its own line, ``{"step": step, "stage":
    stage, **metrics}``, and flushes it. Non-finite floats (NaN, +inf, -inf) are written as
    JSON ``null`` so the file stays valid JSON (Python's ``json`` would otherwise emit the
    non-standard ``NaN``/``Infinity``); they are not sent to TensorBoard. Units are the caller's:
    name time metrics with their unit (``step_time_s``) and keep rates in [0, 1].

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     with MetricsLogger(run_dir, tensorboard=False) as logger:
        ...         logger.log(0, {"reward_mean": 0.5, "kl": float("nan")})
        ...     read_metrics(Path(run_dir) / METRICS_FILENAME)
        [{'step': 0, 'stage': 'train', 'reward_mean': 0.5, 'kl': None}]

    Args:
        run_dir: the run's folder; created if missing.
        tensorboard: also write TensorBoard scalars to ``run_dir/tensorboard``.
        resume: append to an existing ``metrics.jsonl`` instead of refusing to touch it.
        report_to: also send every finite value to these trackers (:data:`REPORT_TO`), each a
            new run of that tracker (a resumed training run starts a new one: trackers cannot
            take back the steps :meth:`truncate_after` drops).
        config: the run's arguments (a dataclass or mapping), recorded by the trackers.

    Raises:
        FileExistsError: if ``metrics.jsonl`` exists, is not empty and ``resume`` is False.
        OutputWriteError: the file or the TensorBoard folder cannot be written (a full disk);
            also from :meth:`log` (the row is cut off, the rows before it are whole).
        ImportError: if ``tensorboard`` is True and torch or tensorboard is not installed, or a
            tracker in ``report_to`` is not installed.
        ValueError: for a name in ``report_to`` outside :data:`REPORT_TO`.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensorboard: bool = True,
        resume: bool = False,
        report_to: Sequence[str] = (),
        config: Any = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILENAME
        unknown = [name for name in report_to if name not in REPORT_TO]
        if unknown or isinstance(report_to, str):
            raise ValueError(
                f"Expected report_to to be a list of {', '.join(REPORT_TO)}, got {report_to!r}"
            )
        if not resume and self.path.exists() and self.path.stat().st_size > 0:
            raise FileExistsError(
                f"Expected no metrics yet in {self.path}, got a non-empty file; pass resume=True "
                f"to append to it or choose another run_dir"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tensorboard = tensorboard or "tensorboard" in report_to
        self._writer = _open_summary_writer(self.tensorboard_dir) if tensorboard else None
        values = asdict(config) if is_dataclass(config) else config
        self._trackers: list[_Tracker] = []
        try:
            for name in dict.fromkeys(n for n in report_to if n in ("wandb", "trackio")):
                self._trackers.append(_Tracker(name, self.run_dir, values))
        except BaseException:
            self.close()
            raise
        self._file = self._open_rows()

    def _open_rows(self) -> JsonlWriter:
        """``metrics.jsonl``, opened to append whole rows (a hard link first gets its own file)."""
        try:
            return JsonlWriter.append(self.path)
        except BaseException:
            self.close()
            raise

    @property
    def tensorboard_dir(self) -> Path:
        """Folder of the TensorBoard event files (``run_dir/tensorboard``)."""
        return self.run_dir / TENSORBOARD_DIRNAME

    def log(self, step: int, metrics: Mapping[str, Any], *, stage: str = "train") -> None:
        """Write one row of metrics for ``step`` and flush it.

        Args:
            step: training step (optimizer updates so far), an int >= 0.
            metrics: metric name -> int, float, bool, NumPy scalar or 0-d torch tensor.
                NaN and ±inf are stored as ``null``.
            stage: which phase the numbers come from, e.g. ``"train"`` or ``"eval"``.

        Raises:
            TypeError: naming the key, for a value that is not a real scalar (e.g. a str);
                also for a non-int ``step``. Nothing is written in that case.
            ValueError: for ``step < 0``, or a metric named ``"step"`` or ``"stage"``.
            RuntimeError: if the logger is closed.
        """
        self._check_open()
        step = _check_step(step)
        row = _build_row(step, stage, metrics)
        line = json.dumps({key: _json_value(value) for key, value in row.items()}, allow_nan=False)
        self._file.write(line)  # unbuffered; a row the disk has no room for is cut off
        if self._writer is not None:
            self._write_scalars(step, stage, row)
        for tracker in self._trackers:
            tracker.log(step, _tags(stage, row))

    def _write_scalars(self, step: int, stage: str, row: Mapping[str, Any]) -> None:
        """Send the finite metric values of ``row`` to TensorBoard as ``"{stage}/{key}"``.

        Raises:
            OutputWriteError: the event file cannot be written (a full disk).
        """
        failure: OSError | None = None
        try:  # the writer's thread raises its write errors here
            for tag, value in _tags(stage, row).items():
                self._writer.add_scalar(tag, value, step)
            self._writer.flush()
        except OSError as exc:
            failure = exc
        if failure is not None:
            raise _write_failure(failure, self.tensorboard_dir)

    def truncate_after(self, step: int) -> None:
        """Keep only the rows with ``row["step"] <= step``; use when resuming an older checkpoint.

        The JSON Lines file is rewritten atomically (:func:`~textgym.results.write_atomic`). If
        TensorBoard is on, its writer is reopened with ``purge_step=step + 1`` so TensorBoard
        hides the events logged after ``step`` by earlier runs.

        Raises:
            TypeError: if ``step`` is not an int.
            ValueError: if ``step < 0`` or a line of the file is not a JSON object.
            RuntimeError: if the logger is closed.
            OutputWriteError: the file cannot be rewritten (a full disk): it is as it was.
        """
        self._check_open()
        step = _check_step(step)
        self._file.close()
        kept = [row for row in read_metrics(self.path) if row.get("step", -1) <= step]
        text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in kept)
        try:
            write_atomic(self.path, text, keeps=f"{self.path.name} is as it was")
        finally:
            self._file = self._open_rows()
        if self._writer is not None:
            self._writer.close()
            self._writer = _open_summary_writer(self.tensorboard_dir, purge_step=step + 1)

    def close(self) -> None:
        """Flush and close the JSON Lines file, the TensorBoard writer and the trackers' runs;
        safe to call twice."""
        if getattr(self, "_file", None) is not None and not self._file.closed:
            self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        trackers, self._trackers = self._trackers, []
        for tracker in trackers:
            tracker.close()

    def _check_open(self) -> None:
        """Raise ``RuntimeError`` if :meth:`close` has been called."""
        if self._file.closed:
            raise RuntimeError(
                f"Expected an open MetricsLogger for {self.path}, got a closed one; create a new "
                f"MetricsLogger(..., resume=True) to log more"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rank_logger(out: Path, config: Any, ctx: Any, *, resume: bool) -> Any:
    """Rank 0's :class:`MetricsLogger` for a trainer's ``config`` (its ``tensorboard`` and
    ``report_to``); a :class:`~textgym.algos.distributed.NullLogger` on the other ranks."""
    from textgym.algos.distributed import NullLogger

    if not ctx.is_main:
        return NullLogger()
    return MetricsLogger(
        out,
        tensorboard=config.tensorboard,
        resume=resume,
        report_to=config.report_to,
        config=config,
    )


def write_run_record(out_dir: str | os.PathLike[str], config: Any) -> Path:
    """Write ``run.json`` into a run directory: how to reproduce the run.

    Holds the command line (``sys.argv``), the config (a dataclass, as plain data), the seed, the
    textgym version and git commit of the source tree when it is a checkout, the machine
    (platform, Python, CPU count, CUDA device name if any) and the start time (UTC, ISO 8601).

    Returns:
        The path written.

    Raises:
        OutputWriteError: it cannot be written (a full disk); no run.json is left.
    """
    import dataclasses
    import platform
    import subprocess
    import sys
    from datetime import datetime, timezone

    import textgym

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=Path(textgym.__file__).resolve().parent,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    device = None
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except ImportError:
        pass
    values = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    record = {
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "config": values,
        "seed": values.get("seed"),
        "textgym_version": textgym.__version__,
        "commit": commit,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "device": device,
        },
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = Path(out_dir) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # In one step: a full disk leaves no run.json (never an empty one), in one error line.
    write_atomic(path, json.dumps(record, indent=2, default=str) + "\n", keeps="no run started")
    return path
