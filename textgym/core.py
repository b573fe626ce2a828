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
settings it offers (:attr:`~TextEnv.evaluation_settings`), how ``--policy random`` draws an action
from its grammar (:attr:`~TextEnv.random_action`) and which scripted policy is its expert
(:attr:`~TextEnv.expert_policy`). A task overrides what applies to it; the defaults describe a
task with none of these, so a tool reads each one as a plain attribute.

:class:`TextEnvAdapter` gives a plain ``gymnasium.Env`` whose two spaces are text
(``gymnasium.spaces.Text``) these defaults, so the tools play it too; :func:`as_text_env` applies
it where it is needed and refuses an env whose spaces are not text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

__all__ = ["RandomAction", "TextEnv", "TextEnvAdapter", "as_text_env"]

#: ``(observation, info, rng) -> completion``: a completion drawn with ``rng`` from a task's
#: action grammar, given the episode's latest observation and info (see
#: :attr:`TextEnv.random_action`).
RandomAction = Callable[[str, Mapping[str, Any], np.random.Generator], str]


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
        >>> list(env.evaluation_settings), env.evaluation_settings["optimal"]
        (['random', 'optimal'], {'opponent': 'minimax', 'random_move_prob': 0.0})
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

    #: The keys of the info that ``step`` returns (those its docstring's Information section
    #: marks ``[step]``), which a wrapper that reads an info key checks before it wraps the env
    #: (:class:`textgym.wrappers.WinSpeedBonus` needs ``"outcome"`` and ``"board"``, which only
    #: TicTacToe-v0 reports). Empty: the env declares none, and such a wrapper refuses it.
    info_keys: ClassVar[frozenset[str]] = frozenset()

    #: Named evaluation settings: setting name -> ``reset`` options that select it, e.g.
    #: TicTacToe-v0's ``{"random": {"random_move_prob": 1.0}, "optimal": {"random_move_prob":
    #: 0.0}}``. An evaluation reports its metrics per setting (``"random/win_rate"``). Empty:
    #: one evaluation with the env's own settings.
    evaluation_settings: ClassVar[Mapping[str, Mapping[str, Any]]] = MappingProxyType({})

    #: A cheap random baseline, ``(observation, info, rng) -> completion``
    #: (:data:`RandomAction`): a completion drawn with ``rng`` from the task's action grammar,
    #: what :class:`textgym.policies.RandomPolicy` (``--policy random``) plays to give a floor
    #: (GSM8K-v0: ``#### N`` with a random integer N; ReverseText-v0: the text's characters in
    #: a random order inside the answer tags). ``None``: the random policy plays a random legal
    #: move where ``info["legal_moves"]`` lists them (TicTacToe-v0) and a random tool call with
    #: schema-valid arguments where ``info["tools"]`` lists tools (EmailToolUse-v1,
    #: Workplace-v1), and refuses any other env.
    random_action: RandomAction | None = None

    @property
    def expert_policy(self) -> str | None:
        """The name of the scripted policy that plays this env well, whose episodes make SFT
        data (``textgym collect --policy expert``, or ``--policy NAME``), or ``None``.

        The default is ``"gold"`` (:class:`textgym.policies.GoldPolicy`, a policy of every env
        with gold completions: :attr:`has_gold_completion`), else ``None``. An env with an
        expert of its own names it here and builds it in :meth:`make_expert` (TicTacToe-v0:
        ``"minimax"``; EmailToolUse-v1: ``"lookup_expert"``), so the command line, the card
        and :func:`textgym.builder.make_policy` find it through the env alone.
        """
        return "gold" if self.has_gold_completion else None

    @classmethod
    def make_expert(
        cls, *, seed: Any = None, env_kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Any:
        """This env's own expert (the policy :attr:`expert_policy` names), for the env made
        with ``env_kwargs`` (an expert that regenerates tasks from their ids needs them),
        seeded with ``seed``; ``options`` are the expert's own (tic-tac-toe's minimax: its
        style, tie-break and reasoning).

        Returns:
            A :class:`textgym.policies.Policy` whose ``name`` is :attr:`expert_policy`.

        Raises:
            NotImplementedError: the env has no expert of its own (the default; ``"gold"``
                is built by :func:`textgym.builder.make_policy`).
        """
        raise NotImplementedError(f"{cls.__name__} has no expert policy of its own")

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


def _random_text(
    charset: str, min_length: int, max_length: int, _obs: str, _info: Any, rng: np.random.Generator
) -> str:
    """A random string of the action space's characters (length uniform in its bounds, <= 64)."""
    length = int(rng.integers(min_length, max(min_length, min(max_length, 64)) + 1))
    return "".join(charset[i] for i in rng.integers(len(charset), size=length))


class TextEnvAdapter(TextEnv):
    """A plain ``gymnasium.Env`` whose spaces are text, with :class:`TextEnv`'s default contract.

    The command line, the rollout engine and the trainers read the env contract from
    ``env.unwrapped``; this adapter is that object for an env that does not subclass
    :class:`TextEnv`: no stop strings, no task list, no tools, no gold completions, no
    opponent, and infos passed on unchanged (no ``system_prompt`` key: the chat has no system
    message). :attr:`random_action` draws random text from the action space's characters, so
    ``--policy random`` gives a floor. ``reset`` and ``step`` call the wrapped env (its
    ``TimeLimit`` included) and return its results, the reward as a ``float`` and the flags as
    ``bool``. :func:`as_text_env` applies it; the builder (:mod:`textgym.builder`) calls that.

    Args:
        env: The env as ``gymnasium.make`` returned it; ``observation_space`` and
            ``action_space`` must be ``gymnasium.spaces.Text``.

    Raises:
        ValueError: if either space is not a ``gymnasium.spaces.Text``.

    Example:
        >>> import gymnasium as gym
        >>> class Echo(gym.Env):
        ...     observation_space = action_space = gym.spaces.Text(20)
        ...     def reset(self, *, seed=None, options=None):
        ...         super().reset(seed=seed)
        ...         return "say hi", {}
        ...     def step(self, action):
        ...         return "ok", float(action == "hi"), True, False, {}
        >>> env = TextEnvAdapter(Echo())
        >>> env.stop_strings, env.task_ids, env.expert_policy
        ((), None, None)
        >>> env.reset(seed=0)
        ('say hi', {})
        >>> env.step("hi")
        ('ok', 1.0, True, False, {})
    """

    def __init__(self, env: gym.Env):
        for name in ("observation_space", "action_space"):
            space = getattr(env, name, None)
            if not isinstance(space, gym.spaces.Text):
                raise ValueError(
                    f"Expected {type(env.unwrapped).__name__}.{name} to be a "
                    f"gymnasium.spaces.Text (a text env), got {space!r}"
                )
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.spec = env.spec
        self.render_mode = env.render_mode
        self.metadata = env.metadata
        space = env.action_space
        self.random_action = functools.partial(
            _random_text, space.characters, space.min_length, space.max_length
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The wrapped env's ``reset(seed=seed, options=options)``."""
        super().reset(seed=seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The wrapped env's ``step(action)``, the reward a ``float`` and the flags ``bool``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> Any:
        """The wrapped env's ``render()``."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()


def as_text_env(env: gym.Env, env_id: str | None = None) -> gym.Env:
    """``env`` itself if its base is a :class:`TextEnv`, else ``TextEnvAdapter(env)``.

    Args:
        env: An env as ``gymnasium.make`` returned it.
        env_id: Its id, for the message (default: ``env.spec.id``).

    Raises:
        ValueError: (one line) for an env whose observation or action space is not text, e.g.
            ``CartPole-v1 builds CartPoleEnv, whose spaces are not text ...``.
    """
    if isinstance(env.unwrapped, TextEnv):
        return env
    spaces = (env.observation_space, env.action_space)
    if not all(isinstance(space, gym.spaces.Text) for space in spaces):
        name = env_id or (env.spec.id if env.spec is not None else type(env.unwrapped).__name__)
        raise ValueError(
            f"{name} builds {type(env.unwrapped).__name__}, whose spaces are not text "
            f"(observation {env.observation_space}, action {env.action_space}); textgym plays "
            "envs whose observations and actions are strings: a textgym.TextEnv, or a "
            "gymnasium.Env with gymnasium.spaces.Text spaces"
        )
    return TextEnvAdapter(env)
