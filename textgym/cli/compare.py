"""``textgym compare``: compare training runs by the last value of each metric, and overlay
their curves in PNG plots (:func:`textgym.algos.metrics.compare_runs`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tyro

from textgym.cli._common import UsageError, fail

__all__ = ["CompareConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class CompareConfig:
    """Compare training runs: last metrics and overlaid plots."""

    runs: tyro.conf.Positional[tuple[str, ...]]
    """Two or more run directories (each with a metrics.jsonl), space-separated."""
    plots: str | None = None
    """Directory for the overlaid PNG plots (None: no plots)."""


Config = CompareConfig


def run(config: CompareConfig) -> int:
    """Print a table of the last value of each metric per run; write the plots."""
    try:
        from textgym.algos.metrics import compare_runs

        rows, paths = compare_runs(list(config.runs), config.plots)
    except ImportError as exc:
        fail(f'textgym compare needs the training extras ({exc}); pip install "textgym[train]"')
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(f"compare: {exc}") from None
    from rich.console import Console
    from rich.table import Table

    names = [Path(run).name for run in config.runs]
    table = Table(title="last value of each metric (train: last step; eval: last evaluation)")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(row["metric"], *(f"{row[n]:.4g}" if n in row else "-" for n in names))
    Console(width=200).print(table)
    for path in paths:
        print(f"wrote {path}")
    return 0
