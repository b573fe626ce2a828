"""The scripts beside the recipes (``recipes/*.py``), loaded as modules for their tests: they
are not package code, so the tests import them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def load(name: str) -> ModuleType:
    """``recipes/<name>.py`` as a module named ``recipe_<name>`` (loaded once per process)."""
    key = f"recipe_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, RECIPES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
