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
        "pipeline-baseline",
        "pipeline-sft",
        "pipeline-eval-sft",
        "pipeline-grpo",
        "pipeline-eval-grpo",
        "pipeline-mastery",
        "pipeline-eval-mastery",
        "pipeline-report",
    }
    assert set(records) == expected
    assert all(r["returncode"] == 0 and r["device"] for r in records.values())
    pipeline = json.loads((tmp_path / "tictactoe_pipeline.json").read_text())
    assert {row["stage"] for row in pipeline["table"]} == {
        "baseline",
        "eval-sft",
        "eval-grpo",
        "eval-mastery",
    }
    # The mastery recipe's SFT data: expert games thinned to a cover of their prompts.
    sft = pipeline["stages"]["sft"]
    assert 0 < sft["games_kept"] <= sft["games_collected"] == pipeline["settings"]["games"]
    assert pipeline["settings"]["sft_expert"] == "safe_best" and pipeline["settings"]["sft_cover"]
    decode = json.loads((tmp_path / "llm_decode.json").read_text())
    assert set(decode["best_of_repeats"]) >= {"before", "now"}
    packing = json.loads((tmp_path / "update_packing.json").read_text())
    assert "packed_256" in json.dumps(packing)
    # A second run finds every part done and runs nothing.
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and "==" not in again.stdout
