"""``benchmarks/_outputs.py`` (what ``env_server.py`` uses): results kept read-only without
``--update-results``, and errors printed as one line with their exit code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _outputs import RESULTS_DIR, check_results_write, run_main  # noqa: E402

from textgym.errors import SetupError  # noqa: E402


def test_results_are_written_only_when_asked(tmp_path):
    inside = RESULTS_DIR / "some_benchmark.json"
    with pytest.raises(SetupError, match="--update-results"):
        check_results_write(inside, "--output", update_results=False)
    check_results_write(inside, "--output", update_results=True)
    check_results_write(tmp_path / "out.json", "--output", update_results=False)


def test_run_main_prints_a_typed_error_as_one_line(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench.py"])

    def main(argv):
        raise SetupError("bad\n  input")

    assert run_main(main, []) == 2
    assert capsys.readouterr().err == "bench.py: error: bad input\n"
