"""``TextEnv``: the base class every textgym task shares, and the env contract tools read.

It holds what is the same in every text task, so each task module keeps only its own rules:
the render modes (``"ansi"`` returns the last observation, ``"human"`` prints it), the check that
an action is a ``str`` (any ``str`` is then a legal argument to ``step``), and the last
observation.

It also declares, with defaults, every capability that the command line, the rollout engine,
the trainers and the wrappers read from an env (``env.unwrapped``): where a completion may stop
(:attr:`TextEnv.stop_strings`), how a person's bare input becomes an action
(:attr:`~TextEnv.action_template`), whether an action is well formed
(:attr:`~TextEnv.is_well_formed`), the format weight the env already pays
(:attr:`~TextEnv.format_weight`), its dataset task ids (:attr:`~TextEnv.task_ids`), whether
its infos carry gold completions (:attr:`~TextEnv.has_gold_completion`), whether it has a
seeded opponent of settable strength (:attr:`~TextEnv.has_opponent`) and the named evaluation
settings it offers (:attr:`~TextEnv.evaluation_settings`). A task overrides what applies to it;
the defaults describe a task with none of these, so a tool reads each one as a plain attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import gymnasium as gym

__all__ = ["TextEnv"]


class TextEnv(gym.Env[str, str]):
    """Base class of textgym tasks: a ``gymnasium.Env[str, str]`` with text rendering.

    Subclasses call :meth:`_init_render` from ``__init__`` and :meth:`_emit` with each
    observation they return, and override the contract attributes below that apply to them
    (class attributes, or instance attributes and properties where they depend on arguments).
    ``textgym/TicTacToe-v0`` sets all but the task and gold ones; ``textgym/GSM8K-v0`` sets
    ``is_well_formed``, ``format_weight``, ``task_ids`` and ``has_gold_completion``.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = gym.make("textgym/TicTacToe-v0").unwrapped
        >>> env.stop_strings, env.action_template.format(4), env.has_opponent
        (('</move>',), '<move>4</move>', True)
        >>> dict(env.evaluation_settings)
        {'random': {'random_move_prob': 1.0}, 'optimal': {'random_move_prob': 0.0}}
        >>> env.task_ids is None and env.format_weight is None
        True
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    render_mode: str | None = None
    _last_obs: str = ""

    # -- the env contract ------------------------------------------------------------------
    #: Strings after which nothing of a completion is read, so generation may stop at the first
    #: one (kept in the completion). ``()``: the whole completion may matter; generate to the
    #: token limit. TicTacToe-v0: ``("</move>",)``.
    stop_strings: tuple[str, ...] = ()

    #: How ``textgym play`` turns a person's bare integer input into an action: a
    #: :meth:`str.format` template with one ``{}`` (TicTacToe-v0: ``"<move>{}</move>"``, so
    #: typing ``4`` plays cell 4). ``None``: input is sent as typed.
    action_template: str | None = None

    #: The task's format check, ``action -> bool`` (True when the completion follows the answer
    #: format, e.g. ``<think>...</think><move>N</move>``), which
    #: :class:`textgym.wrappers.FormatReward` pays for. ``None``: the task has no answer format
    #: beyond what ``step`` itself grades.
    is_well_formed: Callable[[str], bool] | None = None

    #: Weight of the ``format`` reward component the env already pays itself (GSM8K-v0 and
    #: ReverseText-v0, argument ``format_weight``), or ``None`` if it pays none; a
    #: ``FormatReward`` of the same name would pay the format twice and refuses such an env.
    format_weight: float | None = None

    #: The ids of a dataset task's items in index order: ``reset(options={"task_index": i})``
    #: plays ``task_ids[i]`` and ``options={"task_id": task_ids[i]}`` the same item, so an
    #: evaluation can walk every task once. ``None``: the env has no task list (it generates
    #: its episodes, as TicTacToe-v0 and EmailToolUse-v1 do).
    task_ids: tuple[str, ...] | None = None

    #: True when every ``reset`` info carries ``info["gold_completion"]``, a reference
    #: completion that solves the episode (what :class:`textgym.policies.GoldPolicy` plays);
    #: multi-turn envs give it after each step too, while the episode runs.
    has_gold_completion: ClassVar[bool] = False

    #: True for an env with a seeded opponent whose strength ``reset(options=
    #: {"random_move_prob": p})`` sets per episode (``p`` in [0, 1], the probability of a
    #: uniformly random move instead of a chosen one) and which reports the value used as
    #: ``info["random_move_prob"]``; :class:`textgym.wrappers.StratifiedOpponent` draws ``p``
    #: per episode for such an env.
    has_opponent: ClassVar[bool] = False

    #: Named evaluation settings: setting name -> ``reset`` options that select it, e.g.
    #: TicTacToe-v0's ``{"random": {"random_move_prob": 1.0}, "optimal": {"random_move_prob":
    #: 0.0}}``. An evaluation reports its metrics per setting (``"random/win_rate"``). Empty:
    #: one evaluation with the env's own settings.
    evaluation_settings: ClassVar[Mapping[str, Mapping[str, Any]]] = MappingProxyType({})

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
