"""The error hierarchy (textgym.errors) and how the command line reports it."""

from __future__ import annotations

import importlib
import pathlib

import pytest

from textgym import cli
from textgym.errors import (
    EndpointError,
    MissingExtraError,
    NonFiniteError,
    OutputWriteError,
    SetupError,
    TextgymError,
)


@pytest.mark.parametrize(
    ("error", "builtin", "code"),
    [
        (SetupError("x"), ValueError, 2),
        (MissingExtraError("x"), ImportError, 2),
        (NonFiniteError("x"), ValueError, 1),
        (OutputWriteError(28, "No space left on device", "out.jsonl"), OSError, 1),
    ],
)
def test_each_error_is_also_the_builtin_its_callers_caught(error, builtin, code):
    assert isinstance(error, TextgymError) and isinstance(error, builtin)
    assert error.exit_code == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SetupError("the data file\nis bad"), 2),
        (NonFiniteError("episode 3 returned nan"), 1),
        (EndpointError("http://127.0.0.1:9/v1 failed after 3 attempts"), 1),
    ],
)
def test_main_reports_a_textgym_error_in_one_line(monkeypatch, capsys, error, code):
    module = importlib.import_module("textgym.cli.listing")

    def run(config):
        raise error

    monkeypatch.setattr(module, "run", run)
    if code == 2:
        with pytest.raises(SystemExit) as stop:
            cli.main(["list"])
        assert stop.value.code == 2
    else:
        assert cli.main(["list"]) == code
    err = capsys.readouterr().err
    assert err == f"textgym: error: {' '.join(str(error).split())}\n"


def test_an_error_outside_the_hierarchy_keeps_its_traceback(monkeypatch):
    module = importlib.import_module("textgym.cli.listing")

    def run(config):
        raise ValueError("a bug")

    monkeypatch.setattr(module, "run", run)
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["list"])


def test_the_command_line_sorts_no_error_by_its_traceback():
    cli_dir = pathlib.Path(cli.__file__).parent
    for path in sorted(cli_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for needle in ("__traceback__", "tb_frame", "f_code", 'sys.modules.get("textgym.algos'):
            assert needle not in text, f"{path.name} inspects tracebacks ({needle})"
