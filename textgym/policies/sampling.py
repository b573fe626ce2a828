"""Drawing the next token on the device: the logits processing of ``transformers``' warpers,
two-level inverse-CDF sampling, and greedy choice, each with the drawn token's log-probability.

Sampling is inverse-CDF sampling in two levels. ``torch.multinomial`` and the exponential race
(``argmax(p / E)``, ``E ~ Exp(1)``) both touch the whole vocabulary several times per draw, and
on the CPU drawing 262,144 exponentials per row cost more than Gemma's forward pass (measured:
``exponential_`` was 33% of a batch-20 decode). Here one uniform per row picks a block of the
vocabulary from the block sums of ``exp(logits - max)``, then a token inside the block, so a draw
costs one ``exp`` pass and one sum over ``V``, plus cumulative sums over ``sqrt(V)`` entries. The
log-probability of the drawn token, ``logit - max - log(sum)``, comes from the same sums: no
``log_softmax`` over the vocabulary. A test checks the frequencies against ``softmax(logits)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["draw", "process_logits", "sample_categorical"]


def process_logits(
    logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """Apply temperature, then top-k, then top-p, as ``transformers``' sampling warpers do.

    The order and the top-p rule (drop the tokens whose ascending cumulative probability is at
    most ``1 - top_p``, keeping at least one) are those of ``transformers``' ``TemperatureLogitsWarper``,
    ``TopKLogitsWarper`` and ``TopPLogitsWarper``, so log-probabilities match ``generate``'s.

    Args:
        logits: ``[B, V]`` float32 next-token logits.
        temperature: > 0.
        top_k: Keep the ``top_k`` largest logits; 0 keeps all.
        top_p: Nucleus mass in (0, 1]; 1 keeps all.

    Returns:
        ``[B, V]`` float32 logits, ``-inf`` on removed tokens (a new tensor).
    """
    logits = logits / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1)  # ascending
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)  # [B, V]
        remove_sorted = cumulative <= 1.0 - top_p
        remove_sorted[:, -1] = False  # keep at least the most likely token
        remove = remove_sorted.scatter(1, order, remove_sorted)
        logits = logits.masked_fill(remove, -math.inf)
    return logits


def sample_categorical(
    logits: torch.Tensor, generator: torch.Generator | None = None, *, block: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``softmax(logits)``; return it and its log-probability.

    Two-level inverse-CDF sampling (see the module docstring): the categorical distribution
    exactly, up to float32 rounding of the cumulative sums. Tokens with ``-inf`` logits are never
    drawn.

    Args:
        logits: ``[B, V]`` float32 logits (``-inf`` allowed; at least one finite per row).
        generator: Torch RNG of the uniforms (one per row); ``None`` uses the global one.
        block: Vocabulary entries per block, >= 1 (512 suits ``V`` up to about 512**2).

    Returns:
        ``(tokens, log_probs)``: ``[B]`` int64 ids and ``[B]`` float32 natural-log
        probabilities of those ids under ``softmax(logits)``.
    """
    rows, vocab = logits.shape
    top = logits.max(dim=-1, keepdim=True).values  # [B, 1]
    num_blocks = -(-vocab // block)
    weights = (logits - top).exp_()  # [B, V] in [0, 1]
    if num_blocks * block > vocab:  # zero weights pad the last block
        weights = torch.nn.functional.pad(weights, (0, num_blocks * block - vocab))
    blocked = weights.view(rows, num_blocks, block)  # [B, nb, block]
    block_sums = blocked.sum(dim=-1)  # [B, nb]
    block_cumsum = block_sums.cumsum(dim=-1)  # [B, nb]
    total = block_cumsum[:, -1:]  # [B, 1], >= 1 (the max entry weighs 1)
    target = torch.rand(rows, 1, generator=generator, device=logits.device) * total  # [B, 1]
    chosen = torch.searchsorted(block_cumsum, target, right=True).clamp_(max=num_blocks - 1)
    before = block_cumsum.gather(1, chosen) - block_sums.gather(1, chosen)  # [B, 1]
    inner = blocked[torch.arange(rows, device=logits.device), chosen.squeeze(1)]  # [B, block]
    inner_cumsum = inner.cumsum(dim=-1)  # [B, block]
    residual = torch.minimum(target - before, inner_cumsum[:, -1:])
    offset = torch.searchsorted(inner_cumsum, residual, right=True).clamp_(max=block - 1)
    # Rounding can leave the residual at the block's end, past its last positive weight: take
    # that last positive-weight token, as the residual just below the end would.
    positions = torch.arange(block, device=logits.device).expand(rows, block)
    last_positive = torch.where(inner > 0, positions, -1).max(dim=-1, keepdim=True).values
    offset = torch.where(inner.gather(1, offset) > 0, offset, last_positive)
    tokens = (chosen * block + offset).squeeze(1)  # [B]
    log_probs = (
        logits.gather(1, tokens[:, None]).squeeze(1) - top.squeeze(1) - total.squeeze(1).log()
    )
    return tokens, log_probs


def draw(
    logits: torch.Tensor,
    process: Callable[[torch.Tensor], torch.Tensor] | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens ``[A]`` and their log-probabilities ``[A]`` from logits ``[A, V]``."""
    if process is not None:
        return sample_categorical(process(logits), generator)
    tokens = logits.argmax(dim=-1)  # [A]
    log_probs = logits.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
    return tokens, log_probs
