"""A mixture of text envs as one env, so every command (``train``, ``eval``, ``collect``,
``serve``, ``check``) plays several tasks in one run: ``textgym/Mixture-v0``.

Each episode plays one member env, drawn by weight from the episode's seed alone: the copies of
a GRPO group (one seed) play the same member, so advantages stay within one task, and a step's
groups are drawn by weight. ``reset(options={"member": NAME, ...})`` picks a member instead (the
other options go to it). The info carries ``mixture_member``, and the task id is
``NAME::TASK`` (:data:`MEMBER_SEPARATOR`), which the trainer reads for its per-member metrics
(:func:`member_of`). Evaluation settings are the members', named ``NAME/SETTING`` (or
``NAME/eval`` for a member without any), so a training run evaluates each member apart.

The contract is the members' union: the stop strings of all of them (a completion stops at
any member's stop string), text spaces as long as the longest member's, gold completions only
when every member has them, an expert when every member has one (the members' own when they
share it, else :class:`MemberExperts`, each episode played by its member's). Each member keeps
its own step limit (``max_episode_steps``), reward and wrappers.

Example::

    textgym train textgym/Mixture-v0 --env-kwargs '{"envs": [
        {"env_id": "textgym/TicTacToe-v0", "weight": 2, "env_kwargs": {"prompt_style": "compact"}},
        {"env_id": "textgym/ReverseText-v0", "env_kwargs": {"max_chars": 64}},
        {"env_id": "textgym/EmailToolUse-v1", "wrappers": ["invalid_action_penalty"]}]}'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from textgym.core import TextEnv
from textgym.errors import SetupError
from textgym.spaces import UnicodeText

__all__ = [
    "DEFAULT_MEMBERS",
    "MEMBER_EXPERTS",
    "MEMBER_SEPARATOR",
    "EnvMixture",
    "MemberExperts",
    "member_of",
    "members_from_ids",
]

#: The expert of a mixture whose members have experts of different names.
MEMBER_EXPERTS = "member_experts"

#: Between the member's name and its own task id in a mixture episode's task id.
MEMBER_SEPARATOR = "::"

#: The default mixture: the three tasks of the suite's headline, equal weights.
DEFAULT_MEMBERS: tuple[dict[str, Any], ...] = (
    {"env_id": "textgym/TicTacToe-v0"},
    {"env_id": "textgym/ReverseText-v0"},
    {"env_id": "textgym/EmailToolUse-v1"},
)

_SPEC_KEYS = frozenset(
    {"env_id", "env_kwargs", "wrappers", "opponent_random_move_prob", "weight", "name"}
)


def members_from_ids(items: Sequence[str]) -> list[dict[str, Any]]:
    """Member specs from ``ID`` or ``ID:WEIGHT`` strings (``textgym train --mixture``), each
    with the env's own kwargs; an id ``module:Env-v0`` keeps its colon (only a number after
    the last colon is a weight).

    Raises:
        ValueError: an empty list, or an empty id.

    Example:
        >>> members_from_ids(["textgym/TicTacToe-v0:2", "textgym/ReverseText-v0"])
        [{'env_id': 'textgym/TicTacToe-v0', 'weight': 2.0}, {'env_id': 'textgym/ReverseText-v0'}]
    """
    if not items:
        raise SetupError("Expected one or more mixture members as ID or ID:WEIGHT")
    members = []
    for item in items:
        env_id, _, tail = item.rpartition(":")
        try:
            weight = float(tail) if env_id else None
        except ValueError:
            weight = None
        if weight is None:
            env_id = item
        if not env_id:
            raise SetupError(f"Expected a mixture member as ID or ID:WEIGHT, got {item!r}")
        members.append(
            {"env_id": env_id} if weight is None else {"env_id": env_id, "weight": weight}
        )
    return members


def member_of(task_id: str | None) -> str | None:
    """The mixture member of an episode from its task id (``None`` outside a mixture)."""
    if not isinstance(task_id, str) or MEMBER_SEPARATOR not in task_id:
        return None
    return task_id.split(MEMBER_SEPARATOR, 1)[0]


def _member(spec: Any, index: int) -> tuple[str, float, gym.Env]:
    """One member spec as ``(name, weight, env)``.

    Raises:
        ValueError: a spec that is not an object, an unknown key, a bad weight, a nested
            mixture, or an env the builder refuses.
    """
    from textgym.builder import EnvRecipe

    if not isinstance(spec, Mapping):
        raise SetupError(f"Expected envs[{index}] to be a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise SetupError(f"envs[{index}] has unknown keys {unknown}; expected {sorted(_SPEC_KEYS)}")
    env_id = spec.get("env_id")
    if not isinstance(env_id, str) or not env_id:
        raise SetupError(f"Expected envs[{index}].env_id to be an env id, got {env_id!r}")
    weight = spec.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise SetupError(f"Expected envs[{index}].weight to be a number > 0, got {weight!r}")
    if not (math.isfinite(weight) and weight > 0):
        raise SetupError(f"Expected envs[{index}].weight to be a finite number > 0, got {weight}")
    name = spec.get("name", env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    if not isinstance(name, str) or not name or MEMBER_SEPARATOR in name or "/" in name:
        raise SetupError(
            f"Expected envs[{index}].name to be a non-empty name without '/' or "
            f"'{MEMBER_SEPARATOR}', got {name!r}"
        )
    opponents = spec.get("opponent_random_move_prob")
    recipe = EnvRecipe(
        env_id,
        spec.get("env_kwargs") or {},
        tuple(spec.get("wrappers") or ()),
        None if opponents is None else tuple(opponents),
    )
    env = recipe.make()
    if isinstance(env.unwrapped, EnvMixture):
        env.close()
        raise SetupError(f"envs[{index}] is a mixture itself; list its members instead")
    return name, float(weight), env


class EnvMixture(TextEnv):
    """Several text envs as one, an episode's member drawn by weight from its seed (see the
    module).

    Args:
        envs: Member specs, JSON objects: ``env_id`` (required), ``env_kwargs``, ``wrappers``
            (names, as ``--wrappers``), ``opponent_random_move_prob`` (``[low, high]``, as
            ``textgym train``'s, for a member with an opponent), ``weight`` (> 0, default 1;
            normalized), ``name``
            (default the id's last part, e.g. ``TicTacToe-v0``; unique). Default:
            :data:`DEFAULT_MEMBERS`.
        render_mode: ``None``, ``"ansi"`` or ``"human"``.

    Observations, actions, rewards and infos are the episode's member's (its spaces: text of at
    most the longest member's ``max_length`` characters). Info keys: the member's own, plus
    ``mixture_member`` (its name) at reset and every step; the reset's ``task_id`` becomes
    ``NAME::TASK``. Episode end: the member's (its own step limit).

    Raises:
        ValueError: no member, a bad spec (see :func:`_member`), or two members of one name.
    """

    def __init__(
        self, envs: Sequence[Mapping[str, Any]] = DEFAULT_MEMBERS, render_mode: str | None = None
    ):
        self._init_render(render_mode)
        if isinstance(envs, (str, bytes, Mapping)) or not isinstance(envs, Sequence) or not envs:
            raise SetupError("Expected envs to be a non-empty list of member specs (JSON objects)")
        members = []
        try:
            for index, spec in enumerate(envs):
                members.append(_member(spec, index))
        except Exception:
            for _, _, env in members:
                env.close()
            raise
        self.names = tuple(name for name, _, _ in members)
        if len(set(self.names)) != len(self.names):
            for _, _, env in members:
                env.close()
            raise SetupError(f"Expected distinct member names, got {list(self.names)}; set name")
        weights = np.array([w for _, w, _ in members], dtype=np.float64)
        self.weights = tuple(float(w) for w in weights / weights.sum())
        self._envs = [env for _, _, env in members]
        self._current: int | None = None
        bases = [env.unwrapped for env in self._envs]
        self.action_space = UnicodeText(max(e.action_space.max_length for e in self._envs))
        self.observation_space = UnicodeText(
            max(e.observation_space.max_length for e in self._envs)
        )
        self.stop_strings = tuple(
            dict.fromkeys(s for b in bases for s in getattr(b, "stop_strings", ()))
        )
        self.has_gold_completion = all(getattr(b, "has_gold_completion", False) for b in bases)
        experts = {getattr(b, "expert_policy", None) for b in bases}
        self._expert = (
            experts.pop() if len(experts) == 1 else None if None in experts else MEMBER_EXPERTS
        )
        self.info_keys = frozenset().union(*(getattr(b, "info_keys", ()) for b in bases)) | {
            "mixture_member"
        }
        settings: dict[str, dict[str, Any]] = {}
        for name, base in zip(self.names, bases):
            own = dict(getattr(base, "evaluation_settings", {}) or {})
            for setting, options in (own or {"eval": {}}).items():
                settings[f"{name}/{setting}"] = {"member": name, **dict(options)}
        self.evaluation_settings = settings
        self.random_action = self._random_action

    def _random_action(self, observation: str, info: Mapping[str, Any], rng: Any) -> str:
        """The floor's draw (:attr:`TextEnv.random_action`) in the episode's member's grammar:
        its own ``random_action``, else a random legal move in its ``action_template``, else a
        random call of one of its tools.

        Raises:
            KeyError: an info of no member, or a member with none of these grammars.
        """
        from textgym.policies.random_actions import random_tool_call

        name = info.get("mixture_member")
        if name not in self.names:
            raise KeyError(f"Expected info['mixture_member'] to name a member, got {name!r}")
        base = self._envs[self.names.index(name)].unwrapped
        if getattr(base, "random_action", None) is not None:
            return base.random_action(observation, info, rng)
        if info.get("legal_moves"):
            move = int(info["legal_moves"][rng.integers(len(info["legal_moves"]))])
            return (getattr(base, "action_template", None) or "{}").format(move)
        if info.get("tools"):
            return random_tool_call(info["tools"], rng)
        raise KeyError(f"member {name} has no action grammar a random policy can draw from")

    @property
    def expert_policy(self) -> str | None:
        """The members' expert when all of them name the same one, :data:`MEMBER_EXPERTS`
        when each names its own, else (a member without one) ``None``."""
        return self._expert

    @property
    def max_return(self) -> float:
        """The largest of the members' most returns (:func:`textgym.card.max_return`)."""
        from textgym.card import max_return

        return max(max_return(env.unwrapped) for env in self._envs)

    def max_return_of(self, task_id: str | None) -> float:
        """The most an episode of ``task_id`` (``NAME::TASK``) returns: its member's.

        Raises:
            KeyError: a task id of no member.
        """
        from textgym.card import max_return

        name = member_of(task_id)
        if name not in self.names:
            raise KeyError(
                f"Expected a task id NAME{MEMBER_SEPARATOR}TASK of a member, got {task_id!r}"
            )
        return max_return(self._envs[self.names.index(name)].unwrapped)

    @classmethod
    def make_expert(
        cls, *, seed: Any = None, env_kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> MemberExperts:
        """Each member's own expert (:func:`textgym.builder.make_expert`, under the member's
        env kwargs) behind one :class:`MemberExperts`; ``options`` are not taken.

        Raises:
            SetupError: a member names no expert, or ``options`` were given.
        """
        from textgym.builder import make_expert

        if options:
            raise SetupError(f"A mixture's expert takes no options, got {sorted(options)}")
        specs = list((env_kwargs or {}).get("envs", DEFAULT_MEMBERS))
        mixture = cls(envs=specs)
        try:
            return MemberExperts(
                {
                    name: make_expert(env.unwrapped, spec.get("env_kwargs") or {}, seed=seed)
                    for name, env, spec in zip(mixture.names, mixture._envs, specs)
                }
            )
        finally:
            mixture.close()

    def _draw(self, seed: int | None) -> int:
        """The member of an episode: drawn by weight from its seed alone (else the env's RNG)."""
        if seed is None:
            return int(self.np_random.choice(len(self._envs), p=self.weights))
        rng = np.random.default_rng([seed, 0x6D6978])  # "mix": apart from the members' own draws
        return int(rng.choice(len(self._envs), p=self.weights))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Reset the episode's member (drawn from ``seed``, or ``options["member"]``).

        Raises:
            ValueError: an unknown ``options["member"]`` or options that are not a dict (the
                env stays usable).
        """
        if options is not None and not isinstance(options, dict):
            raise SetupError(f"Expected options to be a dict, got {type(options).__name__}")
        rest = dict(options or {})
        chosen = rest.pop("member", None)
        if chosen is not None and chosen not in self.names:
            raise SetupError(
                f"Unknown mixture member {str(chosen)[:80]!r}; one of {list(self.names)}"
            )
        super().reset(seed=seed)
        index = self.names.index(chosen) if chosen is not None else self._draw(seed)
        if seed is None:  # the member's seed from this env's RNG: reset() after reset(seed=s)
            seed = int(self.np_random.integers(2**63))  # replays as Gymnasium's check asks
        obs, info = self._envs[index].reset(seed=seed, options=rest or None)
        self._current = index
        name = self.names[index]
        info = {**info, "mixture_member": name}
        info["task_id"] = f"{name}{MEMBER_SEPARATOR}{info.get('task_id')}"
        return self._emit(obs), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The current member's ``step``.

        Raises:
            RuntimeError: ``step`` before ``reset``.
        """
        if self._current is None:
            raise RuntimeError("Call reset before step")
        obs, reward, terminated, truncated, info = self._envs[self._current].step(action)
        info = {**info, "mixture_member": self.names[self._current]}
        return self._emit(obs), float(reward), bool(terminated), bool(truncated), info

    def close(self) -> None:
        """Close every member."""
        for env in self._envs:
            env.close()


class MemberExperts:
    """The expert of a mixture: each conversation played by the expert of its episode's
    member (``info["mixture_member"]``), which sees the info as its own env gives it (the task
    id without the member's name), a batch split by member and put back in order.

    Raises (from :meth:`act`):
        KeyError: an info that names no member of the mixture.
    """

    name = MEMBER_EXPERTS
    tokens_generated = None

    def __init__(self, experts: Mapping[str, Any]):
        self.experts = dict(experts)

    def act(self, conversations: Sequence[Any], infos: Sequence[Mapping[str, Any]]) -> list[Any]:
        by_member: dict[str, list[int]] = {}
        for index, info in enumerate(infos):
            name = info.get("mixture_member")
            if name not in self.experts:
                raise KeyError(f"Expected info['mixture_member'] to name a member, got {name!r}")
            by_member.setdefault(name, []).append(index)
        completions: list[Any] = [None] * len(infos)
        for name, indices in by_member.items():
            own = self.experts[name].act(
                [conversations[i] for i in indices], [_member_info(infos[i]) for i in indices]
            )
            for index, completion in zip(indices, own):
                completions[index] = completion
        return completions


def _member_info(info: Mapping[str, Any]) -> Mapping[str, Any]:
    """A mixture episode's info with the member's own task id (``NAME::TASK`` -> ``TASK``)."""
    task_id = info.get("task_id")
    if not isinstance(task_id, str) or MEMBER_SEPARATOR not in task_id:
        return info
    return {**info, "task_id": task_id.split(MEMBER_SEPARATOR, 1)[1]}
