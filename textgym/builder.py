"""The one way to build an env (an :class:`EnvRecipe`: id, kwargs, wrappers, opponent range) and a
policy by name (:func:`make_policy`).

This is the assembly layer (``docs/architecture.md``): it may import core, the envs and the
wrappers, which import only core; the trainers and the command line build through it.

The command line, the trainers and the benchmarks describe the env they play as a recipe and
build it here, so an env is built the same way everywhere:

1. ``gymnasium.make(env_id, **env_kwargs)``: any registered Gymnasium id, including
   Gymnasium's ``module:EnvName-v0`` form (the module is imported first, and registers the id)
   and ids that installed packages register through the ``textgym.envs`` entry-point group
   (:data:`ENTRY_POINT_GROUP`), loaded the first time an id is not found. A plain
   ``gymnasium.Env`` whose spaces are text gets :class:`textgym.core.TextEnvAdapter`, TextEnv's
   default contract (:func:`textgym.core.as_text_env`).
2. :class:`textgym.wrappers.StratifiedOpponent` when ``opponent_random_move_prob`` is given:
   the opponent's random-move probability drawn per episode from that range, stratified over
   ``groups`` consecutive episodes (a trainer's tasks per step).
3. The named reward wrappers, in order, from the one table
   :data:`textgym.wrappers.REWARD_WRAPPERS` (``format_reward``, ``invalid_action_penalty``).

:func:`env_factory` checks a recipe up front by building one env (the probe, which the caller
reads the env contract from, :class:`textgym.TextEnv`, and then closes) and raises
``ValueError`` with one line naming the bad part: an unknown id, an env whose spaces are not
text, keyword arguments the env rejects, a stratified opponent asked of an env without
one, or a wrapper that refuses the env. Every stack it builds records its constructor
arguments, so ``gymnasium.make(env.spec)`` rebuilds it.

Example:
    >>> recipe = EnvRecipe(
    ...     "textgym/TicTacToe-v0",
    ...     env_kwargs={"agent_mark": "O"},
    ...     wrappers=("invalid_action_penalty",),
    ...     opponent_random_move_prob=(0.5, 1.0),
    ...     groups=8,
    ... )
    >>> make_env, probe = env_factory(recipe)
    >>> probe.unwrapped.stop_strings, probe.unwrapped.has_opponent
    (('</move>',), True)
    >>> probe.close()
    >>> env_factory(EnvRecipe("textgym/GSM8K-v0", opponent_random_move_prob=(0.0, 1.0)))
    Traceback (most recent call last):
    ...
    textgym.errors.SetupError: textgym/GSM8K-v0 has no seeded opponent to stratify (GSM8KEnv.has_opponent ...
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from textgym.checks import check_int, check_probability, one_line
from textgym.core import as_text_env
from textgym.errors import SetupError
from textgym.policies import GoldPolicy, Policy, RandomPolicy
from textgym.wrappers import REWARD_WRAPPERS, StratifiedOpponent

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvRecipe",
    "GENERAL_POLICIES",
    "check_wrapper_names",
    "env_bound_expert_ids",
    "env_factory",
    "gold_env_ids",
    "load_entry_points",
    "make_expert",
    "make_policy",
    "policy_names",
    "resolve_env_id",
]


def check_wrapper_names(names: Sequence[str]) -> tuple[str, ...]:
    """The names, checked against :data:`textgym.wrappers.REWARD_WRAPPERS`.

    Raises:
        ValueError: for a name the table does not hold, naming the ones it does.
    """
    for name in names:
        if name not in REWARD_WRAPPERS:
            raise SetupError(
                f"unknown wrapper {name!r}; expected any of {', '.join(REWARD_WRAPPERS)}"
            )
    return tuple(names)


#: The entry-point group through which installed packages register their envs (Gymnasium
#: loads no plugins itself). A package declares e.g. ``[project.entry-points."textgym.envs"]
#: mypkg = "mypkg.envs"``: the value is a module that calls ``gymnasium.register`` when
#: imported, or a function (``"mypkg.envs:register_envs"``) that does when called.
ENTRY_POINT_GROUP = "textgym.envs"


def _shown(kwargs: Mapping[str, Any]) -> str:
    """The kwargs as JSON for a message, or a placeholder when too long or odd to show."""
    try:
        text = json.dumps(dict(kwargs))
    except (RecursionError, ValueError, TypeError):
        return "the given env_kwargs"
    return text if len(text) <= 200 else "the given env_kwargs"


@dataclass(frozen=True)
class EnvRecipe:
    """How to build an env: what :func:`env_factory` checks and :meth:`make` builds.

    Args:
        env_id: A registered Gymnasium id (``"textgym/TicTacToe-v0"``), or
            ``"module:EnvName-v0"`` whose module registers it when imported.
        env_kwargs: Keyword arguments of ``gymnasium.make`` (the env's constructor). Copied.
        wrappers: Names from :data:`textgym.wrappers.REWARD_WRAPPERS`, applied in order
            (outermost last), each with its default arguments.
        opponent_random_move_prob: ``(low, high)`` with ``0 <= low <= high <= 1``: wrap the
            env in :class:`~textgym.wrappers.StratifiedOpponent` so each episode's opponent
            plays a random move with a probability drawn from this range (the high end is the
            weaker opponent). ``None`` (default): the env's own setting. Only for envs with a
            seeded opponent (:attr:`textgym.TextEnv.has_opponent`).
        groups: Strata of the opponent range, an int >= 1: any ``groups`` consecutive
            episodes span the whole range (a trainer passes its tasks per step). Default 1.

    Raises:
        ValueError: for a malformed field: an empty id, kwargs that are not a mapping with
            ``str`` keys, an unknown wrapper name, a bad range or ``groups``.
    """

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: tuple[str, ...] = ()
    opponent_random_move_prob: tuple[float, float] | None = None
    groups: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise SetupError(f"Expected env_id to be a non-empty str, got {self.env_id!r}")
        if not isinstance(self.env_kwargs, Mapping) or not all(
            isinstance(k, str) for k in self.env_kwargs
        ):
            raise SetupError(
                "Expected env_kwargs to be a mapping of argument names to values, "
                f"got {self.env_kwargs!r}"
            )
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        if isinstance(self.wrappers, str) or not isinstance(self.wrappers, Sequence):
            raise SetupError(
                f"Expected wrappers to be a sequence of names, got {self.wrappers!r}; "
                f"e.g. ('invalid_action_penalty',)"
            )
        object.__setattr__(self, "wrappers", check_wrapper_names(self.wrappers))
        if self.opponent_random_move_prob is not None:
            object.__setattr__(
                self, "opponent_random_move_prob", _check_range(self.opponent_random_move_prob)
            )
        object.__setattr__(self, "groups", check_int("groups", self.groups, low=1))

    def make(self) -> gym.Env:
        """Build the env: ``gymnasium.make``, then the opponent range, then the wrappers.

        Checks nothing beyond what the env and the wrappers check themselves: call
        :func:`env_factory` once first for one-line errors.
        """
        if ":" not in self.env_id and self.env_id not in gym.registry:
            resolve_env_id(self.env_id)  # e.g. in a spawned worker: load the entry points
        return self._wrap(as_text_env(gym.make(self.env_id, **self.env_kwargs), self.env_id))

    def _wrap(self, env: gym.Env) -> gym.Env:
        if self.opponent_random_move_prob is not None:
            env = StratifiedOpponent(
                env, random_move_prob=self.opponent_random_move_prob, groups=self.groups
            )
        for name in self.wrappers:
            env = REWARD_WRAPPERS[name](env)
        return env


def _check_range(value: Any) -> tuple[float, float]:
    """``(low, high)`` probabilities with ``low <= high``."""
    try:
        low, high = value
        low = check_probability("low", low)
        high = check_probability("high", high)
    except (TypeError, ValueError):
        low, high = 1.0, 0.0  # reported below
    if low > high:
        raise SetupError(
            "Expected opponent_random_move_prob (low, high) with 0 <= low <= high <= 1, "
            f"got {value!r}"
        )
    return low, high


def load_entry_points() -> None:
    """Import the modules (or call the functions) of the ``textgym.envs`` entry points.

    Raises:
        ValueError: if one fails to load (a plugin's bug must not hide the id it registers).
    """
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry_point.load()
            if callable(loaded):
                loaded()
        except Exception as exc:
            raise SetupError(
                f"the {ENTRY_POINT_GROUP} entry point {entry_point.name!r} "
                f"({entry_point.value}) failed to load: {one_line(exc)}"
            ) from exc


def resolve_env_id(env_id: str) -> gym.envs.registration.EnvSpec:
    """Make sure ``env_id`` is registered and return its spec.

    Imports the module of a ``module:EnvName-v0`` id (as ``gymnasium.make`` does); an id still
    unknown loads the :data:`ENTRY_POINT_GROUP` entry points once more.

    Raises:
        ValueError: the module cannot be imported, or the id is not registered.
    """
    name = env_id
    if ":" in env_id:
        module, name = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise SetupError(
                f"cannot import module {module!r} of env id {env_id!r}: {one_line(exc)}; "
                "check that the module is importable (installed, or its folder on PYTHONPATH, "
                "e.g. PYTHONPATH=. for a module in the current folder)"
            ) from exc
    if name not in gym.registry:
        load_entry_points()
    if name not in gym.registry:
        import textgym

        family = name.rsplit("-v", 1)[0]
        versions = sorted(i for i in gym.registry if i.rsplit("-v", 1)[0] == family)
        if versions:
            raise SetupError(
                f"env id {env_id!r} is not registered, but {', '.join(versions)} is: a new "
                "version means the env's behaviour changed (see the env's docs); use it"
            )
        known = ", ".join(textgym.ENV_DESCRIPTIONS)
        raise SetupError(
            f"unknown env id {env_id!r}; expected a registered Gymnasium id such as {known}, "
            f"an id 'module:EnvName-v0' whose module registers it, or one registered through "
            f"the {ENTRY_POINT_GROUP!r} entry point"
        )
    return gym.registry[name]


def env_factory(recipe: EnvRecipe) -> tuple[Callable[[], gym.Env], gym.Env]:
    """Check ``recipe`` by building one env, and return the factory and that env.

    Args:
        recipe: What to build.

    Returns:
        ``(make_env, probe)``: ``make_env()`` builds a fresh env each call (it is
        ``recipe.make``, picklable for subprocess vector envs); ``probe`` is one env it
        built, to read the env contract from (``probe.unwrapped.stop_strings``, ...,
        ``probe.spec.max_episode_steps``). The caller closes it.

    Raises:
        ValueError: one line naming the bad part: an unknown id or unimportable module, an
            env whose spaces are not text (neither a :class:`textgym.TextEnv` nor a
            ``gymnasium.Env`` with ``gymnasium.spaces.Text`` spaces), keyword arguments or data the env
            rejects (the env's own message; a missing data file or a missing optional
            package included), a stratified opponent asked of an env without one, or a
            wrapper that refuses the env (e.g. ``format_reward`` on an env that pays its own
            format, ``win_speed_bonus`` on an env whose ``info_keys`` lack ``outcome``).
    """
    resolve_env_id(recipe.env_id)
    try:
        env = gym.make(recipe.env_id, **recipe.env_kwargs)
    except (ValueError, TypeError, OSError, ImportError, RecursionError, gym.error.Error) as exc:
        # OSError: a data file that is missing, a hub dataset that cannot be reached.
        raise SetupError(
            f"cannot make {recipe.env_id} with {_shown(recipe.env_kwargs)}: {one_line(exc)}"
        ) from exc
    try:
        env = as_text_env(env, recipe.env_id)
        base = env.unwrapped
        if recipe.opponent_random_move_prob is not None and not base.has_opponent:
            raise SetupError(
                f"{recipe.env_id} has no seeded opponent to stratify "
                f"({type(base).__name__}.has_opponent is False); leave "
                "opponent_random_move_prob unset for this env"
            )
        try:
            probe = recipe._wrap(env)
        except (ValueError, TypeError) as exc:
            raise SetupError(
                f"cannot wrap {recipe.env_id} in {', '.join(recipe.wrappers)}: {one_line(exc)}"
            ) from exc
    except ValueError:
        env.close()
        raise
    return recipe.make, probe


# ----------------------------------------------------------------------------- policies


def _hf(**kwargs: Any) -> Policy:
    from textgym.policies.hf import HFPolicy  # torch/transformers only when asked for

    return HFPolicy.from_name(**kwargs)


def _openai(**kwargs: Any) -> Policy:
    from textgym.policies.openai_compat import OpenAIPolicy  # the openai client only when asked for

    return OpenAIPolicy(**kwargs)


def _human(**kwargs: Any) -> Policy:
    from textgym.policies.human import HumanPolicy

    return HumanPolicy(**kwargs)


#: The policies of any env they can play; an env's own expert is built by its class.
_FACTORIES: dict[str, Callable[..., Policy]] = {
    "random": RandomPolicy,
    "gold": GoldPolicy,
    "hf": _hf,
    "openai": _openai,
    "human": _human,
}
#: The names of the policies that play any env they can (each env's own expert aside).
GENERAL_POLICIES = tuple(_FACTORIES)


def _registered_classes() -> dict[str, type]:
    """Each textgym id of the registry and its env class (imported, not instantiated)."""
    from textgym.registration import ENVS

    return {entry.id: gym.envs.registration.load_env_creator(entry.entry_point) for entry in ENVS}


def _own_experts() -> list[tuple[str, str, type]]:
    """``(env id, expert name, env class)`` of each registered env whose class builds an expert
    of its own (:meth:`textgym.TextEnv.make_expert`; ``gold`` and ``None`` are not its own)."""
    found = []
    for env_id, cls in _registered_classes().items():
        name = getattr(cls, "expert_policy", None)  # a class attribute, or TextEnv's property
        if isinstance(name, str) and name not in _FACTORIES:
            found.append((env_id, name, cls))
    return found


def policy_names() -> tuple[str, ...]:
    """The names :func:`make_policy` builds: ``random``, ``gold``, ``hf``, ``openai``,
    ``human``, then the experts the registered envs build (``minimax``, ``lookup_expert``)."""
    return (*_FACTORIES, *dict.fromkeys(name for _, name, _ in _own_experts()))


def gold_env_ids() -> list[str]:
    """The registered textgym ids whose env gives gold completions (its class's
    :attr:`~textgym.TextEnv.has_gold_completion`): what ``--policy gold`` can play, read from
    the registry, so a new env with gold answers is listed without another file changing."""
    return [i for i, cls in _registered_classes().items() if cls.has_gold_completion]


def env_bound_expert_ids(name: str) -> list[str] | None:
    """For an env's own expert (one its class builds: ``minimax``, ``lookup_expert``), the
    registered ids whose class names it as its ``expert_policy``; ``None`` for any other
    policy name."""
    return [env_id for env_id, own, _ in _own_experts() if own == name] or None


def make_expert(env: Any, env_kwargs: Mapping[str, Any] | None, seed: Any = None) -> Policy:
    """The expert of ``env`` (a :class:`textgym.TextEnv`, e.g. ``probe.unwrapped``) made with
    ``env_kwargs``: its :attr:`~textgym.TextEnv.expert_policy` (``gold``) through
    :func:`make_policy`, or the expert its class builds (:meth:`~textgym.TextEnv.make_expert`),
    which an env outside textgym's registry brings too.

    Raises:
        SetupError: the env names no expert policy.
    """
    name = env.expert_policy
    if name is None:
        raise SetupError(f"{type(env).__name__} names no expert policy")
    if name in _FACTORIES:
        return make_policy(name, seed=seed)
    return type(env).make_expert(seed=seed, env_kwargs=dict(env_kwargs or {}))


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a policy by name: ``random``, ``gold``, ``hf``, ``openai``, ``human``, or the
    expert of a registered env (``minimax``, ``lookup_expert``: the env class's
    :meth:`~textgym.TextEnv.make_expert`, given ``seed``, ``env_kwargs`` and its own options).

    Raises:
        SetupError: for an unknown name.
    """
    if name in _FACTORIES:
        return _FACTORIES[name](**kwargs)
    for _, own, cls in _own_experts():
        if own == name:
            return cls.make_expert(**kwargs)
    raise SetupError(f"Unknown policy {name!r}; expected one of {', '.join(policy_names())}")
