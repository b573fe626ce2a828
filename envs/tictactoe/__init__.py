"""Tic-tac-toe: pure rules (:mod:`.board`), the minimax opponent (:mod:`.opponent`), the expert policy
:class:`MinimaxPolicy` (:mod:`.expert`), completion parsers (:mod:`.parsing`), the Gymnasium env :class:`TicTacToeEnv` and its two-seat PettingZoo
twin ``tictactoe_text_v0`` (:mod:`.pettingzoo_env`; imported on first use, needs PettingZoo)."""

from typing import Any

from textgym.envs.tictactoe.env import OUTCOME_REWARD, TicTacToeEnv
from textgym.envs.tictactoe.expert import MinimaxPolicy
from textgym.envs.tictactoe.text import render_board

# ``tictactoe_text_v0`` and ``TicTacToeTextAEC`` are resolved lazily by ``__getattr__`` below and
# left out of ``__all__`` so that a star import works without PettingZoo.
__all__ = ["OUTCOME_REWARD", "MinimaxPolicy", "TicTacToeEnv", "render_board"]


def __getattr__(name: str) -> Any:
    # PettingZoo stays optional: the AEC env is imported only when asked for.
    if name == "tictactoe_text_v0":
        import importlib

        return importlib.import_module("textgym.envs.tictactoe.tictactoe_text_v0")
    if name == "TicTacToeTextAEC":
        from textgym.envs.tictactoe.pettingzoo_env import TicTacToeTextAEC

        return TicTacToeTextAEC
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
