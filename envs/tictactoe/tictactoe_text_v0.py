"""PettingZoo-style entry module: ``from textgym.envs.tictactoe import tictactoe_text_v0``.

``tictactoe_text_v0.env()`` builds the two-seat text tic-tac-toe AEC env
(:class:`~textgym.envs.tictactoe.pettingzoo_env.TicTacToeTextAEC`) behind PettingZoo's
``OrderEnforcingWrapper``. Needs ``pip install "textgym[multiagent]"``.
"""

from textgym.envs.tictactoe.pettingzoo_env import TicTacToeTextAEC, env

__all__ = ["TicTacToeTextAEC", "env"]
