"""Batched multi-turn rollouts: many episodes at once, one policy call per turn.

:func:`rollout` keeps ``batch_size`` env instances busy. On each turn it gathers the
conversation of every live episode, makes **one** batched ``policy.act`` call, and steps each
env with its completion. Episodes end at different turns; a finished slot starts the next
queued episode at once (continuous batching), so the policy always sees full batches until
the queue runs dry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from textgym.policies.base import Message, Policy, conversation_start

__all__ = ["Trajectory", "rollout"]


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
    batch_size: int = 8,
    options: Mapping[str, Any] | None = None,
    on_episode_end: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Play one episode per seed, up to ``batch_size`` at once; return them in seed order.

    Args:
        make_env: Builds one env (e.g. ``lambda: gymnasium.make(env_id, **kwargs)``); called
            ``min(batch_size, len(seeds))`` times, and each env is reused across episodes.
        policy: Any :class:`~textgym.policies.Policy`.
        seeds: One ``reset`` seed per episode. Equal seeds give a GRPO-style group: the same
            task and the same opponent.
        batch_size: Largest number of live episodes (conversations per policy call), >= 1.
        options: ``reset`` options applied to every episode.
        on_episode_end: Called with each finished trajectory (e.g. to advance a progress bar).

    Returns:
        ``len(seeds)`` trajectories, ``result[i]`` played with ``seeds[i]``.

    Raises:
        ValueError: if ``batch_size < 1`` or the policy returns the wrong number of completions.
    """
    if batch_size < 1:
        raise ValueError(f"Expected batch_size >= 1, got {batch_size}")
    queue = list(range(len(seeds)))[::-1]
    results: list[Trajectory | None] = [None] * len(seeds)
    envs = [make_env() for _ in range(min(batch_size, len(seeds)))]
    slots: list[_Slot] = []

    def start(env: gym.Env) -> None:
        index = queue.pop()
        obs, info = env.reset(seed=seeds[index], options=dict(options) if options else None)
        spec_id = env.spec.id if env.spec is not None else None
        traj = Trajectory(env_id=spec_id, seed=seeds[index], task_id=info.get("task_id"))
        traj.messages = conversation_start(obs, info)
        slots.append(_Slot(env, index, traj, info))

    for env in envs:
        start(env)
    try:
        while slots:
            completions = policy.act([s.trajectory.messages for s in slots], [s.info for s in slots])
            if len(completions) != len(slots):
                raise ValueError(
                    f"Policy {getattr(policy, 'name', policy)!r} returned {len(completions)} "
                    f"completions for {len(slots)} conversations"
                )
            still_live: list[_Slot] = []
            finished_envs: list[gym.Env] = []
            for slot, completion in zip(slots, completions):
                obs, reward, terminated, truncated, info = slot.env.step(completion.text)
                traj = slot.trajectory
                traj.messages.append({"role": "assistant", "content": completion.text})
                traj.messages.append({"role": "user", "content": obs})
                traj.rewards.append(float(reward))
                traj.reward_components.append(dict(info.get("reward_components", {})))
                traj.invalid_actions.append(bool(info.get("invalid_action", False)))
                traj.finish_reasons.append(completion.finish_reason)
                slot.info = info
                if terminated or truncated:
                    traj.terminated, traj.truncated = bool(terminated), bool(truncated)
                    traj.outcome = info.get("outcome")
                    results[slot.index] = traj
                    if on_episode_end is not None:
                        on_episode_end(traj)
                    finished_envs.append(slot.env)
                else:
                    still_live.append(slot)
            slots = still_live
            for env in finished_envs:
                if queue:
                    start(env)
    finally:
        for env in envs:
            env.close()
    return [t for t in results if t is not None]
