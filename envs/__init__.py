"""Task environments, one sub-package per task (import path ``textgym.envs``)."""

from textgym.envs.email_tool_use import EmailToolUseEnv
from textgym.envs.gsm8k import GSM8KEnv
from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.tictactoe import TicTacToeEnv
from textgym.envs.workplace import WorkplaceEnv

__all__ = ["EmailToolUseEnv", "GSM8KEnv", "ReverseTextEnv", "TicTacToeEnv", "WorkplaceEnv"]
