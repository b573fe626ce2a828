"""Group-relative advantages: each reward against its group (GRPO), and which groups carry
no signal.

Shapes use ``B`` rewards (``num_groups * G``, consecutive rows form a group of ``G``). Both
functions refuse rewards that are NaN or infinite, naming the row. Needs the ``llm`` extra
(torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from textgym.checks import check_int
from textgym.errors import NonFiniteError

__all__ = ["SCALE_REWARDS", "ScaleRewards", "group_advantages", "zero_variance_groups"]

ScaleRewards = Literal["group", "batch", "none"]

#: Every accepted ``scale`` of :func:`group_advantages`.
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")


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
        raise NonFiniteError(
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
            raise NonFiniteError(
                f"The advantage of row {row} overflows {rewards.dtype} with scale='none' "
                f"(reward {float(rewards[row])}); use scale='group' or float64 rewards"
            )
    return torch.where(flat[:, None], torch.zeros_like(scaled), scaled).reshape(-1)  # [B] float
