"""The GPU suite's whole path with the tiny model on the CPU (``--smoke``): every part runs and
writes its record, so that on a GPU only CUDA itself runs for the first time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.llm, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.subprocess
def test_gpu_suite_smoke_runs_every_part_and_resumes(tmp_path):
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "gpu_suite.py"),
        "--smoke",
        "--results",
        str(tmp_path),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    records = {
        p.stem: json.loads(p.read_text())
        for p in tmp_path.glob("*.json")
        if p.stem.startswith(("tests", "decode", "grpo-vs-trl", "update-packing", "pipeline-"))
    }
    expected = {
        "tests",
        "decode",
        "grpo-vs-trl",
        "update-packing",
        "pipeline-sft",
        "pipeline-grpo",
        "pipeline-eval-grpo-sampled-optimal",
        "pipeline-league",
        "pipeline-eval-x-random",
    }
    assert set(records) == expected
    assert all(r["returncode"] == 0 and r["device"] for r in records.values())
    work = tmp_path / "pipeline-work"
    rows = json.loads((work / "results.json").read_text())["rows"]
    assert {"eval-grpo-greedy-optimal", "eval-o-fork", "eval-x-random"} <= {
        r["stage"] for r in rows
    }
    # The recipe's SFT data: expert games thinned to a cover of their prompts.
    sft = json.loads((work / "sft" / "sft_summary.json").read_text())
    assert 0 < sft["conversations"] < sft["conversations_read"]
    decode = json.loads((tmp_path / "llm_decode.json").read_text())
    assert set(decode["best_of_repeats"]) >= {"before", "now"}
    packing = json.loads((tmp_path / "update_packing.json").read_text())
    assert "packed_256" in json.dumps(packing)
    # A second run finds every part done and runs nothing.
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and "==" not in again.stdout
