"""Task environments, one sub-package per task (import path ``textgym.envs``)."""

from textgym.envs.gsm8k import GSM8KEnv
from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.tictactoe import TicTacToeEnv

__all__ = ["GSM8KEnv", "ReverseTextEnv", "TicTacToeEnv"]
