"""textgym: Gymnasium text environments for reinforcement learning with verifiable rewards.

Importing the package registers its environments with Gymnasium::

    import gymnasium as gym
    import textgym  # noqa: F401  (registers textgym/* ids)

    env = gym.make("textgym/TicTacToe-v0", random_move_prob=0.2)

The front doors: :class:`TextEnv` (the base class and the env contract tools read),
:class:`SingleTurnEnv` (the base of single-turn dataset tasks), :class:`EnvRecipe` and
:func:`env_factory` (the one way to build an env with its wrappers), :class:`UnicodeText` (the
text space), and the wrappers in :mod:`textgym.wrappers`.
"""

from typing import Any

from textgym.core import TextEnv
from textgym.registration import ENV_DESCRIPTIONS, register_envs
from textgym.spaces import UnicodeText

__version__ = "0.1.0"
__all__ = [
    "ENV_DESCRIPTIONS",
    "EnvRecipe",
    "SingleTurnEnv",
    "TextEnv",
    "UnicodeText",
    "__version__",
    "env_factory",
    "register_envs",
]

register_envs()

#: Imported on first use, so that ``import textgym`` does not import every env.
_LAZY = {
    "EnvRecipe": "textgym.builder",
    "env_factory": "textgym.builder",
    "SingleTurnEnv": "textgym.envs.single_turn",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
