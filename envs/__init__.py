"""Task environments, one sub-package per task (import path ``textgym.envs``).

:class:`SingleTurnEnv` (:mod:`textgym.envs.single_turn`) is the base of single-turn dataset
tasks, GSM8K-v0's and ReverseText-v0's and a user's own.
"""

from textgym.envs.email_tool_use import EmailToolUseEnv
from textgym.envs.gsm8k import GSM8KEnv
from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.single_turn import Grade, SingleTurnEnv
from textgym.envs.tictactoe import TicTacToeEnv
from textgym.envs.workplace import WorkplaceEnv

__all__ = [
    "EmailToolUseEnv",
    "GSM8KEnv",
    "Grade",
    "ReverseTextEnv",
    "SingleTurnEnv",
    "TicTacToeEnv",
    "WorkplaceEnv",
]
