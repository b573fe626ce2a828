"""``benchmarks/gpu_learn.py``: the real-weight learning run of a GPU session. Its wheel check
and install run here on wheels the test builds; the whole run (SFT, GRPO, the per-mark greedy
evaluations) runs on the CPU with the tiny model in the slow test."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _benchmark(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(folder: Path, name: str = "pieces", *, tamper: bool = False, record: bool = True):
    """A minimal wheel of package ``name`` whose RECORD lists its files' sha256."""
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = [f"{path},{_hash(data)},{len(data)}" for path, data in files.items()]
    if tamper:
        files[f"{name}/__init__.py"] = b"VALUE = 666\n"  # RECORD keeps the first hash
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        if record:
            recorded = "\n".join([*lines, f"{name}-1.0.dist-info/RECORD,,"]) + "\n"
            archive.writestr(f"{name}-1.0.dist-info/RECORD", recorded)
    return path


def test_a_wheel_that_matches_its_record_installs_into_the_target(tmp_path):
    learn = _benchmark("gpu_learn")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert learn.wheel_mismatches(_wheel(wheels)) == []
    site = tmp_path / "site"
    assert learn.install_wheels(wheels, site) == ["pieces-1.0-py3-none-any.whl"]
    assert (site / "pieces" / "__init__.py").read_text() == "VALUE = 42\n"


def test_a_tampered_wheel_stops_the_install_before_any_wheel_is_installed(tmp_path):
    learn = _benchmark("gpu_learn")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "aaa")  # sorts first, and is fine
    bad = _wheel(wheels, "zzz", tamper=True)
    assert learn.wheel_mismatches(bad) == ["zzz/__init__.py"]
    with pytest.raises(learn.WheelCheckError, match="zzz-1.0-py3-none-any.whl: 1 file"):
        learn.install_wheels(wheels, tmp_path / "site")
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda folder: _wheel(folder, record=False),
        lambda folder: (folder / "x-1.0-py3-none-any.whl").write_bytes(b"not a zip") and None,
    ],
    ids=["no-record", "not-a-zip"],
)
def test_a_wheel_without_its_hashes_is_refused(tmp_path, make):
    learn = _benchmark("gpu_learn")
    make(tmp_path)
    with pytest.raises(learn.WheelCheckError):
        learn.install_wheels(tmp_path, tmp_path / "site")


def test_an_empty_wheel_folder_is_refused(tmp_path):
    learn = _benchmark("gpu_learn")
    with pytest.raises(learn.WheelCheckError, match="no .whl file"):
        learn.install_wheels(tmp_path, tmp_path / "site")


def test_goals_read_the_greedy_grpo_rows_per_mark():
    learn = _benchmark("gpu_learn")
    rows = {
        "grpo/X/random": {"win": 0.95},
        "grpo/X/optimal": {"draw": 0.96},
        "grpo/O/random": {"win": 0.90},
    }
    assert learn._goals(rows) == {
        "X_wins_vs_random_at_least_90pct": True,
        "X_draws_vs_optimal_at_least_97pct": False,
        "O_wins_vs_random_at_least_90pct": True,
        "O_draws_vs_optimal_at_least_97pct": None,  # not played
    }


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_learning_run_goes_end_to_end_on_the_cpu(tmp_path):
    command = [sys.executable, str(BENCH / "gpu_learn.py"), "--smoke", "--results", str(tmp_path)]
    command += ["--eval-episodes", "2", "--budget", "800"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    record = json.loads((tmp_path / "learn.json").read_text())
    assert record["device"] and record["commit"]
    assert record["steps"]["sft"]["status"] == record["steps"]["grpo"]["status"] == "ok"
    rows = record["evaluations"]
    assert set(rows) == {
        f"{s}/{m}/{o}" for s in ("grpo", "sft") for m in "XO" for o in ("random", "optimal")
    }
    assert all(row["episodes"] == 2 for row in rows.values())
    assert set(record["goals"]) == {
        f"{m}_{goal}"
        for m in "XO"
        for goal in ("wins_vs_random_at_least_90pct", "draws_vs_optimal_at_least_97pct")
    }
