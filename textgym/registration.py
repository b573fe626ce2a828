"""The one explicit list of textgym's registered environments.

Ids follow Gymnasium's ``namespace/Name-vN`` form; bump ``-vN`` on any change of behaviour.
Keyword arguments given to :func:`gymnasium.make` pass through to the env's constructor.
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_DESCRIPTIONS", "register_envs"]

#: One-line description per registered id (shown by ``textgym list``).
ENV_DESCRIPTIONS: dict[str, str] = {
    "textgym/TicTacToe-v0": "play X or O against a seeded minimax opponent of controllable skill "
    "(win 1, draw 0.5, loss 0)",
}


def register_envs() -> None:
    """Register every textgym env with Gymnasium (idempotent)."""
    if "textgym/TicTacToe-v0" not in gym.registry:
        gym.register(
            id="textgym/TicTacToe-v0",
            entry_point="textgym.envs.tictactoe.env:TicTacToeEnv",
            max_episode_steps=10,
            kwargs={"opponent": "minimax", "random_move_prob": 0.0, "agent_mark": "X"},
        )
