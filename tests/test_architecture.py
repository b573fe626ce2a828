"""The architecture is checked, not hoped for (``docs/architecture.md``).

* The import layers: ``tools/lint_imports.py`` runs import-linter's contracts from
  ``pyproject.toml`` on the package as installed, as CI does, so ``python -m pytest`` catches an
  upward import too.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_layers_hold():
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip('import-linter is not installed (pip install -e ".[dev]")')
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "lint_imports.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # All four contracts ran over the whole package, envs/ wrappers/ algos/ included.
    assert "4 kept, 0 broken" in result.stdout, result.stdout
    py_files = sum(
        len(list((ROOT / folder).rglob("*.py")))
        for folder in ("textgym", "envs", "wrappers", "algos")
    )
    assert f"Analyzed {py_files} files" in result.stdout, result.stdout
