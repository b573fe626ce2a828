"""The examples in every module's docstrings run, as `pytest --doctest-modules` would run them.

pytest's own doctest collection imports a module by its file path, and this project maps the
folders ``envs/``, ``wrappers/`` and ``algos/`` to ``textgym.envs``, ``textgym.wrappers`` and
``textgym.algos``: collected by path, each module would be imported a second time under another
name and register its envs twice. So the modules are found by walking the installed package and
their examples are run with the standard library's ``doctest``.
"""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import textgym

# Modules whose imports need an extra that this installation may lack.
OPTIONAL = {
    "textgym.policies.openai_compat": "openai",
    "textgym.policies.openai_http": "openai",
    "textgym.policies.openai_messages": "openai",
    "textgym.envs.tictactoe.pettingzoo_env": "pettingzoo",
}


# An editable install maps these folders into the package, so walking ``textgym.__path__`` alone
# does not reach them.
MAPPED = ("textgym.envs", "textgym.wrappers", "textgym.algos")


def _module_names() -> list[str]:
    names = set(MAPPED)
    for package in (textgym, *map(importlib.import_module, MAPPED)):
        prefix = package.__name__ + "."
        names.update(info.name for info in pkgutil.walk_packages(package.__path__, prefix=prefix))
    return sorted(names)


def _modules_with_examples() -> list[str]:
    names = []
    for name in _module_names():
        if name in OPTIONAL and importlib.util.find_spec(OPTIONAL[name]) is None:
            continue  # the extra is not installed; that module's own tests skip with the reason
        module = importlib.import_module(name)
        if any(test.examples for test in doctest.DocTestFinder().find(module)):
            names.append(name)
    return names


MODULES = _modules_with_examples()


def test_the_walk_finds_the_modules_with_examples():
    # Guards against a walk that silently finds nothing (and so tests nothing).
    assert {"textgym.wrappers.format_reward", "textgym.spaces", "textgym.algos.metrics"} <= set(
        MODULES
    )


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
