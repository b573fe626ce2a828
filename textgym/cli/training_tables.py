"""The closing summaries of ``textgym train`` and ``textgym sft``, in the style of ``eval``'s
table: one ``rich`` table of the run (the numbers its progress lines showed), and for ``train``
the last evaluation as a table of its settings, with ``eval``'s row names.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from textgym.checks import is_finite_number
from textgym.evaluation import OUTCOMES

__all__ = ["eval_table_rows", "number_cell", "print_sft_summary", "print_train_summary"]


def _table(title: str, columns: list[str]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for column in columns:
        table.add_column(column, justify="right")
    return table


def _print(*tables: Any) -> None:
    from rich.console import Console

    console = Console()
    for table in tables:
        console.print(table)


def number_cell(value: Any, digits: int = 4) -> str:
    """A number for a table, ``digits`` after the point (``-`` for a missing, non-finite or
    boolean one)."""
    return f"{value:.{digits}f}" if is_finite_number(value) else "-"


def eval_table_rows(metrics: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """A trainer's evaluation (``"<setting>/<metric>"`` -> value, as
    :func:`textgym.algos.grpo_rollouts.evaluate` returns) as ``eval``'s table rows, one column per
    setting.

    Returns:
        ``(settings, rows)``: each row is ``(name, one cell per setting)``; the names are those
        of ``eval``'s table (mean return, win, draw, loss, invalid actions).

    Example:
        >>> eval_table_rows({"random/return_mean": 0.75, "random/win_rate": 0.5,
        ...                  "random/invalid_rate": 0.0})
        (['random'], [('mean return', ['0.7500']), ('win', ['50.0%']), ('invalid actions', ['0.0%'])])
    """
    # A setting is all before the last "/": a mixture member's are "NAME/SETTING".
    settings = list(dict.fromkeys(key.rsplit("/", 1)[0] for key in metrics if "/" in key))

    def cell(setting: str, metric: str, percent: bool) -> str:
        value = metrics.get(f"{setting}/{metric}")
        if percent and isinstance(value, (int, float)) and math.isfinite(value):
            return f"{value:.1%}"
        return number_cell(value)

    names = [("mean return", "return_mean", False)]
    names += [(o, f"{o}_rate", True) for o in OUTCOMES]
    names += [("invalid actions", "invalid_rate", True)]
    rows = [
        (label, [cell(s, key, percent) for s in settings])
        for label, key, percent in names
        if any(f"{s}/{key}" in metrics for s in settings)
    ]
    return settings, rows


def print_train_summary(config: Any, result: dict[str, Any], elapsed: float) -> None:
    """The run's table (steps, updates skipped and why, the last step's reward and loss as its
    progress line showed them, time, output) and its last evaluation as ``eval``'s table.

    Args:
        config: The run's :class:`~textgym.algos.grpo_config.GRPOConfig`.
        result: What :func:`textgym.algos.grpo.train` returned (the last evaluation).
        elapsed: Seconds the run took in this process.
    """
    from textgym.algos.metric_rows import METRICS_FILENAME, read_metrics
    from textgym.algos.metric_summaries import training_summary

    out = Path(config.output_dir)
    rows = read_metrics(out / METRICS_FILENAME) if (out / METRICS_FILENAME).is_file() else []
    done = training_summary(rows)
    run = _table(f"{config.env_id} · GRPO · model={config.model}", ["value"])
    run.add_row("steps", f"{done['steps']} of {config.steps}")
    run.add_row(
        "updates skipped (all groups had equal rewards)",
        f"{done['skipped_updates']} of {done['steps']}",
    )
    if done["nonfinite_skipped"]:
        run.add_row("updates skipped (non-finite loss or gradient)", str(done["nonfinite_skipped"]))
    run.add_row("reward (last step)", number_cell(done["last_reward"]))
    run.add_row("loss (last step)", number_cell(done["last_loss"]))
    run.add_row("elapsed", f"{elapsed:.1f} s")
    run.add_row("output", str(out))
    tables = [run]
    metrics = result or done["eval"]
    if metrics:
        step = done["eval_step"] if done["eval_step"] is not None else done["steps"]
        title = f"evaluation after step {step} ({config.eval_episodes} episodes each)"
        tables.append(_evaluation_table(title, metrics))
    _print(*tables)


def print_sft_summary(config: Any, result: dict[str, Any], elapsed: float) -> None:
    """The run's table: conversations, steps, the final loss labelled with the steps it
    averages (the progress line of the last step names the same mean), time, output; with
    ``--eval-env``, the evaluation after the last step as ``eval``'s table.

    Args:
        config: The run's :class:`~textgym.algos.sft_config.SFTConfig`.
        result: What :func:`textgym.algos.sft.train` returned (its summary).
        elapsed: Seconds the run took in this process.
    """
    run = _table(f"SFT · model={config.model} · data={config.data}", ["value"])
    if "conversations" in result:
        run.add_row("conversations", str(result["conversations"]))
        run.add_row("dropped (longer than --max-length)", str(result.get("dropped_too_long", 0)))
    run.add_row("steps", str(result.get("steps", "-")))
    span = result.get("final_loss_steps")
    label = (
        f"loss (mean of steps {span[0]}-{span[1]}, nats per token)"
        if span and span[0] != span[1]
        else f"loss (step {span[1]}, nats per token)"
        if span
        else "loss (nats per token)"
    )
    run.add_row(label, number_cell(result.get("final_loss")))
    run.add_row("elapsed", f"{elapsed:.1f} s")
    run.add_row("output", str(config.output_dir))
    tables = [run]
    if result.get("eval"):
        title = (
            f"evaluation in {config.eval_env} after step {result.get('steps', '-')} "
            f"({config.eval_episodes} episodes each, greedy)"
        )
        tables.append(_evaluation_table(title, result["eval"]))
    _print(*tables)


def _evaluation_table(title: str, metrics: dict[str, Any]) -> Any:
    """``eval``'s table of a trainer's evaluation metrics: a column per setting."""
    settings, rows = eval_table_rows(metrics)
    table = _table(title, settings)
    for name, cells in rows:
        table.add_row(name, *cells)
    return table
