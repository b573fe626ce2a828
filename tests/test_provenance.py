"""The benchmarks' provenance: one meaning for a result JSON's ``"dirty"`` flag."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def provenance(monkeypatch, tmp_path):
    """``benchmarks/_provenance.py`` pointed at a fresh repository with one commit."""
    spec = importlib.util.spec_from_file_location("bench_provenance", BENCH / "_provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    for env_name, value in env.items():
        monkeypatch.setenv(env_name, value)
    (tmp_path / "code.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "code.py"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    monkeypatch.setattr(module, "REPO_ROOT", tmp_path)
    return module


def test_untracked_files_leave_a_checkout_clean(provenance, tmp_path):
    assert provenance.git_dirty() is False
    (tmp_path / "run_folder").mkdir()
    (tmp_path / "run_folder" / "metrics.json").write_text("{}")
    assert provenance.git_dirty() is False


def test_an_edited_tracked_file_makes_it_dirty(provenance, tmp_path):
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance.git_dirty() is True


def test_without_a_repository_the_flag_is_unknown(provenance, monkeypatch, tmp_path):
    outside = tmp_path / "not_a_repo"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(provenance, "REPO_ROOT", outside)
    assert provenance.git_dirty() is None
