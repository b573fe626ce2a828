"""Fixtures of the tic-tac-toe tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def eval_script():
    """``benchmarks/tictactoe_eval.py`` as a module (a script beside the benchmarks, not a
    package), loaded once per test module."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # its sibling _provenance
    spec = importlib.util.spec_from_file_location(
        "bench_tictactoe_eval", BENCH / "tictactoe_eval.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
