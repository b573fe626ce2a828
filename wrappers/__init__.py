"""Gymnasium wrappers for text envs (import path ``textgym.wrappers``).

Each reward wrapper adds one named entry to ``info["reward_components"]``; the entries always
sum to the step reward. Every wrapper records its constructor arguments
(``gymnasium.utils.RecordConstructorArgs``), so ``gymnasium.make(wrapped_env.spec)`` rebuilds
the whole stack.

:data:`REWARD_WRAPPERS` is the one table of wrapper names that the command line, the trainers
and :mod:`textgym.builder` accept (``--wrappers format_reward invalid_action_penalty give_up_penalty win_speed_bonus``).
"""

from textgym.wrappers.chat import ChatMessages
from textgym.wrappers.format_reward import FormatReward
from textgym.wrappers.give_up import GiveUpPenalty
from textgym.wrappers.invalid_action import InvalidActionPenalty
from textgym.wrappers.stratified_opponent import OpponentSkill, StratifiedOpponent
from textgym.wrappers.structured import StructuredTicTacToe
from textgym.wrappers.win_speed_bonus import WinSpeedBonus

__all__ = [
    "REWARD_WRAPPERS",
    "ChatMessages",
    "FormatReward",
    "GiveUpPenalty",
    "InvalidActionPenalty",
    "OpponentSkill",
    "StratifiedOpponent",
    "StructuredTicTacToe",
    "WinSpeedBonus",
]

#: Reward wrappers by the name the CLI, the trainers and the builder use (``--wrappers``),
#: applied with their default arguments.
REWARD_WRAPPERS = {
    "format_reward": FormatReward,
    "give_up_penalty": GiveUpPenalty,
    "invalid_action_penalty": InvalidActionPenalty,
    "win_speed_bonus": WinSpeedBonus,
}
