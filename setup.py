"""Package discovery for the one installed package, ``textgym``.

Its modules live in four folders, mapped into its namespace by ``[tool.setuptools.package-dir]``
in ``pyproject.toml``: ``textgym/``, ``envs/`` (``textgym.envs``), ``wrappers/`` and ``algos/``.
Every folder below them with an ``__init__.py`` is a subpackage, so an env added as a folder
under ``envs/`` is installed without a list to update (pyproject's ``find`` cannot map several
folders into one namespace). Metadata and the rest of the build configuration are in
``pyproject.toml``.
"""

from setuptools import find_packages, setup

#: Package name -> the folder that holds it (pyproject.toml's [tool.setuptools.package-dir]).
ROOTS = {"textgym": "textgym", "textgym.envs": "envs", "textgym.wrappers": "wrappers",
         "textgym.algos": "algos"}  # fmt: skip


def discovered_packages(root: str = ".") -> list[str]:
    """Every package of :data:`ROOTS` under ``root``: each root and its subfolders with an
    ``__init__.py``."""
    return [
        package
        for name, folder in ROOTS.items()
        for package in (name, *(f"{name}.{sub}" for sub in find_packages(f"{root}/{folder}")))
    ]


if __name__ == "__main__":
    setup(packages=discovered_packages())
