"""PNG plots of training metrics: the standard panels of one run, and several runs overlaid.

:func:`plot_metrics` draws a run's ``metrics.jsonl`` (reward, invalid-action rate, loss, KL,
entropy, clip fraction, step time, evaluation results); :func:`plot_runs` overlays several runs'
curves on the same panels plus the evaluation return. Rendering is headless (matplotlib's
``Figure`` with the Agg canvas), and matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textgym.algos.metric_rows import HELDOUT_LOSS, metric_names, read_metrics, stage_rows
from textgym.errors import MissingExtraError
from textgym.results import write_atomic

__all__ = ["plot_metrics", "plot_runs"]

#: Resolution of the PNG panels, in dots per inch.
_PLOT_DPI = 120

#: Outcome rates drawn per opponent on the eval panel, with their line labels.
_OUTCOMES = (("win_rate", "win"), ("draw_rate", "draw"), ("loss_rate", "loss"))

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


def _train_keys(*keys: str) -> Callable[[list[dict[str, Any]]], list[_Series]]:
    """Return a series builder for the given train-stage keys."""
    return lambda rows: [_series(stage_rows(rows, "train"), key) for key in keys]


def _reward_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """Train ``reward_mean`` and every reward component ``reward/<name>``."""
    train = stage_rows(rows, "train")
    keys = metric_names(train, lambda key: key == "reward_mean" or key.startswith("reward/"))
    return [_series(train, key) for key in keys]


def _invalid_rate_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """Train ``invalid_rate`` and each eval ``<opponent>/invalid_rate``."""
    evals = stage_rows(rows, "eval")
    eval_keys = metric_names(evals, lambda key: key.endswith("/invalid_rate"))
    return [_series(stage_rows(rows, "train"), "invalid_rate", label="train invalid_rate")] + [
        _series(evals, key, label=f"eval {key}") for key in eval_keys
    ]


def _loss_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """Train ``loss`` and, for SFT with held-out data, the eval ``heldout/loss``."""
    return [
        _series(stage_rows(rows, "train"), "loss"),
        _series(stage_rows(rows, "eval"), HELDOUT_LOSS, label="held-out loss"),
    ]


_PANELS = (
    _Panel("reward.png", "Reward (train)", "reward (env units)", _reward_series),
    _Panel("invalid_rate.png", "Invalid-action rate", "rate (0-1)", _invalid_rate_series),
    _Panel("loss.png", "Training loss", "loss (per token, nats for SFT)", _loss_series),
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
        MissingExtraError: if matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError(
            f"Expected matplotlib to be installed for plot_metrics, got ImportError ({exc}); "
            f'fix: pip install "textgym[train]"'
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
    """Write ``figure`` to ``path`` as PNG in one step (:func:`~textgym.results.write_atomic`:
    a plot being replaced is whole, old or new) and return the path."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_PLOT_DPI)
    write_atomic(path, buffer.getvalue())
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
    evals = stage_rows(rows, "eval")
    suffixes = tuple(f"/{outcome}" for outcome, _ in _OUTCOMES)
    opponents = dict.fromkeys(
        key.rsplit("/", 1)[0] for key in metric_names(evals, lambda key: key.endswith(suffixes))
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
        MissingExtraError: if matplotlib is not installed.
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


def _eval_return_series(rows: list[dict[str, Any]]) -> list[_Series]:
    """The mean evaluation return of each setting over the steps (``<setting>/return_mean``)."""
    evals = stage_rows(rows, "eval")
    return [
        _series(evals, key) for key in metric_names(evals, lambda k: k.endswith("/return_mean"))
    ]


#: The panels :func:`plot_runs` overlays: the training panels and the evaluation return.
_COMPARE_PANELS = (
    *_PANELS,
    _Panel("eval_return.png", "Evaluation return", "mean return (env units)", _eval_return_series),
)


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
