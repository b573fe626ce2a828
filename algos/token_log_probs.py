"""Log-probabilities of chosen tokens from final hidden states, in chunks
(:func:`selected_log_probs`), so that full-vocabulary fp32 logits never exist for more than one
chunk.

Shapes use ``B`` sequences, ``T`` token positions, ``H`` hidden size and ``V`` vocabulary size.
Needs the ``llm`` extra (torch).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from textgym.checks import check_int

__all__ = ["check_target_ids", "selected_log_probs"]


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
    """Validate the shapes and options of :func:`selected_log_probs` (metadata only: no read
    of a tensor's values); raise ``ValueError`` saying the fix."""
    if hidden.ndim != 3:
        raise ValueError(f"Expected hidden of shape [B, T, H], got {list(hidden.shape)}")
    if tuple(targets.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"Expected targets of shape {list(hidden.shape[:2])} (one id per hidden state), got "
            f"{list(targets.shape)}; shift the labels so targets[:, t] follows hidden[:, t]"
        )
    if temperature <= 0:
        raise ValueError(f"Expected temperature > 0, got {temperature}")
    check_int("chunk_size", chunk_size, low=1)
    if softcap is not None and softcap <= 0:
        raise ValueError(f"Expected softcap > 0 or None, got {softcap}")


def check_target_ids(targets: Tensor) -> None:
    """Refuse negative token ids (an ignore index such as -100 left in the labels).

    Reads ``targets.min()`` back to the host: a device sync on an accelerator, so the update's
    micro-batches skip it (``check_ids=False`` in :func:`selected_log_probs`), their targets
    having been checked on the host when the batch was built.

    Raises:
        ValueError: a target id is negative.
    """
    low = int(targets.min().item()) if targets.numel() else 0
    if low < 0:
        raise ValueError(
            f"Expected token ids >= 0 in targets, got {low}; replace ignore-index positions "
            "(-100) with any valid id and mask them out of the loss"
        )


def selected_log_probs(
    hidden: Tensor,
    lm_head: torch.nn.Module,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    softcap: float | None = None,
    with_entropy: bool = False,
    check_ids: bool = True,
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
        check_ids: refuse negative ids in ``targets`` (:func:`check_target_ids`, one read of
            their minimum back to the host); ``False`` where the caller checked them already,
            so the call has no host sync.

    Returns:
        ``(logp, entropy)``: ``logp`` ``[B, T]`` float32 (nats, differentiable w.r.t. ``hidden``
        and the ``lm_head`` parameters); ``entropy`` ``[B, T]`` float32 detached, or ``None``.

    Raises:
        ValueError: wrong shapes, negative target ids (with ``check_ids``),
            ``temperature <= 0``, ``chunk_size < 1`` or ``softcap <= 0``.
    """
    _check_log_prob_inputs(hidden, targets, temperature, chunk_size, softcap)
    if check_ids:
        check_target_ids(targets)
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
