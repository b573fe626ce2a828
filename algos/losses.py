"""GRPO-family maths as small pure torch functions: advantages, KL, policy losses, log-probs.

The GRPO trainer samples ``G`` completions per prompt, scores them, turns the rewards into
group-relative advantages (:func:`group_advantages`), and minimises one of five clipped
policy-gradient losses (:func:`policy_loss`: GRPO, DAPO, Dr. GRPO, GSPO, CISPO). Losses are
written so that gradient accumulation is exact: the normaliser is computed once over the full
batch (:func:`loss_normalizer`) and every micro-batch returns ``sum of its terms / normaliser``,
so summing micro-batch gradients gives the full-batch gradient whatever the micro-batch size.
:func:`selected_log_probs` computes the log-probability of chosen tokens from final hidden
states in chunks, so that full-vocabulary fp32 logits never exist for more than one chunk.
Shapes use ``B`` sequences (``num_groups * G``, consecutive rows form a group), ``T`` token
positions, ``H`` hidden size and ``V`` vocabulary size. Needs the ``llm`` extra (torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from textgym.checks import check_int

__all__ = [
    "LOSS_TYPES",
    "LOSS_VARIANTS",
    "SCALE_REWARDS",
    "LossType",
    "LossVariant",
    "ScaleRewards",
    "group_advantages",
    "k3_kl",
    "loss_normalizer",
    "policy_loss",
    "selected_log_probs",
    "zero_variance_groups",
]

ScaleRewards = Literal["group", "batch", "none"]

#: Every accepted ``scale`` of :func:`group_advantages`.
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")


# --------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Check ``rewards`` and ``group_size`` and view the rewards as ``[B // G, G]``."""
    check_int("group_size", group_size, low=1)
    if rewards.ndim != 1:
        raise ValueError(
            f"Expected rewards of shape [B] (one reward per completion), got "
            f"{list(rewards.shape)}; flatten the groups so consecutive rows form a group"
        )
    if rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"Expected the number of rewards to be a multiple of group_size={group_size}, got "
            f"{rewards.shape[0]}; sample exactly group_size completions per prompt"
        )
    return rewards.view(-1, group_size)  # [B // G, G]


def _check_finite(rewards: Tensor) -> None:
    """Raise ValueError naming the first reward that is NaN or infinite."""
    if rewards.is_floating_point() and not bool(torch.isfinite(rewards).all()):
        row = int((~torch.isfinite(rewards)).nonzero()[0, 0])
        raise ValueError(
            f"Expected finite rewards, got {float(rewards[row])} at row {row} of "
            f"{rewards.shape[0]} ({rewards.dtype}, largest finite "
            f"{torch.finfo(rewards.dtype).max:.3g}); a return beyond that range overflows when "
            "the reward tensor is made: use float64 rewards, or find the env's reward bug"
        )


def zero_variance_groups(rewards: Tensor, group_size: int) -> Tensor:
    """Flag the groups whose rewards are all equal (they carry no learning signal).

    DAPO's dynamic sampling (Yu et al. 2025) drops such groups; in every GRPO variant their
    advantages are zero. Rewards are compared exactly, so a group of ``1e300`` and ``1e308``
    (float64) is not flat.

    Args:
        rewards: ``[B]`` rewards, any dtype; rows ``g*G .. g*G+G-1`` form group ``g``.
        group_size: ``G``, completions per prompt (``>= 1``).

    Returns:
        ``[B // G]`` bool, ``True`` where every reward of the group is equal.

    Raises:
        ValueError: ``rewards`` is not 1-D, ``group_size < 1``, ``B`` is not a multiple of it,
            or a reward is NaN or infinite (named: NaN equals nothing and infinities compare
            equal, so neither can be judged flat or not).
    """
    grouped = _grouped(rewards, group_size)  # [B // G, G]
    _check_finite(rewards)
    return (grouped == grouped[:, :1]).all(dim=1)  # [B // G] bool


def _pow2(exponent: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``2 ** exponent`` as two factors of ``dtype`` (each at most ``2 ** 512``, so that
    ``2 ** 1024``, which no float holds, can still be applied as a product)."""
    half = torch.div(exponent, 2, rounding_mode="floor")
    two = torch.tensor(2.0, dtype=dtype)
    return two.pow(half.to(dtype)), two.pow((exponent - half).to(dtype))


def _group_scale(rewards: Tensor, grouped: Tensor, eps: Tensor) -> Tensor:
    """Population standard deviation of each group plus ``eps``, ``[B // G, 1]``."""
    return grouped.std(dim=1, correction=0, keepdim=True) + eps  # [B // G, 1] float


def _batch_scale(rewards: Tensor, grouped: Tensor, eps: Tensor) -> Tensor:
    """Population standard deviation of all rewards of the batch plus ``eps``, 0-d."""
    return rewards.std(correction=0) + eps  # [] float


def _no_scale(rewards: Tensor, grouped: Tensor, eps: Tensor) -> Tensor:
    """No scaling (Dr. GRPO): a 0-d one, ``eps`` unused."""
    return rewards.new_ones(())  # [] float


_REWARD_SCALES: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "group": _group_scale,
    "batch": _batch_scale,
    "none": _no_scale,
}


def group_advantages(
    rewards: Tensor, group_size: int, scale: ScaleRewards = "group", eps: float = 1e-4
) -> Tensor:
    """Group-relative advantages: each reward minus its group's mean, optionally scaled.

    ``A_i = (r_i - mean(group)) / (std + eps)``, where ``std`` is

    * ``"group"``: the population standard deviation (divide by ``G``, not ``G - 1``) of the
      group, as in GRPO (DeepSeekMath, Shao et al. 2024). TRL uses the sample std (``G - 1``);
      the population std keeps ``G = 1`` defined (advantage 0) and differs by ``sqrt(G/(G-1))``.
    * ``"batch"``: the population standard deviation of all ``B`` rewards (TRL's
      ``scale_rewards="batch"``, after REINFORCE++, Hu et al. 2025): centring stays per group.
    * ``"none"``: no division at all (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like
      Training": the std term biases updates toward too-easy and too-hard prompts).

    Groups whose rewards are all equal get advantages of exactly ``0.0`` (also with ``eps=0``,
    where ``0 / 0`` would otherwise give ``nan``).

    Overflow-free: the rewards of each group (of the batch, for ``"batch"``) are first
    multiplied by the power of two ``2**-e`` that brings their largest magnitude below 1 (``e
    >= 0``; ``eps`` is scaled alike), which is exact, so ordinary rewards give bit for bit the
    plain formula, and rewards near the largest float (``1e308`` in float64) give the right
    finite advantages instead of ``inf - inf = nan`` or a std that overflows to ``inf``.

    Args:
        rewards: ``[B]`` rewards (float; integers are promoted to float32); ``B = num_groups * G``
            and consecutive rows form a group.
        group_size: ``G``, completions per prompt (``>= 1``).
        scale: ``"group"``, ``"batch"`` or ``"none"``, see above.
        eps: added to the std before dividing (reward units), so near-constant groups stay finite.

    Returns:
        ``[B]`` advantages, the floating dtype of ``rewards``.

    Raises:
        ValueError: ``rewards`` not 1-D, ``group_size < 1``, ``B`` not a multiple of
            ``group_size``, unknown ``scale`` or ``eps < 0``; a reward that is NaN or infinite
            (named, with its row); with ``scale="none"``, an advantage beyond the dtype's range.
    """
    if scale not in _REWARD_SCALES:
        raise ValueError(f"Expected scale in {list(SCALE_REWARDS)}, got {scale!r}")
    if eps < 0:
        raise ValueError(f"Expected eps >= 0, got {eps}")
    if not rewards.is_floating_point():
        rewards = rewards.float()  # [B] float32
    grouped = _grouped(rewards, group_size)  # [B // G, G] float
    flat = zero_variance_groups(rewards, group_size)  # [B // G] bool; checks finiteness
    if scale == "batch":
        largest = grouped.abs().amax().reshape(1, 1)  # [1, 1] float
    else:
        largest = grouped.abs().amax(dim=1, keepdim=True)  # [B // G, 1] float
    exponent = torch.frexp(largest).exponent.clamp(min=0)  # [*, 1] int: largest < 2**exponent
    down_a, down_b = _pow2(-exponent, rewards.dtype)  # [*, 1] float each, product 2**-exponent
    unit = grouped * down_a * down_b  # [B // G, G] float, |unit| < 1
    unit_eps = eps * down_a * down_b  # [*, 1] float
    centred = unit - unit.mean(dim=1, keepdim=True)  # [B // G, G] float
    scaled = centred / _REWARD_SCALES[scale](unit.reshape(-1), unit, unit_eps)  # [B // G, G]
    if scale == "none":  # the advantages are in reward units: scale back
        up_a, up_b = _pow2(exponent, rewards.dtype)
        scaled = scaled * up_a * up_b
        if not bool(torch.isfinite(scaled).all()):
            row = int((~torch.isfinite(scaled)).reshape(-1).nonzero()[0, 0])
            raise ValueError(
                f"The advantage of row {row} overflows {rewards.dtype} with scale='none' "
                f"(reward {float(rewards[row])}); use scale='group' or float64 rewards"
            )
    return torch.where(flat[:, None], torch.zeros_like(scaled), scaled).reshape(-1)  # [B] float


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
        scale_rewards: the advantage scalings (:func:`group_advantages`) the loss allows; the
            first is its default.
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


def _masked_sum(values: Tensor, weights: Tensor) -> float:
    """``sum(values * weights)`` as a Python float, outside the graph."""
    return float((values.detach() * weights).sum().item())


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
) -> tuple[Tensor, dict[str, float]]:
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

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float tensor; ``stats`` SUMS over this micro-batch's
        mask tokens, to be added across micro-batches: ``"clipped_tokens"`` (tokens whose clip
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
    kl_sum = 0.0
    if ref_logp is not None:
        kl = k3_kl(logp_kept, torch.where(keep, ref_logp, zeros).detach())  # [B, T] float
        kl_sum = _masked_sum(kl, weights)
        if beta > 0:
            terms = terms + beta * kl  # [B, T] float
    terms = torch.where(keep, terms, zeros)  # [B, T] float
    loss = variant.reduction(terms, weights) / normalizer  # [] float
    stats = {
        "clipped_tokens": float((surrogate.clipped & keep).sum().item()),
        "tokens": float(keep.sum().item()),
        "ratio_sum": _masked_sum(surrogate.ratio, weights),
        "kl_sum": kl_sum,
    }
    return loss, stats


# --------------------------------------------------------------------------------------------
# Log-probs of chosen tokens
# --------------------------------------------------------------------------------------------


def _chunk_log_probs(
    hidden: Tensor,
    targets: Tensor,
    lm_head: torch.nn.Module,
    *,
    temperature: float,
    softcap: float | None,
    with_entropy: bool,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of ``targets`` (and entropy) for one chunk of ``[N, H]`` hidden states."""
    logits = lm_head(hidden).float()  # [N, V] float32
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)  # [N, V] float32
    log_probs = torch.log_softmax(logits / temperature, dim=-1)  # [N, V] float32
    chosen = log_probs.gather(-1, targets[:, None]).squeeze(-1)  # [N] float32
    if not with_entropy:
        return chosen, None
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)  # [N] float32
    return chosen, entropy


def _check_log_prob_inputs(
    hidden: Tensor, targets: Tensor, temperature: float, chunk_size: int, softcap: float | None
) -> None:
    """Validate the arguments of :func:`selected_log_probs`; raise ``ValueError`` saying the fix."""
    if hidden.ndim != 3:
        raise ValueError(f"Expected hidden of shape [B, T, H], got {list(hidden.shape)}")
    if tuple(targets.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"Expected targets of shape {list(hidden.shape[:2])} (one id per hidden state), got "
            f"{list(targets.shape)}; shift the labels so targets[:, t] follows hidden[:, t]"
        )
    if targets.numel() and int(targets.min().item()) < 0:
        raise ValueError(
            f"Expected token ids >= 0 in targets, got {int(targets.min().item())}; replace "
            "ignore-index positions (-100) with any valid id and mask them out of the loss"
        )
    if temperature <= 0:
        raise ValueError(f"Expected temperature > 0, got {temperature}")
    check_int("chunk_size", chunk_size, low=1)
    if softcap is not None and softcap <= 0:
        raise ValueError(f"Expected softcap > 0 or None, got {softcap}")


def selected_log_probs(
    hidden: Tensor,
    lm_head: torch.nn.Module,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    softcap: float | None = None,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of chosen tokens from final hidden states, in vocabulary-sized chunks.

    The ``B * T`` positions are flattened and processed ``chunk_size`` at a time:
    ``logits = lm_head(h).float()``, then soft-capping ``cap * tanh(logits / cap)`` (Gemma 2's
    final-logit softcapping), then ``/ temperature`` (the sampling temperature, so the
    log-probs are those of the distribution that generated the tokens), ``log_softmax`` and a
    gather of ``targets``. With grad enabled each chunk runs under
    ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: its logits are freed after the
    forward and recomputed in the backward, so full-vocabulary fp32 logits exist for one chunk
    at a time in both passes. Peak extra memory is therefore of order ``chunk_size * V * 4``
    bytes per live ``[chunk_size, V]`` fp32 tensor (a few at once: logits, log-softmax, and
    their gradient in the backward) instead of ``B * T * V * 4`` for the whole batch, e.g.
    1024 * 262144 * 4 B = 1 GiB per tensor for Gemma 3's vocabulary at the default chunk size.

    Args:
        hidden: ``[B, T, H]`` final hidden states (after the final norm), any float dtype.
        lm_head: maps ``[..., H]`` to ``[..., V]`` logits (e.g. ``model.lm_head``).
        targets: ``[B, T]`` long, the token whose log-prob is wanted at each position (ids in
            ``[0, V)``; padding positions may hold any valid id).
        temperature: ``> 0``, divides the (soft-capped) logits.
        chunk_size: positions per chunk (``>= 1``), trading memory for kernel launches.
        softcap: ``> 0`` or ``None``; the final-logit soft-cap, applied before the temperature.
        with_entropy: also return the entropy of each position's distribution (computed under
            ``no_grad``; nats).

    Returns:
        ``(logp, entropy)``: ``logp`` ``[B, T]`` float32 (nats, differentiable w.r.t. ``hidden``
        and the ``lm_head`` parameters); ``entropy`` ``[B, T]`` float32 detached, or ``None``.

    Raises:
        ValueError: wrong shapes, negative target ids, ``temperature <= 0``, ``chunk_size < 1``
            or ``softcap <= 0``.
    """
    _check_log_prob_inputs(hidden, targets, temperature, chunk_size, softcap)
    batch, length, width = hidden.shape
    flat_hidden = hidden.reshape(batch * length, width)  # [B*T, H]
    flat_targets = targets.reshape(batch * length).long()  # [B*T] long
    use_checkpoint = torch.is_grad_enabled()
    logp_chunks: list[Tensor] = []
    entropy_chunks: list[Tensor] = []
    for start in range(0, batch * length, chunk_size):
        args = (
            flat_hidden[start : start + chunk_size],
            flat_targets[start : start + chunk_size],
            lm_head,
        )
        options = {"temperature": temperature, "softcap": softcap, "with_entropy": with_entropy}
        if use_checkpoint:
            chosen, entropy = checkpoint(_chunk_log_probs, *args, use_reentrant=False, **options)
        else:
            chosen, entropy = _chunk_log_probs(*args, **options)  # [chunk] f32, [chunk] | None
        logp_chunks.append(chosen)
        if entropy is not None:
            entropy_chunks.append(entropy)
    if not logp_chunks:  # B * T == 0
        empty = hidden.new_zeros((batch, length), dtype=torch.float32)  # [B, T] float32
        return empty, (empty if with_entropy else None)
    logp = torch.cat(logp_chunks).view(batch, length)  # [B, T] float32
    if not with_entropy:
        return logp, None
    return logp, torch.cat(entropy_chunks).view(batch, length).detach()  # [B, T] float32
