"""Check the import layers of ``docs/architecture.md``: import-linter's contracts on the package as
installed.

The contracts are in ``pyproject.toml`` (``[tool.importlinter]``). ``lint-imports`` alone cannot
check them on the source tree: ``envs/``, ``wrappers/`` and ``algos/`` are mapped into the
``textgym`` namespace by ``[tool.setuptools.package-dir]``, and import-linter's graph (grimp)
reads a package from its one directory, so it would not see ``textgym.envs`` at all and every
contract on it would pass without looking. This script lays the package out as it is installed,
as symbolic links in a temporary directory (``textgym/`` with ``envs``, ``wrappers`` and ``algos``
inside), puts that directory first on ``PYTHONPATH`` and runs ``lint-imports`` there. Nothing is
imported or executed; the code is only parsed.

Usage::

    python tools/lint_imports.py          # exit status 0: every contract kept

Exit status: ``lint-imports``'s (1 for a broken contract, with the import chain that breaks it),
or 2 when import-linter is not installed (``pip install -e ".[dev]"``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["ROOT", "lint_imports", "stage_package"]

ROOT = Path(__file__).resolve().parent.parent


def stage_package(target: Path, root: Path = ROOT) -> Path:
    """Lay ``textgym`` out under ``target`` as installed: links to its files and mapped folders.

    Args:
        target: An empty directory; ``target / "textgym"`` is created.
        root: The repository (holds ``pyproject.toml``).

    Returns:
        ``target / "textgym"``.

    Raises:
        ValueError: a ``package-dir`` entry maps something other than a direct subpackage of
            ``textgym``.
    """
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    package = target / "textgym"
    package.mkdir()
    for entry in (root / mapping["textgym"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name == "textgym":
            continue
        parent, _, child = name.rpartition(".")
        if parent != "textgym" or not child:
            raise ValueError(f"expected package-dir names textgym.<name>, got {name!r}")
        (package / child).symlink_to(root / folder)
    return package


def lint_imports(root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` with ``root``'s ``pyproject.toml`` on the staged package.

    Returns:
        The finished process; ``returncode`` 0 when every contract is kept, its output in
        ``stdout``.

    Raises:
        FileNotFoundError: ``lint-imports`` is not installed beside this Python.
    """
    executable = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if executable is None:
        raise FileNotFoundError(
            f"lint-imports is not installed beside {sys.executable}; "
            'install the dev extra: pip install -e ".[dev]"'
        )
    with tempfile.TemporaryDirectory(prefix="textgym-imports-") as tmp:
        stage_package(Path(tmp), root)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")]))
        cmd = [executable, "--no-cache", "--no-logo", str(root / "pyproject.toml")]
        return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=False)


if __name__ == "__main__":
    try:
        result = lint_imports()
    except FileNotFoundError as exc:
        print(f"lint_imports: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.returncode)
