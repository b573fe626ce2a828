"""What the benchmark scripts share about their outputs: ``benchmarks/results/`` read-only
unless ``--update-results`` asks for it, and errors (:class:`~textgym.errors.SetupError`)
printed as one line by :func:`run_main`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from _provenance import REPO_ROOT

from textgym.errors import SetupError, TextgymError

__all__ = ["RESULTS_DIR", "check_results_write", "run_main"]

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def check_results_write(path: Path, flag: str, *, update_results: bool) -> None:
    """Refuse a write under ``benchmarks/results/`` unless ``--update-results`` was given.

    Raises:
        SetupError: ``path`` lies under it and ``update_results`` is false.
    """
    if update_results:
        return
    real = path.resolve()
    if real == RESULTS_DIR or RESULTS_DIR in real.parents:
        raise SetupError(
            f"{flag} {path} is under {RESULTS_DIR}, which keeps committed results and is "
            f"read-only unless asked; pass --update-results to replace them, or choose "
            f"another {flag}"
        )


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """``main(argv)``, with a :class:`TextgymError` printed as one ``SCRIPT: error:`` line and
    its exit code returned (2 for bad input)."""
    try:
        return main(argv)
    except TextgymError as exc:
        name = Path(sys.argv[0]).name
        print(f"{name}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
