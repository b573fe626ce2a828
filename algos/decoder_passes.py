"""The decoder passes of a token batch (:func:`textgym.algos.batches.sequence_log_probs` picks
one): padded (:func:`padded_hidden`), with the prompt its rows share run once
(:func:`shared_prefix_hidden`), or packed in one row without padding (:func:`packed_hidden`).
Each returns hidden states; the LM head runs after, only at the loss positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from textgym.policies.kv_slots import cache_kwarg

if TYPE_CHECKING:
    from textgym.algos.batches import TokenBatch

__all__ = ["packed_hidden", "padded_hidden", "shared_prefix_hidden", "shared_prefix_length"]


def padded_hidden(decoder: Any, batch: TokenBatch) -> torch.Tensor:
    """Decoder hidden states ``[B, L-1, H]`` of the padded batch, with no attention mask when
    it is right-padded (:attr:`BatchPositions.right_padded`).

    Causal attention alone is exact there: every pad comes after its row's real tokens, so no
    real position can attend to one, and positions count from 0 in every row either way. The
    pads' own hidden states then differ (they attend to the pads before them), but no loss
    position and no real token reads them. Without a mask, ``transformers`` reads nothing back
    to the host to decide whether it may skip the mask, and sdpa runs with ``is_causal``: its
    fused kernels, which skip the blocks above the diagonal, instead of a dense ``[L, L]``
    mask. A batch with padding elsewhere gets its attention mask.
    """
    return decoder(
        input_ids=batch.input_ids, attention_mask=_padding_mask(batch), use_cache=False
    ).last_hidden_state  # [B, L-1, H]


def _padding_mask(batch: TokenBatch) -> torch.Tensor | None:
    """The attention mask a pass over ``batch`` needs: none when it is right-padded (causal
    attention alone keeps every real position off the pads), else ``attention_mask``."""
    return None if batch.positions.right_padded else batch.attention_mask


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
        # [B, L-1]: prefix columns are all real tokens. Kept on a right-padded batch too,
        # though not needed: without it transformers' offset causal mask ran slower on the CPU
        # (14.8 s against 10.5 s, median of 4 alternating updates, tiny, 32 episodes).
        attention_mask=batch.attention_mask,
        use_cache=True,
        **{cache_kwarg(decoder): cache},  # the keyword this transformers takes, no warning
    ).last_hidden_state  # [B, L-1-P, H]
    return suffix, prefix


#: Attention implementations that keep the sequences of a packed row apart in transformers 5.x:
#: sdpa, eager and flex get a block-diagonal mask from the position ids, FlashAttention takes
#: them as variable-length sequences.
_PACKING_ATTENTION = frozenset(
    {"sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3"}
)


def packed_hidden(decoder: Any, batch: TokenBatch) -> torch.Tensor:
    """Decoder hidden states of the batch's real positions, its sequences run as one packed row.

    The sequences are concatenated without padding (``[1, N]``, ``N`` = real positions) with
    ``position_ids`` restarting at 0 at each sequence start, and no attention mask: from such
    position ids ``transformers.masking_utils`` (5.x; ``find_packed_sequence_indices``) finds
    the sequences and builds a block-diagonal causal mask for sdpa and eager attention (a
    sliding-window one for Gemma 3's sliding layers, in each sequence's own positions), and
    FlashAttention 2 takes them as variable-length sequences. So every token attends only to
    its own sequence, at the positions it has when run alone: the same hidden states as the
    padded pass, up to float rounding (``tests/algos/test_packing.py`` checks both models).

    Args:
        decoder: The decoder stack of a causal LM (``model.get_decoder()``).
        batch: The right-padded token batch whose sequences form the row.

    Returns:
        ``[N, H]``: hidden states of the real positions in row-major order (sequence by
        sequence), i.e. ``hidden[batch.attention_mask.bool()]`` of a padded pass.

    Raises:
        ValueError: the decoder's attention is not one whose mask transformers builds from
            packed position ids (any other would attend across the sequences of the row).
    """
    attention = getattr(decoder.config, "_attn_implementation", None)
    if attention not in _PACKING_ATTENTION:
        raise ValueError(
            f"Expected a decoder with attention in {', '.join(sorted(_PACKING_ATTENTION))} for "
            f"packed rows, got {attention!r}; load the model with attn_implementation='sdpa' "
            "or set micro_batch_tokens to None"
        )
    real = batch.positions.real  # [N] long, flat indices of the real positions
    positions = batch.attention_mask.cumsum(dim=1) - 1  # [B, L-1] long: 0.. in each sequence
    return decoder(
        input_ids=batch.input_ids.reshape(-1).index_select(0, real)[None],  # [1, N]
        position_ids=positions.reshape(-1).index_select(0, real)[None],  # [1, N]
        attention_mask=None,  # what makes transformers read the packing from position_ids
        use_cache=False,  # and no cache (packing is detected only without one)
    ).last_hidden_state[0]  # [N, H]
