"""Batched multi-turn rollouts: many episodes at once, one policy call per turn.

:func:`rollout` keeps ``batch_size`` env instances busy. On each turn it gathers the
conversation of every live episode, makes **one** batched ``policy.act`` call, and steps each
env with its completion. Episodes end at different turns; a finished slot starts the next
queued episode at once (continuous batching), so the policy always sees full batches until
the queue runs dry. :func:`iter_rollout` is the same loop as a stream: it yields each episode as
it finishes, so a caller can save results as they come in and keep them when interrupted.

With ``env_workers=True`` each env instance lives in its own worker process (Gymnasium's
:class:`~gymnasium.vector.AsyncVectorEnv`, one env per worker): a turn's steps are sent to every
live env first and then collected, so envs whose ``step`` is heavy (tool sandboxes, verifiers)
step in parallel while the trajectories stay the same as in-process for the same seeds.

With a local model (a :class:`~textgym.policies.base.TokenPolicy` such as
:class:`~textgym.policies.hf.HFPolicy`) the rollout is token-in / token-out: each episode keeps
one token sequence, extended turn by turn with the generated ids and the tokenized new messages
(:mod:`textgym.tokens`), and the policy generates from those ids directly. The trajectory then
records the ids, the sampling log-probabilities and a loss mask that marks the generated tokens
only: what a policy-gradient trainer needs, with no re-tokenization.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from textgym.checks import check_int
from textgym.policies.base import Policy, TokenPolicy, conversation_start
from textgym.types import Completion, Message

__all__ = ["Trajectory", "WorkerEnv", "iter_rollout", "rollout"]


@dataclass
class Trajectory:
    """One finished episode.

    Attributes:
        env_id: Registered id of the env (``None`` for an unregistered env).
        seed: Seed passed to ``reset``.
        task_id: ``info["task_id"]`` at reset.
        messages: The conversation as chat messages (system, user, assistant, user, ...), the
            final observation included as the last user message.
        rewards: Reward of each step, ``[num_steps]`` floats.
        reward_components: ``info["reward_components"]`` of each step.
        invalid_actions: ``info["invalid_action"]`` of each step (False if absent).
        finish_reasons: The policy's ``finish_reason`` for each completion.
        terminated: Whether the last step terminated the episode.
        truncated: Whether it was truncated (time limit).
        outcome: ``info["outcome"]`` of the last step, if the env reports one.
        token_ids: Token-in / token-out rollouts only (else empty): the episode as one token
            sequence, ``[L]`` ints: the first prompt, then each completion's generated ids
            followed by the template and observation ids of the next turn. It ends with the
            last completion.
        loss_mask: ``[L]`` ints, 1 exactly on the policy-generated ids, 0 on prompt, template
            and environment ids.
        token_logprobs: ``[L]`` floats, the sampling log-probability (natural log) of each
            generated id; 0.0 where ``loss_mask`` is 0.
        tools: The tool schemas the env offered at reset (``info["tools"]``), ``None`` for an
            env without tools.
    """

    env_id: str | None
    seed: int | None
    task_id: str | None
    messages: list[Message] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    reward_components: list[dict[str, float]] = field(default_factory=list)
    invalid_actions: list[bool] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    outcome: str | None = None
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None

    def extend_tokens(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        """Append ids to :attr:`token_ids`: generated ones when ``logprobs`` is given, else not.

        Raises:
            ValueError: ``logprobs`` is given with a length other than ``len(ids)``.
        """
        ids = [int(i) for i in ids]
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(
                f"Expected one log-prob per generated id, got {len(logprobs)} log-probs for "
                f"{len(ids)} ids"
            )
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if logprobs is not None else 0] * len(ids))
        self.token_logprobs.extend(
            [float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids)
        )

    @property
    def episode_return(self) -> float:
        """Undiscounted sum of rewards."""
        return float(sum(self.rewards))

    @property
    def num_steps(self) -> int:
        """Number of agent actions (policy turns)."""
        return len(self.rewards)

    def component_totals(self) -> dict[str, float]:
        """Sum of each reward component over the episode."""
        totals: dict[str, float] = {}
        for comps in self.reward_components:
            for name, value in comps.items():
                totals[name] = totals.get(name, 0.0) + float(value)
        return totals

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (adds ``return`` and per-episode component totals)."""
        record = asdict(self)
        record["return"] = self.episode_return
        record["component_totals"] = self.component_totals()
        return record

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(self.to_dict(), ensure_ascii=False)


@dataclass
class _Slot:
    env: gym.Env
    index: int
    trajectory: Trajectory
    info: Mapping[str, Any]


def rollout(
    make_env: Callable[[], gym.Env],
    policy: Policy,
    seeds: Sequence[int | None],
    *,
    on_episode_end: Callable[[Trajectory], None] | None = None,
    **settings: Any,
) -> list[Trajectory]:
    """Play one episode per seed, up to ``batch_size`` at once; return them in seed order.

    Args:
        make_env, policy, seeds: As :func:`iter_rollout`.
        on_episode_end: Called with each trajectory as it finishes, in the order they finish
            (e.g. to advance a progress bar, :class:`textgym.progress.EpisodeProgress`).
        **settings: :func:`iter_rollout`'s keyword arguments (``batch_size``, ``options``,
            ``token_level``, ``env_workers``, ``on_turn``).

    Returns:
        ``len(seeds)`` trajectories, ``result[i]`` played with ``seeds[i]``.

    Raises:
        ValueError: as :func:`iter_rollout`.
        TypeError: for a keyword :func:`iter_rollout` does not take.
    """
    results: dict[int, Trajectory] = {}
    episodes = iter_rollout(make_env, policy, seeds, **settings)
    with contextlib.closing(episodes):
        for index, traj in episodes:
            results[index] = traj
            if on_episode_end is not None:
                on_episode_end(traj)
    return [results[i] for i in sorted(results)]


def iter_rollout(
    make_env: Callable[[], gym.Env],
    policy: Policy,
    seeds: Sequence[int | None],
    *,
    batch_size: int = 8,
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    token_level: bool | None = None,
    env_workers: bool = False,
    on_turn: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Trajectory]]:
    """:func:`rollout` as a stream: yield ``(i, trajectory)`` as each episode finishes.

    ``i`` is the episode's index in ``seeds``; episodes come in the order they finish, which
    is not seed order. Nothing is kept once yielded, so a caller that saves each trajectory as
    it comes (``textgym eval --output``) holds only the live episodes, and one that stops early
    (Ctrl-C) has every finished episode. Close the iterator (``contextlib.closing``) or exhaust
    it to close the envs.

    Args:
        make_env: Builds one env (e.g. ``lambda: gymnasium.make(env_id, **kwargs)``); called
            ``min(batch_size, len(seeds))`` times, and each env is reused across episodes.
        policy: Any :class:`~textgym.policies.Policy`.
        seeds: One ``reset`` seed per episode. Equal seeds (and equal options) give a GRPO-style
            group: the same task and the same opponent. Read one at a time as episodes start,
            so a lazy sequence (a ``range``, :class:`textgym.evaluation.GroupSeeds`) of any
            length costs no memory up front.
        batch_size: Largest number of live episodes (conversations per policy call), >= 1.
        options: ``reset`` options: one mapping for every episode, or one per seed (e.g.
            ``{"episode_index": g}`` for :class:`~textgym.wrappers.OpponentSkill`'s strata).
        token_level: Token-in / token-out (see the module docstring); ``None`` chooses it
            whenever the policy is a :class:`~textgym.policies.base.TokenPolicy`.
        env_workers: Step each env in its own worker process (see the module docstring).
            ``make_env`` must then be picklable with cloudpickle (a lambda or closure is).
        on_turn: Called after each batched turn with the number of actions it took (the live
            episodes), before that turn's finished episodes are yielded: progress that moves
            even while no episode finishes (a batch whose episodes all end on one turn).

    Raises:
        ValueError: when called, if ``batch_size < 1``, ``options`` is a sequence of the wrong
            length, or ``token_level=True`` for a policy that is not a ``TokenPolicy``; while
            iterating, if the policy returns the wrong number of completions.
    """
    check_int("batch_size", batch_size, low=1)
    if options is not None and not isinstance(options, (Mapping, Sequence)):
        options = list(options)  # any iterable of mappings, read once
    _check_options(options, len(seeds))
    if token_level is None:
        token_level = isinstance(policy, TokenPolicy)
    elif token_level and not isinstance(policy, TokenPolicy):
        raise ValueError(
            f"token_level=True needs a TokenPolicy (prompt_ids, continuation_ids, generate); "
            f"{type(policy).__name__} is not one"
        )
    build = (lambda: WorkerEnv(make_env)) if env_workers else make_env
    return _episodes(build, policy, seeds, batch_size, options, token_level, on_turn)


def _episodes(
    make_env: Callable[[], gym.Env | WorkerEnv],
    policy: Policy,
    seeds: Sequence[int | None],
    batch_size: int,
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
    token_level: bool,
    on_turn: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Trajectory]]:
    """The loop of :func:`iter_rollout` (arguments already checked): up to ``batch_size`` live
    episodes; each turn one batched policy call and one step per env; a finished episode is
    yielded and its env starts the next seed."""
    # Nothing here grows with len(seeds): the next episode's index is a counter.
    count, next_index = len(seeds), 0
    envs: list[Any] = []
    slots: list[_Slot] = []

    def start(env: Any) -> None:
        nonlocal next_index
        index, next_index = next_index, next_index + 1
        opts = _episode_options(options, index)
        slots.append(_start_episode(env, index, seeds[index], opts, policy, token_level))

    try:
        for _ in range(min(batch_size, count)):
            envs.append(make_env())
            start(envs[-1])
        while slots:
            completions = _act(policy, slots, token_level)
            steps = _step_all([s.env for s in slots], [c.text for c in completions])
            if on_turn is not None:
                on_turn(len(steps))
            still_live, finished = [], []
            for slot, completion, step in zip(slots, completions, steps):
                if _record_step(slot, completion, step, policy, token_level):
                    finished.append(slot)
                else:
                    still_live.append(slot)
            slots = still_live
            for slot in finished:
                yield slot.index, slot.trajectory
            for slot in finished:  # their envs start the next seeds
                if next_index < count:
                    start(slot.env)
    finally:
        for env in envs:
            env.close()


def _start_episode(
    env: Any,
    index: int,
    seed: int | None,
    options: dict[str, Any] | None,
    policy: Policy,
    token_level: bool,
) -> _Slot:
    """Reset ``env`` for episode ``index`` and open its trajectory (with the prompt's token
    ids when ``token_level``)."""
    obs, info = env.reset(seed=seed, options=options)
    spec_id = env.spec.id if env.spec is not None else None
    traj = Trajectory(env_id=spec_id, seed=seed, task_id=info.get("task_id"))
    if info.get("tools"):
        traj.tools = [dict(tool) for tool in info["tools"]]
    traj.messages = conversation_start(obs, info)
    if token_level:
        traj.extend_tokens(policy.prompt_ids(traj.messages, info))  # type: ignore[attr-defined]
    return _Slot(env, index, traj, info)


def _record_step(
    slot: _Slot, completion: Completion, step: tuple[Any, ...], policy: Policy, token_level: bool
) -> bool:
    """Add one turn (the completion and the env's step) to the slot's trajectory; return
    whether the episode ended."""
    obs, reward, terminated, truncated, info = step
    traj = slot.trajectory
    done = bool(terminated or truncated)
    if token_level:
        _record_tokens(policy, traj, completion, obs, slot.info, done)
    traj.messages.append({"role": "assistant", "content": completion.text})
    traj.messages.append({"role": "user", "content": obs})
    traj.rewards.append(float(reward))
    traj.reward_components.append(dict(info.get("reward_components", {})))
    traj.invalid_actions.append(bool(info.get("invalid_action", False)))
    traj.finish_reasons.append(completion.finish_reason)
    slot.info = _with_episode_tools(info, slot.info)
    if done:
        traj.terminated, traj.truncated = bool(terminated), bool(truncated)
        traj.outcome = info.get("outcome")
    return done


def _with_episode_tools(info: Mapping[str, Any], previous: Mapping[str, Any]) -> Mapping[str, Any]:
    """The step's info, carrying the episode's ``tools`` (given at reset) when it has none.

    Tool envs list their tools in the reset info only; the policy gets them with every turn's
    info, so that a chat endpoint receives the tools on every request, as servers expect.
    """
    if "tools" in info or "tools" not in previous:
        return info
    return {**info, "tools": previous["tools"]}


def _step_all(envs: Sequence[Any], actions: Sequence[str]) -> list[tuple[Any, ...]]:
    """Step every env with its action; worker envs all start before any result is awaited."""
    if envs and isinstance(envs[0], WorkerEnv):
        for env, action in zip(envs, actions):
            env.step_async(action)
        results, error = [], None
        for env in envs:  # wait for every worker, so none is left mid-call, then raise
            try:
                results.append(env.step_wait())
            except Exception as exc:  # noqa: BLE001 - raised again below, after the others
                error = error or exc
        if error is not None:
            raise error
        return results
    return [env.step(action) for env, action in zip(envs, actions)]


class _Remote(gym.Wrapper):
    """Runs in the worker: ``reset``/``step`` under names Gymnasium's ``call`` forwards.

    ``AsyncVectorEnv.call`` refuses the names ``reset`` and ``step`` (its own ``reset``/``step``
    batch the results into arrays and auto-reset); these return the env's own objects.
    """

    def remote_reset(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def remote_step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def remote_spec(self) -> Any:
        return self.env.spec


class WorkerEnv:
    """One env in its own worker process, driven through Gymnasium's ``AsyncVectorEnv``.

    The vector env holds exactly one env and is only used through ``call``, so observations,
    rewards and infos come back as the env returned them (no batching into arrays, no
    auto-reset). Exceptions raised in the worker are raised again here by Gymnasium.

    Args:
        make_env: Builds the env in the worker; pickled with cloudpickle.
    """

    def __init__(self, make_env: Callable[[], gym.Env]) -> None:
        self._vector = gym.vector.AsyncVectorEnv(
            [lambda: _Remote(make_env())], shared_memory=False, copy=False
        )
        (self.spec,) = self._vector.call("remote_spec")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        (result,) = self._vector.call("remote_reset", seed, options)
        return result

    def step_async(self, action: str) -> None:
        self._vector.call_async("remote_step", action)

    def step_wait(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        (result,) = self._vector.call_wait()
        return result

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.step_async(action)
        return self.step_wait()

    def close(self) -> None:
        self._vector.close()


def _check_options(
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None, count: int
) -> None:
    """Raise ValueError unless ``options`` is one mapping, ``None`` or one entry per seed."""
    if options is None or isinstance(options, Mapping):
        return
    if len(options) != count:
        raise ValueError(
            f"Expected one options mapping per seed ({count}), got {len(options)}; pass a "
            "single mapping to use the same options for every episode"
        )


def _episode_options(
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None, index: int
) -> dict[str, Any] | None:
    """A fresh ``reset`` options dict (or ``None``) for episode ``index``."""
    chosen = options if options is None or isinstance(options, Mapping) else options[index]
    return dict(chosen) if chosen else None


def _act(policy: Policy, slots: list[_Slot], token_level: bool) -> list[Completion]:
    """One batched policy call over the live episodes."""
    if token_level:
        completions = policy.generate([s.trajectory.token_ids for s in slots])  # type: ignore[attr-defined]
    else:
        completions = policy.act([s.trajectory.messages for s in slots], [s.info for s in slots])
    if len(completions) != len(slots):
        raise ValueError(
            f"Policy {policy.name!r} returned {len(completions)} "
            f"completions for {len(slots)} conversations"
        )
    return completions


def _record_tokens(
    policy: Policy,
    traj: Trajectory,
    completion: Completion,
    obs: str,
    info: Mapping[str, Any],
    done: bool,
) -> None:
    """Append a completion's generated ids, then (unless the episode ended) the next prompt's."""
    if completion.completion_ids is None or completion.logprobs is None:
        raise ValueError(
            f"Token-level rollouts need completion_ids and logprobs from the policy; "
            f"{policy.name!r} returned a completion without them"
        )
    traj.extend_tokens(completion.completion_ids, completion.logprobs)
    if not done:
        new = [{"role": "user", "content": obs}]
        traj.extend_tokens(
            policy.continuation_ids(traj.messages, completion, new, info)  # type: ignore[attr-defined]
        )
