"""``benchmarks/chat_tokenize.py``: this tree's ChatTokenizer timed beside an earlier commit's,
their outputs compared."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_chat_tokenize", BENCH / "chat_tokenize.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_both_versions_are_timed_and_give_the_same_tokens(tmp_path):
    out = tmp_path / "ct.json"
    argv = ["--before", "HEAD", "--model", "tiny", "--episodes", "3", "--rounds", "2"]
    _benchmark().main([*argv, "--rollout-episodes", "2", "--output", str(out)])
    record = json.loads(out.read_text())
    assert record["identical"] is True
    assert [len(m["seconds"]) for m in record["modes"].values()] == [2, 2]
    assert record["conversations"] == 3 and record["machine"]
    rollouts = record["rollouts"]
    assert rollouts["identical_token_ids"] is True
    assert [len(m["seconds"]) for m in rollouts["modes"].values()] == [2, 2]


def test_a_bad_revision_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        _benchmark().main(["--before", "no-such-revision", "--model", "tiny"])
    assert exited.value.code == 2
    assert "no-such-revision" in capsys.readouterr().err.strip()
