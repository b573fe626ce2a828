"""Training metrics: one JSON Lines file per run, optional TensorBoard scalars, and PNG plots.

:class:`MetricsLogger` appends one row per call to ``run_dir/metrics.jsonl`` (``{"step": ...,
"stage": ..., **metrics}``, flushed at once so a crash loses nothing) and, when asked, mirrors
every finite value to TensorBoard under ``run_dir/tensorboard`` as the tag ``"{stage}/{key}"``,
and to the experiment trackers named in ``report_to`` (:data:`REPORT_TO`: Weights & Biases,
Trackio), each through its own library, under the same names.
:func:`read_metrics` reads the rows back and :func:`plot_metrics` draws the standard panels
(reward, invalid-action rate, KL, entropy, clip fraction, step time, evaluation results) headless.

TensorBoard (``torch.utils.tensorboard``, which needs the ``tensorboard`` package),
``wandb``, ``trackio`` and ``matplotlib`` are imported only when used, so importing this module
needs none of them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from textgym.data import read_jsonl

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "METRICS_FILENAME",
    "REPORT_TO",
    "TENSORBOARD_DIRNAME",
    "MetricsLogger",
    "compare_rows",
    "compare_runs",
    "plot_metrics",
    "plot_runs",
    "progress_line",
    "read_metrics",
    "skipped_update_note",
    "training_summary",
    "write_run_record",
]

#: Name of the JSON Lines file inside a run directory.
METRICS_FILENAME = "metrics.jsonl"

#: Name of the TensorBoard log folder inside a run directory.
TENSORBOARD_DIRNAME = "tensorboard"

#: What ``report_to`` may name, as TRL's ``report_to``: ``tensorboard`` (the same as
#: ``tensorboard=True``), ``wandb`` (Weights & Biases; ``WANDB_MODE=offline`` logs without an
#: account, ``wandb sync`` uploads later), ``trackio`` (local-first; ``trackio show`` opens its
#: dashboard), ``none`` (nothing beyond ``metrics.jsonl``).
REPORT_TO = ("tensorboard", "wandb", "trackio", "none")

#: Keys every row carries; metric names may not reuse them.
_RESERVED_KEYS = ("step", "stage")

#: Resolution of the PNG panels, in dots per inch.
_PLOT_DPI = 120

#: Outcome rates drawn per opponent on the eval panel, with their line labels.
_OUTCOMES = (("win_rate", "win"), ("draw_rate", "draw"), ("loss_rate", "loss"))


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
        if key not in _RESERVED_KEYS and _json_value(value) is not None
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
        if key in _RESERVED_KEYS:
            raise ValueError(
                f"Expected metric names other than {_RESERVED_KEYS}, got {key!r}; pass the step "
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
    """
    try:
        import tensorboard  # noqa: F401  (torch's message for a missing package is vaguer)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(
            f"Expected torch and tensorboard to be installed for tensorboard=True, got "
            f"ImportError ({exc}); fix: pip install tensorboard (and torch), or pass "
            f"tensorboard=False to log JSON Lines only"
        ) from exc
    return SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)


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
            raise ImportError(
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
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed by close())

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
        self._file.write(line + "\n")
        self._file.flush()
        if self._writer is not None:
            self._write_scalars(step, stage, row)
        for tracker in self._trackers:
            tracker.log(step, _tags(stage, row))

    def _write_scalars(self, step: int, stage: str, row: Mapping[str, Any]) -> None:
        """Send the finite metric values of ``row`` to TensorBoard as ``"{stage}/{key}"``."""
        for tag, value in _tags(stage, row).items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def truncate_after(self, step: int) -> None:
        """Keep only the rows with ``row["step"] <= step``; use when resuming an older checkpoint.

        The JSON Lines file is rewritten atomically (temporary file, then ``os.replace``). If
        TensorBoard is on, its writer is reopened with ``purge_step=step + 1`` so TensorBoard
        hides the events logged after ``step`` by earlier runs.

        Raises:
            TypeError: if ``step`` is not an int.
            ValueError: if ``step < 0`` or a line of the file is not a JSON object.
            RuntimeError: if the logger is closed.
        """
        self._check_open()
        step = _check_step(step)
        self._file.close()
        kept = [row for row in read_metrics(self.path) if row.get("step", -1) <= step]
        tmp_path = self.path.with_name(self.path.name + ".tmp")
        with open(tmp_path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row, allow_nan=False) + "\n" for row in kept)
        os.replace(tmp_path, self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed by close())
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def progress_line(
    step: int,
    steps: int,
    *,
    loss: float,
    seconds: float,
    tokens: float,
    reward: float | None = None,
    note: str | None = None,
) -> str:
    """The one-line progress report of a training step, as the trainers print it.

    Args:
        step: Steps done (1-based).
        steps: Steps the run will take.
        loss: The step's loss (NaN when no update ran: printed as ``-``).
        seconds: Wall time of the step.
        tokens: Tokens the step processed (sampled by the policy for GRPO, trained on for SFT).
        reward: Mean episode return of the step's rollouts (GRPO), or ``None``.
        note: Said last, e.g. why no update ran (:func:`skipped_update_note`).

    Example:
        >>> progress_line(3, 100, loss=0.01234, seconds=2.0, tokens=800, reward=0.5)
        'step 3/100  loss 0.01234  reward 0.5  2.00 s  400 tokens/s'
        >>> progress_line(1, 2, loss=float("nan"), seconds=0.5, tokens=10, note="no update")
        'step 1/2  loss -  0.50 s  20 tokens/s  no update'
    """
    parts = [f"step {step}/{steps}", f"loss {loss:.4g}" if math.isfinite(loss) else "loss -"]
    if reward is not None:
        parts.append(f"reward {reward:.4g}")
    parts.append(f"{seconds:.2f} s")
    parts.append(f"{tokens / seconds:.0f} tokens/s" if seconds > 0 else "- tokens/s")
    if note:
        parts.append(note)
    return "  ".join(parts)


def skipped_update_note(metrics: Mapping[str, Any], groups: int) -> str | None:
    """Why a GRPO step ran no optimizer step, in words, or ``None`` when it ran one.

    Args:
        metrics: The step's metrics (:func:`textgym.algos.grpo.update`): ``skipped_update``
            is 1.0 when every group had equal rewards (all advantages are zero, so the
            gradient is zero); ``nonfinite_skipped`` is 1.0 when the loss or the gradient norm
            was NaN or infinite.
        groups: Groups (tasks) in the step.

    Example:
        >>> skipped_update_note({"skipped_update": 1.0}, 8)
        'update skipped: all 8 groups had equal rewards'
        >>> skipped_update_note({"skipped_update": 0.0, "nonfinite_skipped": 0.0}, 8) is None
        True
    """
    if metrics.get("skipped_update") == 1.0:
        each = "both groups" if groups == 2 else f"all {groups} groups"
        return f"update skipped: {each if groups > 1 else 'the group'} had equal rewards"
    if metrics.get("nonfinite_skipped") == 1.0:
        return "update skipped: the loss or the gradient norm was not finite"
    return None


def training_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the closing summary of a GRPO run says, from its ``metrics.jsonl`` rows: the same
    numbers its progress lines showed.

    Args:
        rows: The run's rows (:func:`read_metrics`), stage ``train`` and ``eval``.

    Returns:
        ``steps`` (the last step trained), ``skipped_updates`` (steps whose groups all had
        equal rewards, ``skipped_update`` 1.0), ``nonfinite_skipped`` (steps whose loss or
        gradient norm was not finite), ``last_reward`` and ``last_loss`` (the last step's
        ``reward_mean`` and ``loss``, NaN when not logged or null), ``eval_step`` (the step of
        the last evaluation, ``None`` for none) and ``eval`` (that evaluation's metrics,
        ``"<setting>/<metric>"`` -> value).

    Example:
        >>> rows = [{"step": 1, "stage": "train", "skipped_update": 1.0, "loss": None,
        ...          "reward_mean": 0.0}, {"step": 1, "stage": "eval", "eval/return_mean": 0.5}]
        >>> summary = training_summary(rows)
        >>> summary["steps"], summary["skipped_updates"], summary["eval"]
        (1, 1, {'eval/return_mean': 0.5})
    """
    train = sorted(_stage(list(rows), "train"), key=lambda row: row["step"])
    evals = sorted(_stage(list(rows), "eval"), key=lambda row: row["step"])
    last = train[-1] if train else {}

    def number(value: Any) -> float:
        return float(value) if isinstance(value, (int, float)) else math.nan

    return {
        "steps": int(last.get("step", 0)),
        "skipped_updates": sum(row.get("skipped_update") == 1.0 for row in train),
        "nonfinite_skipped": sum(row.get("nonfinite_skipped") == 1.0 for row in train),
        "last_reward": number(last.get("reward_mean")),
        "last_loss": number(last.get("loss")),
        "eval_step": evals[-1]["step"] if evals else None,
        "eval": {k: v for k, v in evals[-1].items() if k not in _RESERVED_KEYS} if evals else {},
    }


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the rows of a ``metrics.jsonl`` file, in file order; ``null`` values come back as None.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: naming the line, for a line that is not a JSON object (e.g. a line cut off
            by a crash mid-write).
    """
    return read_jsonl(path)


# --- plotting ----------------------------------------------------------------------------------

_Series = tuple[str, list[int], list[float]]  # (legend label, steps, values)


@dataclass(frozen=True)
class _Panel:
    """One PNG: which series it draws and how its axes read."""

    filename: str
    title: str
    ylabel: str
    series: Callable[[list[dict[str, Any]]], list[_Series]]


def _series(rows: Iterable[dict[str, Any]], key: str, label: str | None = None) -> _Series:
    """Return ``(label, steps, values)`` of ``key`` over ``rows``: sorted by step, nulls skipped."""
    points = sorted(
        (row["step"], float(row[key]))
        for row in rows
        if row.get(key) is not None and math.isfinite(float(row[key]))
    )
    return label or key, [step for step, _ in points], [value for _, value in points]


def _stage(rows: list[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """Return the rows logged with ``stage``."""
    return [row for row in rows if row.get("stage") == stage]


def _keys(rows: Iterable[dict[str, Any]], keep: Callable[[str], bool]) -> list[str]:
    """Return the metric names in ``rows`` that ``keep`` accepts, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update((key, None) for key in row if key not in _RESERVED_KEYS and keep(key))
    return list(seen)


def _train_keys(*keys: str) -> Callable[[list[dict[str, Any]]], list[_Series]]:
    """Return a series builder for the given train-stage keys."""
    return lambda rows: [_series(_stage(rows, "train"), key) for key in keys]


def _reward_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """Train ``reward_mean`` and every reward component ``reward/<name>``."""
    train = _stage(rows, "train")
    keys = _keys(train, lambda key: key == "reward_mean" or key.startswith("reward/"))
    return [_series(train, key) for key in keys]


def _invalid_rate_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """Train ``invalid_rate`` and each eval ``<opponent>/invalid_rate``."""
    evals = _stage(rows, "eval")
    eval_keys = _keys(evals, lambda key: key.endswith("/invalid_rate"))
    return [_series(_stage(rows, "train"), "invalid_rate", label="train invalid_rate")] + [
        _series(evals, key, label=f"eval {key}") for key in eval_keys
    ]


_PANELS = (
    _Panel("reward.png", "Reward (train)", "reward (env units)", _reward_series),
    _Panel("invalid_rate.png", "Invalid-action rate", "rate (0-1)", _invalid_rate_series),
    _Panel("loss.png", "Training loss", "loss (per token, nats for SFT)", _train_keys("loss")),
    _Panel("kl.png", "KL divergence to reference (train)", "KL (nats)", _train_keys("kl")),
    _Panel("entropy.png", "Policy entropy (train)", "entropy (nats)", _train_keys("entropy")),
    _Panel(
        "clip_fraction.png",
        "Clipped fraction (train)",
        "fraction (0-1)",
        _train_keys("clip_fraction"),
    ),
    _Panel(
        "step_time.png",
        "Wall time per step (train)",
        "seconds",
        _train_keys("step_time_s", "rollout_time_s", "update_time_s"),
    ),
)


def _new_figure(n_axes: int = 1) -> tuple[Any, list[Any]]:
    """Return a headless matplotlib ``Figure`` (Agg canvas) and its ``n_axes`` stacked axes.

    Uses the object API, not ``pyplot``, so the global backend and figure list stay untouched.

    Raises:
        ImportError: if matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"Expected matplotlib to be installed for plot_metrics, got ImportError ({exc}); "
            f"fix: pip install matplotlib"
        ) from exc
    figure = Figure(figsize=(7.0, 3.5 * n_axes), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(n_axes, 1, squeeze=False)[:, 0]
    return figure, list(axes)


def _draw(ax: Any, series: list[_Series], title: str, ylabel: str) -> None:
    """Draw ``series`` as lines with markers on ``ax``, with labels, grid and legend."""
    for label, steps, values in series:
        ax.plot(steps, values, marker="o", markersize=3, label=label)
    ax.set_title(title)
    ax.set_xlabel("step (optimizer updates)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def _save(figure: Any, path: Path) -> Path:
    """Write ``figure`` to ``path`` as PNG and return the path."""
    figure.savefig(path, dpi=_PLOT_DPI)
    return path


def _plot_panel(rows: list[dict[str, Any]], panel: _Panel, out_dir: Path) -> Path | None:
    """Write one panel if any of its series has a point; return its path, else None."""
    series = [item for item in panel.series(rows) if item[1]]
    if not series:
        return None
    figure, (ax,) = _new_figure()
    _draw(ax, series, panel.title, panel.ylabel)
    return _save(figure, out_dir / panel.filename)


def _eval_series(rows: list[dict[str, Any]]) -> dict[str, list[_Series]]:
    """Map each eval opponent (prefix of ``<opponent>/win_rate`` etc.) to its non-empty series."""
    evals = _stage(rows, "eval")
    suffixes = tuple(f"/{outcome}" for outcome, _ in _OUTCOMES)
    opponents = dict.fromkeys(
        key.rsplit("/", 1)[0] for key in _keys(evals, lambda key: key.endswith(suffixes))
    )
    result: dict[str, list[_Series]] = {}
    for opponent in opponents:
        series = [_series(evals, f"{opponent}/{outcome}", label) for outcome, label in _OUTCOMES]
        if any(item[1] for item in series):
            result[opponent] = [item for item in series if item[1]]
    return result


def _plot_eval(rows: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """Write ``eval.png``: one subplot per opponent with its win/draw/loss rates vs step."""
    per_opponent = _eval_series(rows)
    if not per_opponent:
        return None
    figure, axes = _new_figure(len(per_opponent))
    for ax, (opponent, series) in zip(axes, per_opponent.items()):
        _draw(ax, series, f"Evaluation vs {opponent}", "rate (0-1)")
        ax.set_ylim(-0.02, 1.02)
    return _save(figure, out_dir / "eval.png")


def plot_metrics(
    metrics_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """Draw the standard training panels from a ``metrics.jsonl`` file as PNGs (120 dpi).

    One PNG per panel, written only when the data holds at least one non-null value for it:

    - ``reward.png``: train ``reward_mean`` and every reward component ``reward/<name>``.
    - ``invalid_rate.png``: train ``invalid_rate`` and eval ``<opponent>/invalid_rate``.
    - ``loss.png``, ``kl.png``, ``entropy.png``, ``clip_fraction.png``: the train keys of the
      same names (``loss.png`` is SFT's loss curve).
    - ``step_time.png``: train ``step_time_s``, ``rollout_time_s``, ``update_time_s`` (seconds),
      as separate lines (not stacked: the step time may already include the others).
    - ``eval.png``: eval rows, one subplot per opponent prefix of ``<opponent>/win_rate``,
      ``/draw_rate``, ``/loss_rate``, each rate a line vs step.

    Rendering is headless (matplotlib's ``Figure`` with the Agg canvas; ``pyplot`` and the global
    backend are not touched). Null (non-finite) values are skipped and points are sorted by step.

    Args:
        metrics_path: a file written by :class:`MetricsLogger`.
        out_dir: folder for the PNGs; created if missing. Existing files of the same names are
            overwritten.

    Returns:
        The paths written, in the order listed above.

    Raises:
        FileNotFoundError: if ``metrics_path`` does not exist.
        ValueError: if the file has no rows, or a line is not a JSON object.
        ImportError: if matplotlib is not installed.
    """
    rows = read_metrics(metrics_path)
    if not rows:
        raise ValueError(
            f"Expected at least one metrics row in {metrics_path}, got an empty file; log with "
            f"MetricsLogger.log() before plotting"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [_plot_panel(rows, panel, out) for panel in _PANELS] + [_plot_eval(rows, out)]
    return [path for path in written if path is not None]


def write_run_record(out_dir: str | os.PathLike[str], config: Any) -> Path:
    """Write ``run.json`` into a run directory: how to reproduce the run.

    Holds the command line (``sys.argv``), the config (a dataclass, as plain data), the seed, the
    textgym version and git commit of the source tree when it is a checkout, the machine
    (platform, Python, CPU count, CUDA device name if any) and the start time (UTC, ISO 8601).

    Returns:
        The path written.
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
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def _eval_return_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """The mean evaluation return of each setting over the steps (``<setting>/return_mean``)."""
    evals = _stage(rows, "eval")
    return [_series(evals, key) for key in _keys(evals, lambda k: k.endswith("/return_mean"))]


#: The panels :func:`plot_runs` overlays: the training panels and the evaluation return.
_COMPARE_PANELS = (
    *_PANELS,
    _Panel("eval_return.png", "Evaluation return", "mean return (env units)", _eval_return_series),
)


def compare_rows(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The last value of each metric of each run, one row per metric.

    Args:
        runs: Run name -> its ``metrics.jsonl`` rows (:func:`read_metrics`).

    Returns:
        ``{"metric": name, <run>: last value, ...}`` per metric, in first-seen order: train
        metrics as ``train/<name>``, eval metrics as ``eval/<setting>/<metric>`` (the last step
        that logged each); the setting of an env that names none, ``eval``, is left out
        (``eval/return_mean``), as :mod:`textgym.cli.compare` names an eval run's numbers.
    """
    table: dict[str, dict[str, Any]] = {}
    for name, rows in runs.items():
        for stage in ("train", "eval"):
            for row in _stage(list(rows), stage):
                for key in _keys([row], lambda _key: True):
                    value = row[key]
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        if stage == "eval" and key.startswith("eval/"):
                            key = key[len("eval/") :]
                        metric = f"{stage}/{key}"
                        table.setdefault(metric, {"metric": metric})[name] = value
    return list(table.values())


def plot_runs(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """Overlay the runs' curves: the panels of :func:`plot_metrics` and the evaluation return,
    each series labelled ``<run>: <metric>``; a panel no run has data for is not written.

    Args:
        runs: Run name -> its ``metrics.jsonl`` rows.
        out_dir: Where to write the PNGs (created).

    Returns:
        The PNG paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for panel in _COMPARE_PANELS:
        series = [
            (f"{name}: {label}", steps, values)
            for name, rows in runs.items()
            for label, steps, values in panel.series(list(rows))
            if steps
        ]
        if series:
            figure, (ax,) = _new_figure()
            _draw(ax, series, panel.title, panel.ylabel)
            paths.append(_save(figure, out / panel.filename))
    return paths


def compare_runs(
    run_dirs: Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str] | None = None
) -> tuple[list[dict[str, Any]], list[Path]]:
    """Compare training run directories: their last train and eval metrics side by side
    (:func:`compare_rows`), and overlaid plots (:func:`plot_runs`). ``textgym compare`` also
    takes eval runs (:mod:`textgym.cli.compare`).

    Args:
        run_dirs: Two or more directories holding a ``metrics.jsonl``.
        out_dir: Where to write the overlaid panels; ``None`` writes no plots.

    Returns:
        ``(rows, paths)``: the rows of :func:`compare_rows` and the PNG paths written.

    Raises:
        FileNotFoundError: a directory has no ``metrics.jsonl``.
        ValueError: fewer than two directories, or two with the same name.
    """
    dirs = [Path(d) for d in run_dirs]
    names = [d.name or str(d) for d in dirs]
    if len(dirs) < 2 or len(set(names)) != len(names):
        raise ValueError(f"Expected two or more run directories with distinct names, got {names}")
    runs = {name: read_metrics(d / METRICS_FILENAME) for name, d in zip(names, dirs, strict=True)}
    paths = plot_runs(runs, out_dir) if out_dir is not None else []
    return compare_rows(runs), paths
