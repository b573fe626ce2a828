"""What a training run says in words and tables: its progress lines, its closing summary, and
several runs compared side by side.

:func:`progress_line` and :func:`skipped_update_note` are the trainers' line per step,
:func:`training_summary` the closing summary of a GRPO run from its ``metrics.jsonl`` rows, and
:func:`compare_rows` / :func:`compare_runs` the last values of several runs (with overlaid plots,
:func:`textgym.algos.metric_plots.plot_runs`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from textgym.algos.metric_plots import plot_runs
from textgym.algos.metric_rows import (
    METRICS_FILENAME,
    RESERVED_KEYS,
    metric_names,
    read_metrics,
    stage_rows,
)

__all__ = [
    "compare_rows",
    "compare_runs",
    "progress_line",
    "skipped_update_note",
    "training_summary",
]


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
        metrics: The step's metrics (:func:`textgym.algos.grpo_update.update`): ``skipped_update``
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
    train = sorted(stage_rows(list(rows), "train"), key=lambda row: row["step"])
    evals = sorted(stage_rows(list(rows), "eval"), key=lambda row: row["step"])
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
        "eval": {k: v for k, v in evals[-1].items() if k not in RESERVED_KEYS} if evals else {},
    }


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
            for row in stage_rows(list(rows), stage):
                for key in metric_names([row], lambda _key: True):
                    value = row[key]
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        if stage == "eval" and key.startswith("eval/"):
                            key = key[len("eval/") :]
                        metric = f"{stage}/{key}"
                        table.setdefault(metric, {"metric": metric})[name] = value
    return list(table.values())


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
