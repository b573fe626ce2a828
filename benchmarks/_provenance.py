"""Provenance shared by the benchmark scripts: git commit, package versions, the machine.

Every result JSON records these so that a reader can tell which code ran where.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["REPO_ROOT", "dist_version", "git", "git_dirty", "machine_info", "write_result"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str | None:
    """Output of ``git ARGS`` in the repository, or ``None`` if git is unavailable or fails."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_dirty() -> bool | None:
    """Whether tracked files differ from ``HEAD`` (``None`` without git).

    Untracked files do not count: a run folder, a virtual environment or the GPU kit beside the
    checkout leave the code that ran as committed, and every result JSON's ``"dirty"`` flag must
    mean the same thing.
    """
    status = git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def dist_version(name: str) -> str | None:
    """Installed version of distribution ``name``, or ``None``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Platform, Python, CPU model, core count and the 1-minute load average at the start."""
    cpu = None
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(
            (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None
        )
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu or platform.processor() or None,
        "cores": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def write_result(path: str | Path, record: dict[str, Any]) -> None:
    """Write a benchmark record as indented JSON (creating folders) and say where.

    The file is replaced whole (written beside it, then renamed), so a process killed while
    writing, e.g. by a time cap, leaves the previous record rather than half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, path)
    print(f"wrote {path}")
