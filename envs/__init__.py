"""Task environments, one sub-package per task (import path ``textgym.envs``)."""

from textgym.envs.tictactoe import TicTacToeEnv

__all__ = ["TicTacToeEnv"]
