"""The rows of a run's ``metrics.jsonl``: the file's name, the keys every row carries, reading
the rows back, and picking rows by stage and metric names by a test.

Shared by the writer (:mod:`textgym.algos.metrics`), the plots (:mod:`textgym.algos.metric_plots`)
and the summaries (:mod:`textgym.algos.metric_summaries`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from textgym.data import read_jsonl

__all__ = [
    "HELDOUT_LOSS",
    "METRICS_FILENAME",
    "RESERVED_KEYS",
    "metric_names",
    "read_metrics",
    "stage_rows",
]

#: Name of the JSON Lines file inside a run directory.
METRICS_FILENAME = "metrics.jsonl"

#: Keys every row carries; metric names may not reuse them.
RESERVED_KEYS = ("step", "stage")

#: The held-out loss of ``textgym sft --eval-data`` (``stage="eval"`` rows; nats per token).
HELDOUT_LOSS = "heldout/loss"


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the rows of a ``metrics.jsonl`` file, in file order; ``null`` values come back as None.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: naming the line, for a line that is not a JSON object (e.g. a line cut off
            by a crash mid-write).
    """
    return read_jsonl(path)


def stage_rows(rows: list[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """Return the rows logged with ``stage``."""
    return [row for row in rows if row.get("stage") == stage]


def metric_names(rows: Iterable[dict[str, Any]], keep: Callable[[str], bool]) -> list[str]:
    """Return the metric names in ``rows`` that ``keep`` accepts, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update((key, None) for key in row if key not in RESERVED_KEYS and keep(key))
    return list(seen)
