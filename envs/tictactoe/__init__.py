"""Tic-tac-toe: pure rules (:mod:`.board`), the minimax opponent (:mod:`.opponent`), completion
parsers (:mod:`.parsing`) and the Gymnasium env :class:`TicTacToeEnv`."""

from textgym.envs.tictactoe.env import OUTCOME_REWARD, TicTacToeEnv, render_board

__all__ = ["OUTCOME_REWARD", "TicTacToeEnv", "render_board"]
