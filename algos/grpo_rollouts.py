"""The rollouts of a GRPO run: the training env, the sampling and evaluation policies, one
step's episodes and their metrics, and the evaluation.

Each step plays ``M`` tasks x ``G`` copies with :func:`textgym.rollout.rollout`, token-in /
token-out, so every trajectory carries its token ids, sampling log-probs and a loss mask that
covers only the policy's own tokens (multi-turn episodes included); a task's copies share seed
and opponent stratum (:func:`rollout_step`). :func:`evaluate` plays the env's evaluation
settings on seeds that never meet a training task.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from textgym.algos.distributed import (
    DistributedContext,
    all_gather_objects,
    all_reduce_sum,
    rank_slice,
)
from textgym.algos.dynamic_sampling import round_seed
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.learner import Learner, bf16_rollouts
from textgym.algos.rollout_weights import BF16Snapshot, SnapshotPolicy
from textgym.builder import EnvRecipe, env_factory
from textgym.evaluation import GroupSeeds, summarize
from textgym.mixture import member_of
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress
from textgym.rollout import Trajectory, rollout
from textgym.serving.client import served_env_factory

__all__ = [
    "TrainingEnv",
    "evaluate",
    "member_metrics",
    "rollout_metrics",
    "rollout_policies",
    "rollout_step",
    "step_tasks",
    "training_env",
]

_EVAL_SEED_OFFSET = 10**9  # evaluation seeds never collide with training tasks


@dataclass(frozen=True)
class TrainingEnv:
    """How to build the training env, read once from a probe instance."""

    make: Callable[[], gym.Env]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)
    max_turns: int  # most agent turns per episode (the registered step limit, else 1)
    stratified: bool  # a StratifiedOpponent wrapper draws the opponent per task
    #: The env's named evaluation settings (``TextEnv.evaluation_settings``; empty: none).
    evaluation_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def training_env(config: GRPOConfig) -> TrainingEnv:
    """The training env through the one builder (:mod:`textgym.builder`), played on the
    ``env_url`` servers when there are any (:func:`textgym.serving.client.served_env_factory`).

    With ``opponent_random_move_prob`` set, each task's opponent is drawn from that range,
    stratified over the step's groups.

    Raises:
        ValueError: as :func:`textgym.builder.env_factory` (unknown id, kwargs the env rejects,
            an opponent range for an env without a seeded opponent).
    """
    opponents = config.opponent_random_move_prob
    recipe = EnvRecipe(
        config.env_id,
        dict(config.env_kwargs),
        tuple(config.wrappers),
        opponent_random_move_prob=None if opponents is None else tuple(opponents),
        groups=config.groups_per_step,
    )
    _, probe = env_factory(recipe)  # the one probe: its checks, stop strings and step limit
    steps = probe.spec.max_episode_steps if probe.spec is not None else None
    stop = probe.unwrapped.stop_strings
    settings = dict(probe.unwrapped.evaluation_settings)
    probe.close()
    make = recipe.make
    if config.env_url:  # the same env, played on textgym serve servers
        make = served_env_factory(
            config.env_url, config.env_id, dict(config.env_kwargs), config.wrappers
        )
    return TrainingEnv(make, stop, int(steps or 1), opponents is not None, settings)


def rollout_step(
    env: TrainingEnv,
    policy: HFPolicy,
    config: GRPOConfig,
    step: int,
    ctx: DistributedContext,
    *,
    opponents: list[str] | None = None,
    round_: int = 0,
) -> list[Trajectory]:
    """Play step ``step``'s M tasks x G copies (``step`` counts from 0); a task's copies share
    seed and opponent stratum, and with ``opponents`` (one style per task, all ranks' tasks)
    the opponent style (``reset(options={"opponent": ...})``). ``round_`` >= 1 plays an extra
    round of dynamic sampling on its own tasks
    (:func:`textgym.algos.dynamic_sampling.round_seed`).

    With more than one rank, this rank plays its contiguous ``1 / world_size`` of the episodes
    (whole groups), its sampling RNG re-seeded from ``(seed, step, rank)``, so a checkpoint
    needs no per-rank sampling state and resumes on any number of ranks.
    """
    seeds, options = _step_tasks(env, config, step, opponents, round_)
    mine = rank_slice(config.batch_size, ctx)  # whole groups: batch_size % world_size == 0
    if ctx.distributed:
        policy.set_sampling_state(random.Random(f"{config.seed}/{step}/{ctx.rank}").getstate())
    # A bar for the step's rollouts in a terminal only (transient): in a log, the step's own
    # progress line follows within the step, and a line per 10% of every step would bury it.
    with EpisodeProgress(
        f"step {step + 1}/{config.steps}: rollouts",
        enabled=config.progress and ctx.is_main and sys.stderr.isatty(),
    ) as progress:
        progress.add_total(len(seeds[mine]))
        return rollout(
            env.make,
            policy,
            seeds[mine],
            batch_size=config.rollout_batch_size,
            options=options[mine] if env.stratified or opponents else None,
            token_level=True,
            env_workers=config.env_workers,
            on_episode_end=progress.episode_done,
            on_turn=progress.actions,
        )


def step_tasks(
    env: TrainingEnv,
    config: GRPOConfig,
    step: int,
    ctx: DistributedContext,
    *,
    opponents: list[str] | None = None,
    round_: int = 0,
) -> list[tuple[int, dict[str, Any] | None]]:
    """The seed and reset options (``None``: none) of each episode this rank plays in
    :func:`rollout_step` with the same arguments, in its order."""
    seeds, options = _step_tasks(env, config, step, opponents, round_)
    mine = rank_slice(config.batch_size, ctx)
    given = env.stratified or bool(opponents)
    return [(seed, option if given else None) for seed, option in zip(seeds[mine], options[mine])]


def _step_tasks(
    env: TrainingEnv,
    config: GRPOConfig,
    step: int,
    opponents: list[str] | None,
    round_: int,
) -> tuple[GroupSeeds, list[dict[str, Any]]]:
    """Every rank's seeds and reset options of a step's round."""
    first = round_seed(
        config.seed, step, round_, config.groups_per_step, config.dynamic_sampling_rounds
    )
    seeds = GroupSeeds(first, config.batch_size, config.group_size)
    options = [
        ({"episode_index": i // config.group_size} if env.stratified else {})
        | ({"opponent": opponents[i // config.group_size]} if opponents else {})
        for i in range(config.batch_size)
    ]
    return seeds, options


def rollout_policies(learner: Learner, env: TrainingEnv) -> tuple[HFPolicy, HFPolicy]:
    """The sampling policy of the rollouts and the evaluation policy, both on the learner's
    model (they see every update)."""
    config = learner.config
    common = {
        "max_new_tokens": config.max_new_tokens,
        "stop": list(env.stop),
        "batch_size": config.rollout_batch_size,
    }
    make: Any = HFPolicy
    model = learner.model
    if bf16_rollouts(learner):  # both sample a bfloat16 copy, refreshed after each update
        make = functools.partial(SnapshotPolicy, BF16Snapshot(learner.model))
        model = None
    policy = make(
        model,
        learner.tokenizer,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=config.seed,
        share_prefill=config.share_prefix,
        **common,
    )
    evaluator = make(
        model,
        learner.tokenizer,
        temperature=config.eval_temperature,
        seed=config.seed + 1,
        **common,
    )
    return policy, evaluator


def rollout_metrics(trajectories: list[Trajectory], ctx: DistributedContext) -> dict[str, float]:
    """Reward (mean and ``reward_std``, the population standard deviation of the episode
    returns), its components, outcomes and invalid rate of the training rollouts (of every
    rank's: their episodes are gathered without their messages and token ids and log-probs),
    and ``sampled_entropy``: minus the mean sampling log-prob per generated token, a Monte
    Carlo estimate of the sampler's per-token entropy (nats; at the sampling temperature, and
    lowered by ``top_p`` < 1) that every step has, skipped update or not."""
    surprise = [
        -sum(t.token_logprobs[i] for i, m in enumerate(t.loss_mask) if m) for t in trajectories
    ]
    sampled = [sum(surprise), float(sum(sum(t.loss_mask) for t in trajectories))]
    if ctx.distributed:
        sampled = all_reduce_sum(sampled, ctx)
        light = [
            dataclasses.replace(t, messages=[], token_ids=[], token_logprobs=[])
            for t in trajectories
        ]
        trajectories = [t for share in all_gather_objects(light, ctx) for t in share]
    summary = summarize(trajectories)
    metrics = {
        "reward_mean": summary["mean_return"],
        # Exact arithmetic: 0.0 for equal returns, and no overflow for returns near 1e308.
        "reward_std": statistics.pstdev(t.episode_return for t in trajectories),
        "sampled_entropy": sampled[0] / sampled[1] if sampled[1] else math.nan,
        "invalid_rate": summary["invalid_action_rate"],
        "length_truncated_rate": summary["length_truncated_rate"],
        "completion_tokens_mean": sum(sum(t.loss_mask) for t in trajectories) / len(trajectories),
    }
    metrics.update({f"reward/{k}": v for k, v in summary["reward_components"].items()})
    metrics.update({f"{k}_rate": v for k, v in summary["outcomes"].items()})
    members: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        if (name := member_of(traj.task_id)) is not None:
            members.setdefault(name, []).append(traj)
    for name, own in sorted(members.items()):
        metrics.update(member_metrics(name, own))
    return metrics


def member_metrics(name: str, trajectories: list[Trajectory]) -> dict[str, float]:
    """The metrics of one mixture member's episodes (``textgym/Mixture-v0``), as
    ``NAME/reward_mean``, ``NAME/reward_std`` (population standard deviation of its returns),
    ``NAME/invalid_rate``, ``NAME/completion_tokens_mean`` (generated tokens per episode),
    ``NAME/episodes`` and ``NAME/flat_group_rate`` (the share of its groups, episodes of one
    seed, whose returns are all equal: no advantage to learn from)."""
    summary = summarize(trajectories)
    groups: dict[int | None, list[float]] = {}
    for traj in trajectories:
        groups.setdefault(traj.seed, []).append(traj.episode_return)
    flat = sum(len(set(returns)) == 1 for returns in groups.values())
    return {
        f"{name}/reward_mean": summary["mean_return"],
        f"{name}/reward_std": statistics.pstdev(t.episode_return for t in trajectories),
        f"{name}/invalid_rate": summary["invalid_action_rate"],
        f"{name}/completion_tokens_mean": sum(sum(t.loss_mask) for t in trajectories)
        / len(trajectories),
        f"{name}/episodes": float(len(trajectories)),
        f"{name}/flat_group_rate": flat / len(groups),
    }


def evaluate(
    make_env: Callable[[], gym.Env],
    policy: HFPolicy,
    *,
    episodes: int,
    seed: int = 0,
    batch_size: int = 64,
    progress: EpisodeProgress | None = None,
    settings: Mapping[str, Any] | None = None,
    check: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Evaluate a policy in each of the env's named evaluation settings
    (``TextEnv.evaluation_settings``: tic-tac-toe's ``random`` and ``optimal`` opponents,
    ``random_move_prob`` 1 and 0), or once with the env's own settings (named ``eval``) for an
    env that names none. ``check`` (if given) runs after every batched turn; what it raises
    (the trainer's time limit) ends the evaluation.

    Evaluation seeds start at 10**9 + seed * 10**6, away from every training task.
    ``progress`` (if given) counts the episodes of every setting as they finish. ``settings``:
    the env's ``evaluation_settings`` when the caller has read them (``None``: read from a probe
    env).

    Returns:
        ``{"<setting>/return_mean", "<setting>/invalid_rate"}`` per setting, plus
        ``"<setting>/<outcome>_rate"`` for each outcome in a named setting (e.g.
        ``"random/win_rate"``); rates in [0, 1].
    """
    seeds = [_EVAL_SEED_OFFSET + seed * 10**6 + i for i in range(episodes)]
    if settings is None:
        probe = make_env()
        settings = dict(probe.unwrapped.evaluation_settings)
        probe.close()
    settings = dict(settings) or {"eval": None}
    metrics: dict[str, float] = {}
    if progress is not None:
        progress.add_total(len(seeds) * len(settings))

    def on_turn(actions: int) -> None:
        if progress is not None:
            progress.actions(actions)
        if check is not None:
            check()

    for name, options in settings.items():
        summary = summarize(
            rollout(
                make_env,
                policy,
                seeds,
                batch_size=batch_size,
                options=options,
                on_episode_end=progress.episode_done if progress is not None else None,
                on_turn=on_turn,
            )
        )
        metrics[f"{name}/return_mean"] = summary["mean_return"]
        metrics[f"{name}/invalid_rate"] = summary["invalid_action_rate"]
        if options is not None:
            metrics.update({f"{name}/{k}_rate": v for k, v in summary["outcomes"].items()})
    return metrics
