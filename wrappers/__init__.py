"""Gymnasium wrappers for text envs (import path ``textgym.wrappers``).

Each reward wrapper adds one named entry to ``info["reward_components"]``; the entries always
sum to the step reward.
"""

from textgym.wrappers.chat import ChatMessages
from textgym.wrappers.format_reward import FormatReward
from textgym.wrappers.invalid_action import InvalidActionPenalty
from textgym.wrappers.opponent_skill import OpponentSkill
from textgym.wrappers.structured import StructuredTicTacToe

__all__ = [
    "REWARD_WRAPPERS",
    "ChatMessages",
    "FormatReward",
    "InvalidActionPenalty",
    "OpponentSkill",
    "StructuredTicTacToe",
]

#: Reward wrappers by the name the CLI and the trainers use (``--wrappers``), default arguments.
REWARD_WRAPPERS = {
    "format_reward": FormatReward,
    "invalid_action_penalty": InvalidActionPenalty,
}
