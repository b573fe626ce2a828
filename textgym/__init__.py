"""textgym: Gymnasium text environments for reinforcement learning with verifiable rewards.

Importing the package registers its environments with Gymnasium::

    import gymnasium as gym
    import textgym  # noqa: F401  (registers textgym/* ids)

    env = gym.make("textgym/TicTacToe-v0", random_move_prob=0.2)
"""

from textgym.registration import ENV_DESCRIPTIONS, register_envs
from textgym.spaces import UnicodeText

__version__ = "0.1.0"
__all__ = ["ENV_DESCRIPTIONS", "UnicodeText", "__version__", "register_envs"]

register_envs()
