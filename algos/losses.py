"""GRPO-family maths as small pure torch functions: KL, the table of policy losses, normalisers.

The GRPO trainer samples ``G`` completions per prompt, scores them, turns the rewards into
group-relative advantages (:func:`~textgym.algos.advantages.group_advantages`), and
minimises one of five clipped policy-gradient losses (:func:`policy_loss`: GRPO, DAPO, Dr. GRPO,
GSPO, CISPO, the rows of :data:`LOSS_VARIANTS`). Losses are written so that gradient
accumulation is exact: the normaliser is computed once over the full batch
(:func:`loss_normalizer`) and every micro-batch returns ``sum of its terms / normaliser``, so
summing micro-batch gradients gives the full-batch gradient whatever the micro-batch size.
:func:`~textgym.algos.token_log_probs.selected_log_probs` computes the log-probability of chosen
tokens from final hidden states in chunks, so that full-vocabulary fp32 logits never exist for
more than one chunk. Shapes use ``B`` sequences (``num_groups * G``, consecutive rows form a
group), ``T`` token positions, ``H`` hidden size and ``V`` vocabulary size. Needs the ``llm``
extra (torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from textgym.algos.advantages import SCALE_REWARDS

__all__ = [
    "LOSS_TYPES",
    "LOSS_VARIANTS",
    "LossType",
    "LossVariant",
    "k3_kl",
    "loss_normalizer",
    "policy_loss",
]


# --------------------------------------------------------------------------------------------
# KL and normalisers
# --------------------------------------------------------------------------------------------


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of ``KL(policy || reference)`` on tokens sampled from the policy.

    ``k3 = exp(d) - d - 1`` with ``d = ref_logp - logp`` (Schulman 2020, "Approximating KL
    divergence"): unbiased, never negative, low variance. Computed as ``expm1(d) - d`` and
    clamped at 0 so float rounding cannot make it negative.

    Args:
        logp: ``[B, T]`` float, policy log-probs of the sampled tokens (nats).
        ref_logp: ``[B, T]`` float, reference-model log-probs of the same tokens (nats).

    Returns:
        ``[B, T]`` float, KL estimate per token (nats), ``>= 0``; differentiable w.r.t. both.

    Raises:
        ValueError: the shapes differ.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"Expected ref_logp of the same shape as logp {list(logp.shape)}, got "
            f"{list(ref_logp.shape)}; score the same completion tokens with both models"
        )
    delta = ref_logp - logp  # [B, T] float
    return (torch.expm1(delta) - delta).clamp_min(0.0)  # [B, T] float


def _sequence_count(mask: Tensor, max_completion_tokens: int) -> float:
    """Number of sequences ``B`` (GRPO, GSPO: sum of per-sequence token means over ``B``)."""
    return float(mask.shape[0])


def _token_count(mask: Tensor, max_completion_tokens: int) -> float:
    """Number of loss tokens in the batch (DAPO, CISPO: token-level mean)."""
    return float(torch.count_nonzero(mask).item())


def _constant_count(mask: Tensor, max_completion_tokens: int) -> float:
    """``B * max_completion_tokens`` (Dr. GRPO: a constant, length-independent normaliser)."""
    return float(mask.shape[0] * max_completion_tokens)


# --------------------------------------------------------------------------------------------
# Policy losses
# --------------------------------------------------------------------------------------------


class _Surrogate(NamedTuple):
    """What a loss variant computes per token, before masking and reduction."""

    terms: Tensor  # [B, T] float, per-token loss terms (with grad)
    ratio: Tensor  # [B, T] float, importance ratio before clipping (no grad)
    clipped: Tensor  # [B, T] bool, where the clip / truncation is active


def _clipped_objective(
    ratio: Tensor, adv: Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic clipped surrogate, negated; and where the clipped branch wins.

    Args:
        ratio: ``[B, T]`` float importance ratio (with grad).
        adv: ``[B, 1]`` float advantages.
        epsilon_low: lower clip width, ratio floor ``1 - epsilon_low``.
        epsilon_high: upper clip width, ratio ceiling ``1 + epsilon_high``.

    Returns:
        ``terms`` ``[B, T]`` float ``-min(r*A, clip(r)*A)`` and ``clipped`` ``[B, T]`` bool, true
        where the clipped branch is strictly smaller (the token gets no gradient).
    """
    clipped_ratio = ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)  # [B, T] float
    terms = -torch.minimum(ratio * adv, clipped_ratio * adv)  # [B, T] float
    high = (adv > 0) & (ratio > 1.0 + epsilon_high)  # [B, T] bool
    low = (adv < 0) & (ratio < 1.0 - epsilon_low)  # [B, T] bool
    return terms, (high | low).detach()


def _token_ratio_surrogate(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float
) -> _Surrogate:
    """GRPO / DAPO / Dr. GRPO: per-token ratio ``exp(logp - old_logp)`` in the clipped surrogate."""
    ratio = torch.exp(logp - old_logp)  # [B, T] float
    terms, clipped = _clipped_objective(ratio, adv, eps_low, eps_high)
    return _Surrogate(terms, ratio.detach(), clipped)


def _gspo_surrogate(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float
) -> _Surrogate:
    """GSPO-token: length-normalised sequence ratio ``s_i``, gradient through each token.

    ``s_i = exp(mean_t(logp - old_logp))`` over the sequence's mask tokens; the per-token ratio
    ``sg(s_i) * exp(logp_t - sg(logp_t))`` equals ``s_i`` in value, so clipping is decided per
    sequence, while its gradient is ``s_i * grad(logp_t)`` (Zheng et al. 2025, GSPO, "GSPO-token").
    """
    lengths = mask.sum(dim=1).clamp_min(1.0)  # [B] float
    log_seq_ratio = ((logp - old_logp) * mask).sum(dim=1) / lengths  # [B] float
    seq_ratio = torch.exp(log_seq_ratio).detach()  # [B] float
    ratio = seq_ratio[:, None] * torch.exp(logp - logp.detach())  # [B, T] float
    terms, clipped = _clipped_objective(ratio, adv, eps_low, eps_high)
    return _Surrogate(terms, ratio.detach(), clipped)


def _cispo_surrogate(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float
) -> _Surrogate:
    """CISPO: REINFORCE with a truncated, stop-gradient importance weight (MiniMax-M1, 2025).

    ``term = -sg(min(r, 1 + eps_high)) * A * logp``: every token keeps a gradient (no token is
    dropped by clipping, unlike PPO), only its weight is capped; there is no lower bound.
    """
    ratio = torch.exp(logp - old_logp).detach()  # [B, T] float
    weight = ratio.clamp(max=1.0 + eps_high)  # [B, T] float, no grad
    terms = -weight * adv * logp  # [B, T] float
    return _Surrogate(terms, ratio, ratio > 1.0 + eps_high)


def _sequence_mean_sum(terms: Tensor, mask: Tensor) -> Tensor:
    """Sum over sequences of each sequence's token mean (empty sequences give 0)."""
    lengths = mask.sum(dim=1).clamp_min(1.0)  # [B] float
    return ((terms * mask).sum(dim=1) / lengths).sum()  # [] float


def _token_sum(terms: Tensor, mask: Tensor) -> Tensor:
    """Sum over all loss tokens of the micro-batch."""
    return (terms * mask).sum()  # [] float


# --------------------------------------------------------------------------------------------
# The loss table: one row per loss type
# --------------------------------------------------------------------------------------------


class LossVariant(NamedTuple):
    """One loss type: what it computes per token and how the terms become one number.

    Attributes:
        surrogate: ``(logp, old_logp, adv, mask, *, eps_low, eps_high) -> _Surrogate``,
            the per-token terms ``[B, T]`` before masking and reduction.
        reduction: ``(terms, mask) -> []``, how a micro-batch's terms are summed: the token mean
            per sequence summed over sequences, or the plain sum over tokens.
        normalizer: ``(mask, max_completion_tokens) -> float``, the denominator computed once
            over the full batch (:func:`loss_normalizer`).
        epsilons: default ``(epsilon_low, epsilon_high)`` clip range.
        scale_rewards: the advantage scalings
            (:func:`~textgym.algos.advantages.group_advantages`) the loss allows; the first is its
            default.
        source: the paper that defines it.
    """

    surrogate: Callable[..., _Surrogate]
    reduction: Callable[[Tensor, Tensor], Tensor]
    normalizer: Callable[[Tensor, int], float]
    epsilons: tuple[float, float]
    scale_rewards: tuple[str, ...]
    source: str


#: The loss types, one row each; :data:`LOSS_TYPES` and :data:`LossType` are derived from it.
#: Clip ranges: PPO's 0.2; DAPO's clip-higher 0.28; GSPO's sequence-level 3e-4 / 4e-4; CISPO
#: truncates the importance weight at 1 + 5.0 and has no lower bound.
LOSS_VARIANTS: dict[str, LossVariant] = {
    "grpo": LossVariant(
        _token_ratio_surrogate,
        _sequence_mean_sum,
        _sequence_count,
        (0.2, 0.2),
        SCALE_REWARDS,
        "DeepSeekMath GRPO, Shao et al. 2024",
    ),
    "dapo": LossVariant(
        _token_ratio_surrogate,
        _token_sum,
        _token_count,
        (0.2, 0.28),
        SCALE_REWARDS,
        "DAPO, Yu et al. 2025",
    ),
    "dr_grpo": LossVariant(
        _token_ratio_surrogate,
        _token_sum,
        _constant_count,
        (0.2, 0.2),
        ("none",),  # the std division biases updates toward too-easy and too-hard prompts
        "Dr. GRPO, Liu et al. 2025",
    ),
    "gspo": LossVariant(
        _gspo_surrogate,
        _sequence_mean_sum,
        _sequence_count,
        (3e-4, 4e-4),
        SCALE_REWARDS,
        "GSPO, Zheng et al. 2025",
    ),
    "cispo": LossVariant(
        _cispo_surrogate,
        _token_sum,
        _token_count,
        (0.0, 5.0),
        SCALE_REWARDS,
        "CISPO, MiniMax-M1, MiniMax 2025",
    ),
}

#: Every accepted ``loss_type``, in table order (the order the trainer's ``--help`` lists them).
LOSS_TYPES: tuple[str, ...] = tuple(LOSS_VARIANTS)
#: ``Literal`` of the table's keys (built at run time from :data:`LOSS_TYPES`, so the names are
#: written once; ``tyro`` and ``typing.get_args`` read it like a literal written out).
LossType = Literal[LOSS_TYPES]  # type: ignore[valid-type]


def loss_normalizer(loss_type: LossType, mask: Tensor, max_completion_tokens: int) -> float:
    """The denominator of :func:`policy_loss`, computed once over the FULL batch.

    Dividing every micro-batch's summed terms by this one number makes gradient accumulation
    exact: the summed micro-batch gradients equal the full-batch gradient for any split.

    Each loss type's normaliser is its row's ``normalizer`` in :data:`LOSS_VARIANTS`: ``B``
    when each sequence contributes its token mean, the number of loss tokens for a token-level
    mean, or the constant ``B * max_completion_tokens``.

    Args:
        loss_type: one of ``LOSS_TYPES``.
        mask: ``[B, T]`` bool or float, nonzero where a token carries loss; the whole batch.
        max_completion_tokens: the generation length limit ``L`` (tokens, ``>= 1``).

    Returns:
        The normaliser as a Python float, at least ``1.0`` (an all-zero mask gives ``1.0``).

    Raises:
        ValueError: unknown ``loss_type``, ``mask`` not 2-D, or ``max_completion_tokens < 1``.
    """
    if loss_type not in LOSS_VARIANTS:
        raise ValueError(f"Expected loss_type in {list(LOSS_TYPES)}, got {loss_type!r}")
    if mask.ndim != 2:
        raise ValueError(f"Expected mask of shape [B, T], got {list(mask.shape)}")
    if max_completion_tokens < 1:
        raise ValueError(f"Expected max_completion_tokens >= 1, got {max_completion_tokens}")
    return max(1.0, LOSS_VARIANTS[loss_type].normalizer(mask, max_completion_tokens))


def _check_shape(name: str, tensor: Tensor, expected: tuple[int, ...], hint: str) -> None:
    """Raise ``ValueError`` unless ``tensor.shape == expected``."""
    if tuple(tensor.shape) != expected:
        got = list(tensor.shape)
        raise ValueError(f"Expected {name} of shape {list(expected)}, got {got}; {hint}")


def _check_policy_shapes(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, ref_logp: Tensor | None
) -> None:
    """Raise ``ValueError`` unless the tensors of :func:`policy_loss` are ``[B, T]`` / ``[B]``."""
    if logp.ndim != 2:
        raise ValueError(f"Expected logp of shape [B, T], got {list(logp.shape)}")
    shape = tuple(logp.shape)
    _check_shape("old_logp", old_logp, shape, "give log-probs of the same tokens as logp")
    _check_shape("mask", mask, shape, "give one mask entry per token of logp")
    _check_shape("advantages", advantages, shape[:1], "give one advantage per sequence")
    if ref_logp is not None:
        _check_shape("ref_logp", ref_logp, shape, "give log-probs of the same tokens as logp")


def _check_policy_options(
    loss_type: str,
    *,
    normalizer: float,
    epsilon_low: float,
    epsilon_high: float,
    beta: float,
    has_ref: bool,
) -> None:
    """Raise ``ValueError`` on an unknown variant or an out-of-range hyperparameter."""
    if loss_type not in LOSS_VARIANTS:
        raise ValueError(f"Expected loss_type in {list(LOSS_TYPES)}, got {loss_type!r}")
    for name, value in (
        ("epsilon_low", epsilon_low),
        ("epsilon_high", epsilon_high),
        ("beta", beta),
    ):
        if value < 0:
            raise ValueError(f"Expected {name} >= 0, got {value}")
    if beta > 0 and not has_ref:
        raise ValueError(
            f"Expected ref_logp when beta > 0, got beta={beta} and ref_logp=None; "
            "pass reference-model log-probs or set beta=0"
        )
    if normalizer <= 0:
        raise ValueError(f"Expected normalizer > 0, got {normalizer}; use loss_normalizer()")


def _masked_sum(values: Tensor, weights: Tensor) -> Tensor:
    """``sum(values * weights)``, a 0-d tensor outside the graph (on the device: no host read)."""
    return (values.detach() * weights).sum()


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType,
    normalizer: float,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped policy-gradient loss of one micro-batch: ``sum of its terms / normalizer``.

    Per-token terms (``r = exp(logp - old_logp)``, ``A`` the sequence's advantage):

    * ``grpo``: ``-min(r*A, clip(r, 1-eps_low, 1+eps_high)*A)``, token mean per sequence, summed
      over sequences (DeepSeekMath GRPO, Shao et al. 2024).
    * ``dapo``: the same surrogate, summed over tokens; use ``epsilon_high > epsilon_low``
      ("clip-higher", 0.2 / 0.28 in the paper) (DAPO, Yu et al. 2025).
    * ``dr_grpo``: the same surrogate, summed over tokens; normaliser ``B * L`` (Dr. GRPO,
      Liu et al. 2025).
    * ``gspo``: the surrogate on the sequence ratio ``s_i = exp(mean_t(logp - old_logp))`` in its
      GSPO-token form, so clipping is per sequence (GSPO, Zheng et al. 2025).
    * ``cispo``: ``-sg(min(r, 1+eps_high)) * A * logp`` summed over tokens (CISPO, MiniMax-M1).

    With ``beta > 0`` each token adds ``beta * k3_kl(logp, ref_logp)`` before the reduction.
    Tokens with ``mask == 0`` (prompt, padding, env-written text) contribute nothing, even when
    their log-probs are ``inf`` or ``nan``. Pass the same ``normalizer`` (from
    :func:`loss_normalizer` over the full batch) to every micro-batch.

    Args:
        logp: ``[B, T]`` float32, current policy log-probs of the taken tokens (requires grad).
        old_logp: ``[B, T]`` float32, log-probs at sampling time / before the update (no grad).
        advantages: ``[B]`` float32, one advantage per sequence.
        mask: ``[B, T]`` bool or float; nonzero where the token carries loss (policy-generated).
        loss_type: one of ``LOSS_TYPES``.
        normalizer: ``> 0``, from :func:`loss_normalizer` over the full batch.
        epsilon_low: clip width below 1 (``>= 0``; unused by ``cispo``).
        epsilon_high: clip width above 1 (``>= 0``); ``cispo``'s weight cap is ``1 + epsilon_high``.
        ref_logp: ``[B, T]`` float32 reference-model log-probs; needed iff ``beta > 0``.
        beta: KL penalty coefficient (``>= 0``).

    Nothing here reads a tensor back to the host (the checks read shapes only), so a
    micro-batch's loss and its stats queue on an accelerator without waiting for it; the
    caller reads the stats once per optimizer step.

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float tensor; ``stats`` 0-d tensors of ``logp``'s
        dtype on its device, detached, SUMS over this micro-batch's mask tokens, to be added
        across micro-batches: ``"clipped_tokens"`` (tokens whose clip
        or truncation is active: PPO's clipped branch chosen, CISPO's weight capped),
        ``"tokens"`` (mask tokens), ``"ratio_sum"`` (importance ratio before clipping: per
        token, or the sequence ratio for ``gspo``) and ``"kl_sum"`` (k3 KL; 0 without
        ``ref_logp``).

    Raises:
        ValueError: unknown ``loss_type``; shapes other than ``[B, T]`` / ``[B]``; a negative
            epsilon or beta; ``beta > 0`` without ``ref_logp``; ``normalizer <= 0``.
    """
    _check_policy_options(
        loss_type,
        normalizer=normalizer,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        beta=beta,
        has_ref=ref_logp is not None,
    )
    _check_policy_shapes(logp, old_logp, advantages, mask, ref_logp)
    keep = mask != 0  # [B, T] bool
    weights = keep.to(logp.dtype)  # [B, T] float
    zeros = torch.zeros_like(logp)  # [B, T] float
    logp_kept = torch.where(keep, logp, zeros)  # [B, T] float
    old_kept = torch.where(keep, old_logp, zeros).detach()  # [B, T] float
    adv = advantages.detach().to(logp.dtype)[:, None]  # [B, 1] float
    variant = LOSS_VARIANTS[loss_type]
    surrogate = variant.surrogate(
        logp_kept, old_kept, adv, weights, eps_low=epsilon_low, eps_high=epsilon_high
    )
    terms = surrogate.terms  # [B, T] float
    kl_sum = zeros.new_zeros(())  # [] float
    if ref_logp is not None:
        kl = k3_kl(logp_kept, torch.where(keep, ref_logp, zeros).detach())  # [B, T] float
        kl_sum = _masked_sum(kl, weights)
        if beta > 0:
            terms = terms + beta * kl  # [B, T] float
    terms = torch.where(keep, terms, zeros)  # [B, T] float
    loss = variant.reduction(terms, weights) / normalizer  # [] float
    stats = {
        "clipped_tokens": (surrogate.clipped & keep).sum().to(logp.dtype),
        "tokens": weights.sum(),
        "ratio_sum": _masked_sum(surrogate.ratio, weights),
        "kl_sum": kl_sum,
    }
    return loss, stats
