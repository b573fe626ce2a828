"""``textgym train --dry-run``: one step's rollouts, no update, and what they say about
whether the run would learn (:func:`dry_run`).

It answers before a run is spent: the share of groups whose rewards are all equal (which an
update skips), the reward spread, the invalid-action rate and the sampler's entropy, and the
hint of :func:`~textgym.algos.learnability.hint_rule`. Nothing is written to ``output_dir``.
"""

from __future__ import annotations

import sys

import torch

from textgym.algos.advantages import group_advantages, zero_variance_groups
from textgym.algos.distributed import init_distributed
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.grpo_rollouts import (
    rollout_metrics,
    rollout_policies,
    rollout_step,
    training_env,
)
from textgym.algos.grpo_update import finite_returns
from textgym.algos.learnability import hint_rule, member_hint_rules
from textgym.algos.learner import make_learner

__all__ = ["dry_run"]


def dry_run(config: GRPOConfig) -> dict[str, float]:
    """``textgym train --dry-run``: play one step's rollouts (in this process, step 1's tasks),
    update nothing, print their diagnostics and the learnability hint on stderr, and return the
    diagnostics; nothing is written to ``output_dir``.

    Returns:
        :func:`rollout_metrics` of the episodes, with ``zero_variance_fraction``,
        ``advantage_abs_mean`` and ``skipped_update`` (1.0 when every group had equal rewards:
        the update would be skipped).

    Raises:
        ValueError: as :func:`train` (an env or model that cannot be used; an episode return
            that is NaN or inf).
    """
    torch.manual_seed(config.seed)
    ctx = init_distributed(config.device)
    env = training_env(config)
    learner = make_learner(config, max_turns=env.max_turns, device=ctx.device, dist=ctx)
    policy, _ = rollout_policies(learner, env)
    trajectories = rollout_step(env, policy, config, 0, ctx)
    rewards = torch.tensor(finite_returns(trajectories), dtype=torch.float64)  # [B]
    flat = zero_variance_groups(rewards, config.group_size)  # [M] bool
    advantages = group_advantages(rewards, config.group_size, config.scale_rewards)  # [B]
    metrics = rollout_metrics(trajectories, ctx) | {
        "zero_variance_fraction": float(flat.float().mean()),
        "advantage_abs_mean": float(advantages.abs().mean()),
        "skipped_update": float(bool(flat.all())),
    }
    if ctx.is_main:
        rule = hint_rule(metrics)
        lines = _dry_run_lines(config, metrics, None if rule is None else rule[1])
        lines += [
            f"hint ({name}): {hint}" for name, (_, hint) in member_hint_rules(metrics).items()
        ]
        for line in lines:
            print(line, file=sys.stderr, flush=True)
    return metrics


def _dry_run_lines(config: GRPOConfig, metrics: dict[str, float], hint: str | None) -> list[str]:
    """What :func:`dry_run` prints: the measured state, then the hint."""
    state = (
        f"dry run: {config.batch_size} episodes in {config.groups_per_step} groups of "
        f"{config.group_size}: reward mean {metrics['reward_mean']:.4g} "
        f"(std {metrics['reward_std']:.4g}), "
        f"{metrics['zero_variance_fraction']:.0%} of groups had equal rewards, "
        f"invalid actions {metrics['invalid_rate']:.0%}, "
        f"sampled entropy {metrics['sampled_entropy']:.3g} nats/token, "
        f"|advantage| mean {metrics['advantage_abs_mean']:.3g}"
    )
    verdict = (
        f"hint: {hint}" if hint else "hint: none (the groups' rewards differ: GRPO has signal)"
    )
    return [state, verdict]
