"""``TextEnv``: the small base class every textgym task shares.

It holds what is the same in every text task, so each task module keeps only its own rules:
the render modes (``"ansi"`` returns the last observation, ``"human"`` prints it), the check that
an action is a ``str`` (any ``str`` is then a legal argument to ``step``), and the last
observation.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["TextEnv"]


class TextEnv(gym.Env[str, str]):
    """Base class of textgym tasks: a ``gymnasium.Env[str, str]`` with text rendering.

    Subclasses call :meth:`_init_render` from ``__init__`` and :meth:`_emit` with each
    observation they return.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    render_mode: str | None = None
    _last_obs: str = ""

    def _init_render(self, render_mode: str | None) -> None:
        """Validate and store ``render_mode``.

        Raises:
            ValueError: if it is not ``None``, ``"ansi"`` or ``"human"``.
        """
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"Expected render_mode in {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self._last_obs = ""

    def _emit(self, obs: str) -> str:
        """Remember ``obs`` for :meth:`render`, print it in ``"human"`` mode, return it."""
        self._last_obs = obs
        if self.render_mode == "human":
            print(obs)
        return obs

    @staticmethod
    def _check_action(action: Any) -> None:
        """Raise ``TypeError`` unless ``action`` is a ``str`` (the completion text)."""
        if not isinstance(action, str):
            raise TypeError(
                f"Expected the action to be a str (the completion), got {type(action).__name__}"
            )

    def render(self) -> str | None:
        """``"ansi"``: the last observation; ``"human"``: print it; ``None``: nothing."""
        if self.render_mode == "ansi":
            return self._last_obs
        if self.render_mode == "human":
            print(self._last_obs)
        return None
