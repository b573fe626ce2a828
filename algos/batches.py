"""Token batches and their log-probs, shared by the SFT and GRPO trainers.

Both trainers score token sequences with the same chunked log-prob function
(:func:`textgym.algos.losses.selected_log_probs`, through :func:`sequence_log_probs`), so the
warm-up and the RL stage see identical numerics. A batch whose rows share a prompt runs that
prefix once (:func:`shared_prefix_length`, :func:`shared_prefix_hidden`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from textgym.algos.losses import selected_log_probs
from textgym.policies.kv_slots import cache_kwarg

__all__ = [
    "TokenBatch",
    "make_token_batch",
    "sequence_log_probs",
    "shared_prefix_hidden",
    "shared_prefix_length",
]


class TokenBatch:
    """Right-padded next-token batch built from token sequences.

    Attributes:
        input_ids: ``[B, L-1]`` long, tokens ``0..L-2`` of each sequence (L = longest).
        attention_mask: ``[B, L-1]`` long, 1 on real tokens.
        targets: ``[B, L-1]`` long, tokens ``1..L-1``: what each position predicts.
        loss_mask: ``[B, L-1]`` float32, 1 where the target carries loss.
        sampler_logprobs: ``[B, L-1]`` float32, the rollout's log-probs of the targets (0 where
            unknown).
    """

    def __init__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        targets: torch.Tensor,
        loss_mask: torch.Tensor,
        sampler_logprobs: torch.Tensor,
    ) -> None:
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.targets = targets
        self.loss_mask = loss_mask
        self.sampler_logprobs = sampler_logprobs

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: torch.Tensor | Sequence[int] | slice) -> TokenBatch:
        """The sub-batch of ``rows``, trimmed of columns that are padding in all of them."""
        parts = [t[rows] for t in self._tensors()]
        width = int(parts[1].sum(dim=1).max().item()) if parts[1].numel() else 0
        return TokenBatch(*(t[:, :width] for t in parts))

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in self._tensors()))

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.input_ids,
            self.attention_mask,
            self.targets,
            self.loss_mask,
            self.sampler_logprobs,
        )


def make_token_batch(
    sequences: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None = None,
    *,
    pad_token_id: int = 0,
) -> TokenBatch:
    """Right-pad token sequences into a next-token batch.

    Args:
        sequences: ``B`` sequences of token ids ``[L_i]``, each of length >= 2.
        loss_masks: ``B`` masks ``[L_i]`` (1 on tokens that carry loss).
        logprobs: Optional ``B`` lists ``[L_i]`` of sampling log-probs.
        pad_token_id: Id written in padding (never attended to, never scored).

    Raises:
        ValueError: lengths disagree or a sequence is shorter than 2 tokens.
    """
    if len(sequences) != len(loss_masks) or (
        logprobs is not None and len(logprobs) != len(sequences)
    ):
        raise ValueError("Expected one loss mask (and one log-prob list) per sequence")
    for i, (ids, mask) in enumerate(zip(sequences, loss_masks)):
        if (
            len(ids) < 2
            or len(mask) != len(ids)
            or (logprobs is not None and len(logprobs[i]) != len(ids))
        ):
            raise ValueError(
                f"Sequence {i}: expected >= 2 tokens and a mask (and log-probs) of the same "
                f"length, got {len(ids)} tokens, {len(mask)} mask entries"
            )
    width = max(len(ids) for ids in sequences) - 1
    batch = len(sequences)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)  # [B, L-1]
    targets = torch.full((batch, width), pad_token_id, dtype=torch.long)  # [B, L-1]
    attention = torch.zeros((batch, width), dtype=torch.long)  # [B, L-1]
    loss_mask = torch.zeros((batch, width), dtype=torch.float32)  # [B, L-1]
    sampled = torch.zeros((batch, width), dtype=torch.float32)  # [B, L-1]
    for i, ids in enumerate(sequences):
        n = len(ids) - 1
        row = torch.as_tensor(list(ids), dtype=torch.long)
        input_ids[i, :n], targets[i, :n] = row[:-1], row[1:]
        attention[i, :n] = 1
        loss_mask[i, :n] = torch.as_tensor(list(loss_masks[i][1:]), dtype=torch.float32)
        if logprobs is not None:
            sampled[i, :n] = torch.as_tensor(list(logprobs[i][1:]), dtype=torch.float32)
    return TokenBatch(input_ids, attention, targets, loss_mask, sampled)


def _decoder_and_head(model: Any) -> tuple[Any, Any]:
    """The decoder stack and the LM head of a causal LM (through a ``peft`` wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def sequence_log_probs(
    model: Any,
    batch: TokenBatch,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    share_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the loss tokens under ``model``, without full-vocabulary logits.

    Runs the decoder once, then the LM head only at positions whose target carries loss
    (``batch.loss_mask > 0``), chunk by chunk (:func:`~textgym.algos.losses.selected_log_probs`):
    at most ``chunk_size * V`` float32 logits exist at a time, in the forward and the backward
    pass, and prompt, observation and padding positions cost no LM-head work (for Gemma's
    262,144-entry vocabulary the head dominates the step otherwise).

    Args:
        model: A causal LM (or a ``peft`` wrapper of one).
        batch: The token batch (on the model's device).
        temperature: Logits are divided by it, as when sampling (> 0).
        chunk_size: Positions per LM-head chunk.
        with_entropy: Also return the per-position entropy (detached).
        share_prefix: Run the prompt that rows share once (:func:`shared_prefix_hidden`): the
            same numbers up to float rounding, fewer FLOPs when rows come in GRPO groups.

    Returns:
        ``(logp, entropy)``: ``[B, L-1]`` float32 each, 0.0 where ``loss_mask`` is 0 (entropy
        ``None`` unless asked for).
    """
    decoder, head = _decoder_and_head(model)
    shared = shared_prefix_hidden(decoder, batch) if share_prefix else None
    if shared is None:
        hidden = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state  # [B, L-1, H]
        start = 0
    else:
        hidden, start = shared  # [B, L-1-start, H]: no loss position lies before start
    scored = batch.loss_mask > 0  # [B, L-1] bool
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    picked, entropy = selected_log_probs(
        hidden[scored[:, start:]][None],  # [1, N, H], N = loss positions
        head,
        batch.targets[scored][None],  # [1, N]
        temperature=temperature,
        chunk_size=chunk_size,
        softcap=softcap,
        with_entropy=with_entropy,
    )
    logp = torch.zeros(scored.shape, dtype=torch.float32, device=hidden.device)  # [B, L-1]
    logp = logp.masked_scatter(scored, picked[0])
    if entropy is not None:
        entropy = torch.zeros_like(logp).masked_scatter(scored, entropy[0])  # [B, L-1]
    return logp, entropy


def shared_prefix_length(batch: TokenBatch) -> int:
    """Columns before the first loss target of any row: ``min_b`` of row b's first scored column.

    Every row is all real tokens there (right padding), and no position there is scored, so a
    prefix of this length can be run without its logits. Rows with no loss token count with
    their length.

    Returns:
        The number of columns ``P`` (``0 <= P <= L-1``; 0 for an empty batch).
    """
    scored = batch.loss_mask > 0  # [B, L-1] bool
    lengths = batch.attention_mask.sum(dim=1)  # [B] long
    first = torch.where(scored.any(dim=1), scored.int().argmax(dim=1), lengths)  # [B] long
    return int(first.min().item()) if len(batch) else 0


def shared_prefix_hidden(decoder: Any, batch: TokenBatch) -> tuple[torch.Tensor, int] | None:
    """Decoder hidden states with each distinct prompt prefix run once (prefix sharing).

    The G rollouts of a GRPO group start with the same prompt (often most of the tokens), and
    a plain forward pass runs it G times. Here the first :func:`shared_prefix_length` columns
    are deduplicated across rows, run once per distinct prefix with a KV cache, the cache is
    gathered back to every row (an index into the autograd graph, so gradients through the
    prompt's keys and values are summed over the rows that share it), and the rest of each row
    attends to it. The idea is that of Prefix Grouper (Liu et al., 2025, arXiv:2506.05433);
    written here on the ``transformers`` cache API because no library offers it for training.

    Args:
        decoder: The decoder stack of a causal LM (``model.get_decoder()``).
        batch: The right-padded token batch.

    Returns:
        ``(hidden, P)``: the hidden states ``[B, L-1-P, H]`` of columns ``P..L-2`` (the prefix
        columns carry no loss, so they are not returned) and ``P``; or ``None`` when nothing
        would be saved (no row shares its prefix, an empty prefix) or the decoder fills no cache
        (gradient checkpointing); then run the plain pass.
    """
    if decoder.training and any(
        getattr(m, "gradient_checkpointing", False) for m in decoder.modules()
    ):
        return None  # checkpointed layers do not fill a cache (transformers drops use_cache)
    prefix = shared_prefix_length(batch)
    if prefix < 1 or prefix >= batch.input_ids.shape[1]:
        return None
    unique, rows = torch.unique(batch.input_ids[:, :prefix], dim=0, return_inverse=True)
    if unique.shape[0] == len(batch):  # [U, P] long; rows: [B] long, index into unique
        return None
    cache = decoder(input_ids=unique, use_cache=True).past_key_values  # keys [U, h, P, d]
    if cache is None or cache.get_seq_length() != prefix:
        return None
    cache.batch_select_indices(rows)  # keys [B, h, P, d], still in the graph
    suffix = decoder(
        input_ids=batch.input_ids[:, prefix:],  # [B, L-1-P]
        attention_mask=batch.attention_mask,  # [B, L-1]: prefix columns are all real tokens
        use_cache=True,
        **{cache_kwarg(decoder): cache},  # the keyword this transformers takes, no warning
    ).last_hidden_state  # [B, L-1-P, H]
    return suffix, prefix
