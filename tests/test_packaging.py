"""The installed package is discovered, not listed (``setup.py``): an env added as a folder
under ``envs/`` is installed with its data files without touching another file."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

pytest.importorskip("setuptools")  # setup.py's find_packages (not in every Python 3.12 venv)

REPO = Path(__file__).resolve().parents[1]
SETUP = runpy.run_path(str(REPO / "setup.py"), run_name="not_main")  # defines, does not build


def test_every_source_folder_is_a_discovered_package():
    packages = set(SETUP["discovered_packages"](str(REPO)))
    for name, folder in SETUP["ROOTS"].items():
        for init in (REPO / folder).rglob("*.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            if "__pycache__" not in parts:
                assert ".".join((name, *parts)) in packages, init


def test_pyproject_lists_no_packages_or_per_env_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "packages" not in config
    assert set(config["package-data"]) == {"*"}


def test_a_new_env_folder_is_discovered_with_its_data(tmp_path):
    for folder in SETUP["ROOTS"].values():
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    (tmp_path / "envs" / "new_task").mkdir()
    (tmp_path / "envs" / "new_task" / "__init__.py").write_text("")
    assert "textgym.envs.new_task" in SETUP["discovered_packages"](str(tmp_path))
