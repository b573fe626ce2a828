"""``StructuredTicTacToe``: the text tic-tac-toe env seen as a classic RL env (board in, cell out).

For array-based RL libraries (stable-baselines3, sb3-contrib's MaskablePPO): the observation is
the board as 9 integers from the agent's perspective and the action is a ``Discrete(9)`` cell.
Each action is sent to the wrapped ``TicTacToe-v0`` env as the completion ``<move>N</move>``,
so the dynamics, the opponent, the rewards and the invalid-action handling are exactly those of
the text env; the board is read from the env's public ``info["board"]`` and
``info["legal_moves"]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["EMPTY_CELL", "OPPONENT_CELL", "OWN_CELL", "StructuredTicTacToe", "encode_board"]

#: Cell codes of the observation.
EMPTY_CELL, OWN_CELL, OPPONENT_CELL = 0, 1, 2


def encode_board(board: str, mark: str) -> np.ndarray:
    """Encode a board from the point of view of the player of ``mark``.

    Args:
        board: 9 characters ``X``/``O``/``.``, row-major (see ``textgym.envs.tictactoe.board``).
        mark: ``"X"`` or ``"O"``, the agent's mark.

    Returns:
        ``[9]`` int64 array: 0 empty, 1 the agent's mark, 2 the opponent's, row-major.
    """
    return np.array(
        [EMPTY_CELL if c == "." else OWN_CELL if c == mark else OPPONENT_CELL for c in board],
        dtype=np.int64,
    )


class StructuredTicTacToe(gym.Wrapper[np.ndarray, int, str, str], gym.utils.RecordConstructorArgs):
    """Board observation and ``Discrete(9)`` actions over a text ``TicTacToe-v0`` env.

    Observation: ``MultiDiscrete([3] * 9)``, row-major cells coded by :func:`encode_board`
    (stable-baselines3 one-hot encodes it). Action: ``Discrete(9)``, the cell to play, sent as
    ``<move>N</move>``. An occupied cell is an invalid action of the text env: reward 0, board
    unchanged, ``info["invalid_action"] = True``; masking (``action_masks()`` or
    ``info["action_mask"]``) avoids it. Rewards, termination and truncation are the wrapped
    env's. ``info`` is the wrapped env's info plus ``action_mask`` (``[9]`` bool, the free cells).

    Args:
        env: A ``textgym/TicTacToe-v0`` env (made with ``gymnasium.make`` or not), or any env
            whose info carries ``board``, ``legal_moves`` and ``agent_mark``.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = StructuredTicTacToe(gym.make("textgym/TicTacToe-v0", opponent="random"))
        >>> obs, info = env.reset(seed=0)
        >>> obs.tolist(), int(env.action_masks().sum())
        ([0, 0, 0, 0, 0, 0, 0, 0, 0], 9)
        >>> obs, reward, terminated, truncated, info = env.step(4)
        >>> int(obs[4]), int((obs == 2).sum()), info["agent_move"]
        (1, 1, 4)
    """

    def __init__(self, env: gym.Env[str, str]):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.observation_space = spaces.MultiDiscrete(np.full(9, 3, dtype=np.int64))
        self.action_space = spaces.Discrete(9)
        self._mask = np.zeros(9, dtype=bool)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        return self._observe(info)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"Expected an action in Discrete(9) (a cell 0-8), got {action!r}")
        _, reward, terminated, truncated, info = self.env.step(f"<move>{int(action)}</move>")
        obs, info = self._observe(info)
        return obs, float(reward), bool(terminated), bool(truncated), info

    def action_masks(self) -> np.ndarray:
        """``[9]`` bool: True for the free cells (legal actions) of the current board."""
        return self._mask.copy()

    def _observe(self, info: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        for key in ("board", "legal_moves", "agent_mark"):
            if key not in info:
                raise KeyError(
                    f"StructuredTicTacToe needs info[{key!r}] from a TicTacToe env; got info keys "
                    f"{sorted(info)}"
                )
        mask = np.zeros(9, dtype=bool)
        mask[list(info["legal_moves"])] = True
        self._mask = mask
        info = {**info, "action_mask": mask.copy()}
        return encode_board(info["board"], info["agent_mark"]), info
