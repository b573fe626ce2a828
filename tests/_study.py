"""What the tests of the study scripts (``benchmarks/task_pipeline.py``, ``tictactoe_eval.py``,
``tictactoe_recipe.py``) share: a user's bytes to protect, and the one-line error check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["USER", "exit_code", "one_error_line"]

#: What a user's own file holds, to check it is left byte-identical.
USER = b"the user's own bytes\n"


def one_error_line(capsys: Any) -> str:
    """The one ``error:`` line the script wrote to stderr (asserted: one line, no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err
    return err[0]


def exit_code(run_main: Callable[..., int], main: Callable[..., int], argv: list[str]) -> int:
    """``run_main(main, argv)``'s exit code, argparse's own refusals (``SystemExit``) included."""
    try:
        return run_main(main, argv)
    except SystemExit as exc:
        return int(exc.code)
