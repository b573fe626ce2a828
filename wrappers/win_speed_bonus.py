"""``WinSpeedBonus``: a reward component that values winning sooner (board games)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym

from textgym.errors import SetupError
from textgym.wrappers._components import add_component, require_info_keys

__all__ = ["WinSpeedBonus"]


class WinSpeedBonus(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Add ``per_empty_cell`` x (empty cells left on the board) to the reward of a won game.

    The outcome reward (win 1, draw 1/2, loss 0) pays a win the same whether it came at the
    first chance or after the policy let a weak opponent off the hook several times, and a
    draw half as much: against a random opponent a cautious policy that draws is not told that
    it left wins on the board. The minimax opponent's own scoring breaks ties the same way (a
    win scores ``1 + empty cells left``, :mod:`textgym.envs.tictactoe.opponent`), and the
    "Let LLMs Wander" tic-tac-toe course reports that training against only strong opponents
    made its model overly defensive. The bonus is paid once, on the winning step, as the
    component ``name``; losses and draws get nothing, so a fast-win bonus never rewards a
    gamble that loses.

    In tic-tac-toe a win leaves at most 4 empty cells (X wins on its third move), so the
    default ``per_empty_cell=0.05`` adds at most 0.2 to a win's outcome reward of 1.

    Args:
        env: An env whose info reports ``"outcome"`` (``"win"`` for the agent's win) and
            ``"board"`` (a string with ``empty`` for each free cell) on every step, as
            ``textgym/TicTacToe-v0`` does, and declares them in its ``info_keys``
            (:attr:`required_info_keys`).
        per_empty_cell: Bonus per empty cell left after the win, finite and >= 0.
        empty: The board string's character for a free cell. Default ``"."``.
        name: Component name. Default ``"win_speed"``.

    Raises:
        SetupError: for a negative or non-finite ``per_empty_cell``, an ``empty`` that is not
            one character, or an env whose ``info_keys`` lack ``"outcome"`` or ``"board"``
            (every textgym env but TicTacToe-v0).

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = WinSpeedBonus(gym.make("textgym/TicTacToe-v0", opponent="random"))
        >>> _ = env.reset(seed=1)
        >>> for cell in (4, 0, 8):   # X wins on the diagonal at its third move
        ...     obs, reward, terminated, truncated, info = env.step(f"<move>{cell}</move>")
        >>> info["board"], reward, info["reward_components"]
        ('X...X.OOX', 1.2, {'outcome': 1.0, 'win_speed': 0.2})
        >>> WinSpeedBonus(gym.make("textgym/GSM8K-v0"))
        Traceback (most recent call last):
        ...
        textgym.errors.SetupError: WinSpeedBonus needs an env that reports info['outcome'] and info['board'] ...
    """

    #: The step info keys this wrapper reads, which the env must declare in its ``info_keys``.
    required_info_keys: ClassVar[tuple[str, ...]] = ("outcome", "board")

    def __init__(
        self,
        env: gym.Env[str, str],
        per_empty_cell: float = 0.05,
        empty: str = ".",
        name: str = "win_speed",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, per_empty_cell=per_empty_cell, empty=empty, name=name
        )
        gym.Wrapper.__init__(self, env)
        require_info_keys(type(self).__name__, env, self.required_info_keys, "textgym/TicTacToe-v0")
        if not math.isfinite(per_empty_cell) or per_empty_cell < 0:
            raise SetupError(f"Expected a finite per_empty_cell >= 0, got {per_empty_cell}")
        if not (isinstance(empty, str) and len(empty) == 1):
            raise SetupError(f"Expected empty to be one character, got {empty!r}")
        self.per_empty_cell = float(per_empty_cell)
        self.empty = empty
        self.name = name

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        bonus = 0.0
        if info["outcome"] == "win":
            bonus = self.per_empty_cell * info["board"].count(self.empty)
        info: dict[str, Any] = add_component(info, reward, self.name, bonus)
        return obs, float(reward) + bonus, terminated, truncated, info
