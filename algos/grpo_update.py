"""One GRPO update (:func:`update`): group advantages, then ``num_iterations`` optimizer steps
of the clipped surrogate over micro-batches, with no host sync inside a micro-batch.

Advantages per group (:func:`~textgym.algos.advantages.group_advantages`; groups whose rewards
are all equal carry no signal and are left out of the backward pass), then the surrogate of the
chosen ``loss_type`` (:func:`~textgym.algos.losses.policy_loss`), gradients accumulated over
micro-batches (``micro_batch_size`` right-padded sequences, or rows of ``micro_batch_tokens``
packed tokens) with a normaliser of the whole batch, so the update does not depend on how the
batch is split. The loop around it is :mod:`textgym.algos.grpo`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from textgym.algos.advantages import group_advantages, zero_variance_groups
from textgym.algos.batches import TokenBatch, make_token_batch, micro_batch_rows, sequence_log_probs
from textgym.algos.common import clip_gradients
from textgym.algos.distributed import all_gather_objects, all_reduce_gradients, all_reduce_sum
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.learner import Learner, sampled_elsewhere
from textgym.algos.losses import LOSS_VARIANTS, loss_normalizer, policy_loss
from textgym.algos.model_loading import autocast
from textgym.errors import NonFiniteError
from textgym.rollout import Trajectory

__all__ = ["AdvantageOverflowError", "backward", "finite_returns", "update", "update_shares_prefix"]


def update(learner: Learner, trajectories: list[Trajectory]) -> dict[str, float]:
    """One GRPO update on a batch of trajectories: advantages, then ``num_iterations`` optimizer
    steps on the groups that carry signal.

    With more than one rank (``learner.dist``), every rank calls this with its own share of
    the batch, whole groups only; the update and the metrics are those of one process over
    all the ranks' trajectories in rank order (see :mod:`textgym.algos.distributed`).

    Args:
        learner: The learner state; its model, optimizer, scheduler and guard change.
        trajectories: ``B = M x G`` token-level trajectories (``rollout(..., token_level=True)``),
            consecutive runs of ``G = config.group_size`` forming a group.

    Returns:
        The step's metrics as floats: ``zero_variance_fraction``, ``advantage_abs_mean``,
        ``loss``, ``grad_norm``, ``clip_fraction``, ``ratio_mean``, ``kl`` (nats per token),
        ``entropy`` (nats per token), ``loss_tokens``, ``skipped_update`` (1.0 when every group
        had equal rewards: then the update metrics are ``NaN``, written as null, so every row
        has them) and ``sampler_logprob_gap`` (mean |sampling - learner log-prob| per loss
        token before the update; ``NaN`` for in-process rollouts with ``num_iterations`` 1,
        where the two are the same numbers);
        ``nonfinite_skipped`` (1.0 when the guard skipped the step) when an update ran.

    Raises:
        ValueError: an episode return is NaN or inf (an env or wrapper bug; nothing is updated),
            or ``B`` (a rank's share) is not a multiple of the group size.
        FloatingPointError: from the guard when steps keep having a non-finite loss or gradient.
    """
    config = learner.config
    rewards, mine = _batch_returns(trajectories, learner)  # [B] float64 (all ranks), own rows
    advantages = _loss_advantages(rewards, config)  # [B] float32
    flat = zero_variance_groups(rewards, config.group_size)  # [M] bool
    keep = (~flat).repeat_interleave(config.group_size)  # [B] bool
    metrics = {
        "zero_variance_fraction": float(flat.float().mean()),
        "advantage_abs_mean": float(advantages.abs().mean()),
    }
    if not keep.any():  # same keys every step (NaN is written as null): plots have no gaps
        return metrics | dict.fromkeys(_UPDATE_KEYS, math.nan) | _SKIPPED
    advantages, keep = advantages[mine], keep[mine]  # [B_rank] each: this rank's rows
    kept = [t for t, k in zip(trajectories, keep.tolist()) if k]
    micro, normalizer = _micro_batches(learner, kept, advantages[keep])  # advantages [B_kept]
    old, ref = _fixed_log_probs(learner, micro)
    gap_in_step = sampled_elsewhere(learner) and config.num_iterations == 1
    if gap_in_step:
        # Other weights sampled (a bfloat16 copy, a quantized server, perhaps an update
        # behind): the ratio is taken against their log-probs, the behaviour policy. The first
        # optimizer step's log-probs are the learner's before the update, so the gap is
        # measured there, without another forward pass.
        old = [mb.sampler_logprobs for mb, _ in micro]
    for iteration in range(config.num_iterations):
        stats = _optimizer_step(learner, micro, old, ref, normalizer, measure_gap=gap_in_step)
        learner.scheduler.step()
        if iteration == 0:
            metrics.update(stats)
    metrics["skipped_update"] = 0.0
    if not gap_in_step:
        metrics["sampler_logprob_gap"] = _sampler_gap(learner, micro, old)
    return metrics


def _micro_batches(
    learner: Learner, kept: list[Trajectory], advantages: torch.Tensor
) -> tuple[_MicroBatches, float]:
    """This rank's kept trajectories and their advantages (``[B_kept]``) as micro-batches on
    the device (padded micro-batches of ``micro_batch_size``, or packed rows of
    ``micro_batch_tokens``), and the loss normaliser of the whole batch."""
    config = learner.config
    batch = None
    if kept:  # a rank whose groups all have equal rewards still joins the collectives
        batch = make_token_batch(
            [t.token_ids for t in kept],
            [_loss_mask(t, config.mask_truncated) for t in kept],
            [t.token_logprobs for t in kept],
            pad_token_id=learner.pad_token_id,
        )
    normalizer = _normalizer(learner, batch)
    micro = [
        (batch.select(r).to(learner.device), advantages[r].to(learner.device))
        for r in micro_batch_rows(batch, config)
    ]
    return micro, normalizer


def _batch_returns(trajectories: list[Trajectory], learner: Learner) -> tuple[torch.Tensor, slice]:
    """The episode returns of the whole batch, ``[B]`` float64 (every rank's rows, in rank
    order: any finite return fits, up to 1.8e308), and the slice of them that
    ``trajectories`` (this rank's share) are.

    Raises:
        ValueError: a return is NaN or inf; with more than one rank, a share that splits a
            group.
    """
    returns = finite_returns(trajectories)
    group, ctx = learner.config.group_size, learner.dist
    if ctx.distributed and len(returns) % group:
        raise ValueError(
            f"Expected rank {ctx.rank}'s share of the batch to be whole groups of {group}, got "
            f"{len(returns)} trajectories; give each rank whole groups"
        )
    shares = all_gather_objects(returns, ctx)
    start = sum(len(share) for share in shares[: ctx.rank])
    rewards = torch.tensor([r for share in shares for r in share], dtype=torch.float64)  # [B]
    return rewards, slice(start, start + len(returns))


class AdvantageOverflowError(NonFiniteError):
    """An advantage beyond float32, the loss's dtype (``scale_rewards='none'`` with huge
    rewards)."""


def _loss_advantages(rewards: torch.Tensor, config: GRPOConfig) -> torch.Tensor:
    """The group advantages of ``rewards`` (``[B]`` float64, so any finite return is exact),
    as the ``[B]`` float32 the loss is computed in.

    With ``scale_rewards`` group or batch an advantage is at most ``sqrt(G)`` in size, so any
    finite rewards fit; with none (Dr. GRPO) it is in reward units.

    Raises:
        AdvantageOverflowError: with ``scale_rewards='none'``, an advantage beyond float32's
            range (3.4e38).
    """
    advantages = group_advantages(rewards, config.group_size, config.scale_rewards)  # [B] f64
    loss_advantages = advantages.float()  # [B] float32
    if not bool(torch.isfinite(loss_advantages).all()):
        row = int((~torch.isfinite(loss_advantages)).nonzero()[0, 0])
        raise AdvantageOverflowError(
            f"The advantage of row {row} is {float(advantages[row]):.3g} reward units "
            f"(reward {float(rewards[row]):.3g}) with scale_rewards='none', beyond float32, "
            f"the dtype of the loss (largest {torch.finfo(torch.float32).max:.3g}); use "
            "--scale-rewards group or batch (with a --loss-type that allows it), or make the "
            "env's rewards smaller (their reward components, or a wrapper that scales them)"
        )
    return loss_advantages


def _normalizer(learner: Learner, batch: TokenBatch | None) -> float:
    """The loss normaliser of the whole batch (:func:`loss_normalizer`).

    With more than one rank it is all-reduced before the backward pass: every row of
    ``LOSS_VARIANTS`` counts something per sequence (sequences, loss tokens, or sequences x
    ``max_loss_tokens``), so the sum of the ranks' counts is the count over the whole batch.
    """
    config, ctx = learner.config, learner.dist
    if not ctx.distributed:
        return loss_normalizer(config.loss_type, batch.loss_mask, learner.max_loss_tokens)
    count = LOSS_VARIANTS[config.loss_type].normalizer
    local = 0.0 if batch is None else count(batch.loss_mask, learner.max_loss_tokens)
    return max(1.0, all_reduce_sum([local], ctx)[0])


# Metrics of an update that runs no optimizer step (every group had equal rewards).
_UPDATE_KEYS = ("loss", "grad_norm", "clip_fraction", "ratio_mean", "kl", "entropy")
_SKIPPED = {"sampler_logprob_gap": math.nan, "loss_tokens": 0.0, "skipped_update": 1.0}


def finite_returns(trajectories: list[Trajectory]) -> list[float]:
    """The episode returns; NonFiniteError naming the first that is NaN or inf."""
    returns = [t.episode_return for t in trajectories]
    bad = [(i, r) for i, r in enumerate(returns) if not math.isfinite(r)]
    if bad:
        i, value = bad[0]
        raise NonFiniteError(
            f"Episode {i} of this step (task {trajectories[i].task_id!r}) returned {value}; "
            f"{len(bad)} of {len(returns)} returns are not finite, so no update was made. "
            "Rewards come from the env and its wrappers: check their reward components."
        )
    return returns


def _loss_mask(traj: Trajectory, mask_truncated: bool) -> list[int]:
    """The trajectory's loss mask, all zeros when it must not train (overlong filtering)."""
    if mask_truncated and "length" in traj.finish_reasons:
        return [0] * len(traj.loss_mask)
    return traj.loss_mask


_MicroBatches = list[tuple[TokenBatch, torch.Tensor]]  # (tokens, advantages [b]) on the device


@torch.no_grad()
def _fixed_log_probs(
    learner: Learner, micro: _MicroBatches
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Old log-probs (only when the batch is reused) and reference log-probs (only if beta > 0),
    ``[b, L-1]`` float32 per micro-batch."""
    config = learner.config
    old: list[torch.Tensor | None] = [None] * len(micro)
    ref: list[torch.Tensor | None] = [None] * len(micro)
    for i, (mb, _adv) in enumerate(micro):
        with autocast(learner.device, config.bf16, cpu_bf16=config.cpu_bf16):
            if config.num_iterations > 1:
                old[i] = _log_probs(learner.model, mb, config)[0]  # [b, L-1]
            if config.beta > 0:
                ref[i] = _reference_log_probs(learner, mb)  # [b, L-1]
    return old, ref


def _log_probs(
    model: Any, mb: TokenBatch, config: GRPOConfig, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return sequence_log_probs(
        model,
        mb,
        temperature=config.temperature,
        chunk_size=config.logprob_chunk_size,
        with_entropy=with_entropy,
        share_prefix=update_shares_prefix(config, mb.input_ids.device),
        packed=config.micro_batch_tokens is not None,
    )


def update_shares_prefix(config: GRPOConfig, device: torch.device) -> bool:
    """Whether the update runs a group's shared prompt once (``config.share_prefix``, CPU only).

    On CUDA the update forwards padded rows whatever ``share_prefix`` says: the shared-prompt
    pass took 2.10 s against padding's 1.13 s for 256 episodes of random-weight Gemma 3 270M on
    an H200 (benchmarks/results/gpu_h200/run3/update_packing.json), while on the 2-core CPU it
    was the faster of the two. The rollout's prefill shares the prompt on every device.
    """
    return config.share_prefix and device.type == "cpu"


def _reference_log_probs(learner: Learner, mb: TokenBatch) -> torch.Tensor:
    with learner.start_policy() as reference:
        return _log_probs(reference, mb, learner.config)[0]


#: The sums an optimizer step accumulates over its micro-batches, in this order.
_SUMS = ("loss", "clipped_tokens", "tokens", "ratio_sum", "kl_sum", "entropy_sum", "gap")


def _optimizer_step(
    learner: Learner,
    micro: _MicroBatches,
    old: list[torch.Tensor | None],
    ref: list[torch.Tensor | None],
    normalizer: float,
    *,
    measure_gap: bool = False,
) -> dict[str, float]:
    """One optimizer step, gradients accumulated over the micro-batches; skipped (and counted
    in ``nonfinite_skipped``) when the loss or gradient norm is not finite. With
    ``measure_gap``, also ``sampler_logprob_gap``: mean |sampler - learner log-prob| per loss
    token, the learner's taken before this step changes it."""
    learner.optimizer.zero_grad(set_to_none=True)
    # Sums stay on the device: one host read per optimizer step, not six per micro-batch.
    sums = torch.zeros(len(_SUMS) + 1, dtype=torch.float64, device=learner.device)
    for (mb, adv), old_logp, ref_logp in zip(micro, old, ref):
        loss_inputs = (mb, adv, old_logp, ref_logp)
        backward(learner, loss_inputs, sums, normalizer=normalizer, measure_gap=measure_gap)
    totals, norm, stepped = _step(learner, sums)
    tokens = max(totals["tokens"], 1.0)
    gap = {"sampler_logprob_gap": totals["gap"] / tokens} if measure_gap else {}
    return gap | {
        "loss": totals["loss"],
        "grad_norm": norm,
        "nonfinite_skipped": 0.0 if stepped else 1.0,
        "clip_fraction": totals["clipped_tokens"] / tokens,
        "ratio_mean": totals["ratio_sum"] / tokens,
        "kl": totals["kl_sum"] / tokens,
        "entropy": totals["entropy_sum"] / tokens,
        "loss_tokens": totals["tokens"],
    }


def backward(
    learner: Learner,
    loss_inputs: tuple[TokenBatch, torch.Tensor, torch.Tensor | None, torch.Tensor | None],
    sums: torch.Tensor,
    *,
    normalizer: float,
    measure_gap: bool,
) -> None:
    """The forward and backward pass of one micro-batch ``(tokens, advantages [b], old
    log-probs, reference log-probs)``; its terms of :data:`_SUMS` added to ``sums`` (in place,
    on the device)."""
    config = learner.config
    mb, adv, old_logp, ref_logp = loss_inputs
    with autocast(learner.device, config.bf16, cpu_bf16=config.cpu_bf16):
        logp, entropy = _log_probs(learner.model, mb, config, with_entropy=True)  # [b, L-1] each
    old_logp = logp.detach() if old_logp is None else old_logp  # mu = 1: ratio is 1 in value
    loss, stats = policy_loss(
        logp,
        old_logp,
        adv,
        mb.loss_mask,
        loss_type=config.loss_type,
        normalizer=normalizer,
        epsilon_low=config.epsilon_low,
        epsilon_high=config.epsilon_high,
        ref_logp=ref_logp,
        beta=config.beta,
    )
    loss.backward()
    terms = [loss.detach(), *(stats[key] for key in _SUMS[1:5])]
    terms.append((entropy * mb.loss_mask).sum())
    zero = logp.new_zeros(())  # [] on the device: no scalar copied from the host per pass
    gap = (mb.sampler_logprobs - logp.detach()).abs() * mb.loss_mask if measure_gap else zero
    terms.append(torch.as_tensor(gap).sum())
    sums[: len(_SUMS)] += torch.stack([torch.as_tensor(t).to(sums) for t in terms])


def _step(learner: Learner, sums: torch.Tensor) -> tuple[dict[str, float], float, bool]:
    """The guarded optimizer step on the accumulated gradients: the totals of :data:`_SUMS`
    (over every rank), the gradient norm, and whether the step was taken."""
    config = learner.config
    params = [p for p in learner.model.parameters() if p.requires_grad]
    if learner.dist.distributed:  # the whole batch's gradient and sums, before clipping
        all_reduce_gradients(params, learner.dist)
        totals = dict(zip(_SUMS, all_reduce_sum(sums[: len(_SUMS)].tolist(), learner.dist)))
        norm, stepped = learner.guard.step(
            learner.optimizer, params, totals["loss"], config.max_grad_norm
        )
    else:
        sums[-1] = clip_gradients(params, config.max_grad_norm)
        *values, norm = sums.tolist()  # the one host read
        totals = dict(zip(_SUMS, values))
        norm, stepped = learner.guard.step(
            learner.optimizer, params, totals["loss"], config.max_grad_norm, grad_norm=norm
        )
    return totals, norm, stepped


def _sampler_gap(learner: Learner, micro: _MicroBatches, old: list[torch.Tensor | None]) -> float:
    """Mean |sampling log-prob - training log-prob| on loss tokens of the whole batch (NaN when
    not recomputed: ``num_iterations`` 1 with in-process rollouts)."""
    if any(o is None for o in old):
        return float("nan")
    gap = sum(
        float(((mb.sampler_logprobs - o).abs() * mb.loss_mask).sum())
        for (mb, _), o in zip(micro, old)
    )
    tokens = sum(float(mb.loss_mask.sum()) for mb, _ in micro)
    if learner.dist.distributed:
        gap, tokens = all_reduce_sum([gap, tokens], learner.dist)
    return gap / max(tokens, 1.0)
