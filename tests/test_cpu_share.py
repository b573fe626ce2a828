"""textgym.cli.cpu_share: fewer torch threads and a short OpenMP spin on a busy machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from textgym.cli import cpu_share

VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")


@pytest.fixture
def fresh(monkeypatch):
    """No wait policy or thread count chosen, and torch not imported yet (as seen by it)."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(
        cpu_share.sys, "modules", {k: v for k, v in sys.modules.items() if k != "torch"}
    )
    monkeypatch.setattr(cpu_share.os, "cpu_count", lambda: 2)


def test_idle_machine_keeps_the_defaults(fresh, monkeypatch):
    monkeypatch.setattr(cpu_share, "busy_cores", lambda: 0.2)
    assert cpu_share.share_the_cpu() == {}
    assert not set(VARIABLES) & set(cpu_share.os.environ)


@pytest.mark.parametrize(("busy", "threads"), [(0.6, "1"), (1.1, "1"), (4.0, "1")])
def test_busy_machine_gets_a_short_spin_and_the_free_cores(fresh, monkeypatch, busy, threads):
    monkeypatch.setattr(cpu_share, "busy_cores", lambda: busy)
    assert cpu_share.share_the_cpu() == {"GOMP_SPINCOUNT": "10000", "OMP_NUM_THREADS": threads}
    assert cpu_share.os.environ["OMP_NUM_THREADS"] == threads


def test_eight_cores_with_one_busy_keep_seven_threads(fresh, monkeypatch):
    monkeypatch.setattr(cpu_share.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(cpu_share, "busy_cores", lambda: 1.0)
    assert cpu_share.share_the_cpu()["OMP_NUM_THREADS"] == "7"


def test_the_users_choices_are_kept(fresh, monkeypatch):
    monkeypatch.setattr(cpu_share, "busy_cores", lambda: 2.0)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cpu_share.share_the_cpu() == {"OMP_NUM_THREADS": "1"}
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu_share.share_the_cpu() == {}
    assert cpu_share.os.environ["OMP_NUM_THREADS"] == "2"


def test_nothing_changes_once_torch_is_imported(monkeypatch):
    import torch  # noqa: F401

    monkeypatch.setattr(cpu_share, "busy_cores", lambda: 2.0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_share.share_the_cpu() == {}


@pytest.mark.subprocess
def test_busy_cores_sees_a_spinning_neighbour():
    """A real measurement: one process spinning keeps at least half a core busy."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert cpu_share.busy_cores(0.5) >= 0.5
    finally:
        spinner.kill()
        spinner.wait()
