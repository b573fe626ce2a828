"""Token batches and their log-probs, shared by the SFT and GRPO trainers.

Both trainers score token sequences with the same chunked log-prob function
(:func:`textgym.algos.token_log_probs.selected_log_probs`, through :func:`sequence_log_probs`),
so the warm-up and the RL stage see identical numerics. The decoder runs a batch padded, with a
prompt its rows share run once, or packed in one row without padding
(:mod:`textgym.algos.decoder_passes`; :func:`micro_batch_rows` packs the rows).

No forward or backward pass here reads a tensor back to the host: where a batch's loss and
real positions lie is found once, on the host where the batch is built
(:class:`BatchPositions`), and the passes gather with those indices instead of boolean masks
(each use of which reads a count back from the device). A right-padded batch runs without an
attention mask: causal attention alone is exact there, since every pad comes after its row's
real tokens, so no real position can attend to one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch

from textgym.algos.decoder_passes import packed_hidden, padded_hidden, shared_prefix_hidden
from textgym.algos.model_loading import autocast
from textgym.algos.token_log_probs import check_target_ids, selected_log_probs

__all__ = [
    "BatchPositions",
    "TokenBatch",
    "batch_positions",
    "make_token_batch",
    "micro_batch_log_probs",
    "micro_batch_rows",
    "pack_rows",
    "sequence_log_probs",
]


class BatchPositions(NamedTuple):
    """Where a token batch's loss and real positions are, as flat indices into its ``[B, L-1]``
    grid (row-major), found once where the batch is built (:func:`batch_positions`) so that the
    passes over it gather by index, with no read back to the host.

    Attributes:
        scored: ``[N]`` long, the flat index of each loss position (``loss_mask > 0``).
        real: ``[R]`` long, the flat index of each real position (``attention_mask == 1``).
        scored_in_real: ``[N]`` long, where each loss position is among the real ones (its
            index into a packed row of the real positions).
        right_padded: Whether every row is real tokens, then padding only: then causal
            attention alone is exact and the padded pass needs no attention mask.
    """

    scored: torch.Tensor
    real: torch.Tensor
    scored_in_real: torch.Tensor
    right_padded: bool

    def to(self, device: torch.device) -> BatchPositions:
        """The same positions with their index tensors on ``device``."""
        moved = (t.to(device) for t in (self.scored, self.real, self.scored_in_real))
        return BatchPositions(*moved, self.right_padded)


def batch_positions(attention_mask: torch.Tensor, loss_mask: torch.Tensor) -> BatchPositions:
    """The :class:`BatchPositions` of a batch's masks (on the host: reads them there).

    Args:
        attention_mask: ``[B, L-1]`` long or bool, 1 on real tokens.
        loss_mask: ``[B, L-1]`` float, > 0 where the target carries loss.

    Raises:
        ValueError: a loss position is a padding position (the masks disagree).
    """
    real_mask = attention_mask.reshape(-1) != 0  # [B*(L-1)] bool
    scored_mask = loss_mask.reshape(-1) > 0  # [B*(L-1)] bool
    if bool((scored_mask & ~real_mask).any()):
        stray = int((scored_mask & ~real_mask).nonzero()[0, 0])
        raise ValueError(
            f"Expected loss positions on real tokens only, got loss at padding position "
            f"{divmod(stray, max(attention_mask.shape[-1], 1))} (row, column); set loss_mask "
            "to 0 wherever attention_mask is 0"
        )
    mask = attention_mask != 0  # [B, L-1] bool
    return BatchPositions(
        scored=scored_mask.nonzero().squeeze(1),  # [N] long
        real=real_mask.nonzero().squeeze(1),  # [R] long
        scored_in_real=scored_mask[real_mask].nonzero().squeeze(1),  # [N] long
        right_padded=bool((mask[:, 1:] <= mask[:, :-1]).all()),  # no real token after a pad
    )


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
        *,
        positions: BatchPositions | None = None,
    ) -> None:
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.targets = targets
        self.loss_mask = loss_mask
        self.sampler_logprobs = sampler_logprobs
        self._positions = positions

    @property
    def positions(self) -> BatchPositions:
        """Where the loss and real positions are (:func:`batch_positions`), found on first use
        where the tensors are: on the host for a batch that :meth:`to` moved, which finds them
        before moving it; found on an accelerator they cost reads back to the host."""
        if self._positions is None:
            self._positions = batch_positions(self.attention_mask, self.loss_mask)
        return self._positions

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: torch.Tensor | Sequence[int] | slice) -> TokenBatch:
        """The sub-batch of ``rows``, trimmed of columns that are padding in all of them."""
        parts = [t[rows] for t in self._tensors()]
        width = int(parts[1].sum(dim=1).max().item()) if parts[1].numel() else 0
        return TokenBatch(*(t[:, :width] for t in parts))

    def to(self, device: torch.device) -> TokenBatch:
        """The batch on ``device``, its :attr:`positions` found here first (so on the host)."""
        positions = self.positions.to(device)
        return TokenBatch(*(t.to(device) for t in self._tensors()), positions=positions)

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
        ValueError: lengths disagree, a sequence is shorter than 2 tokens, or a token id is
            negative.
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
    check_target_ids(targets)  # here on the host, so the passes need not read them again
    return TokenBatch(input_ids, attention, targets, loss_mask, sampled)


def pack_rows(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group sequences into packed rows of at most ``max_tokens`` tokens, first-fit decreasing.

    Sequences are placed longest first (ties in batch order), each into the first row it fits
    in, else into a new row. Each row is one forward and backward pass, so fewer rows is what
    matters: first-fit decreasing uses at most 11/9 of the optimal number of rows plus one
    (Dósa, 2007), where filling rows greedily in batch order can use twice the optimum. The
    order does not change the update (every micro-batch's loss is divided by the normaliser of
    the whole batch), only the float rounding of the gradient's sum.

    A sequence longer than ``max_tokens`` gets a row of its own, longer than the budget: it
    cannot be split (its tokens attend to each other), and one long episode must not stop a run
    (the padded path, too, runs a sequence of any length).

    Args:
        lengths: Tokens of each sequence (positions it runs: ``L_i - 1`` for ``L_i`` tokens).
        max_tokens: The token budget of a row (>= 1).

    Returns:
        Rows, each a list of sequence indices in ascending order (every index exactly once).

    Raises:
        ValueError: ``max_tokens`` < 1 or a negative length.
    """
    if max_tokens < 1 or any(n < 0 for n in lengths):
        raise ValueError(
            f"Expected max_tokens >= 1 and lengths >= 0, got {max_tokens} and {list(lengths)}"
        )
    rows: list[list[int]] = []
    room: list[int] = []  # tokens left in each row
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):  # stable: ties by index
        fits = next((r for r, left in enumerate(room) if lengths[i] <= left), None)
        if fits is None:
            rows.append([i])
            room.append(max_tokens - lengths[i])
        else:
            rows[fits].append(i)
            room[fits] -= lengths[i]
    return [sorted(row) for row in rows]


def micro_batch_rows(batch: TokenBatch | None, config: Any) -> list[list[int]]:
    """The sequences of each micro-batch of ``batch``: ``config.micro_batch_size`` consecutive
    sequences (padded), or, when ``config.micro_batch_tokens`` is set, the rows of
    :func:`pack_rows` over the positions each sequence runs (one packed row each).

    Args:
        batch: The step's token batch; ``None`` (no sequence) gives no micro-batch.
        config: A trainer config (:class:`~textgym.algos.common.OptimizationConfig`).

    Returns:
        Lists of sequence indices, every index exactly once.
    """
    if batch is None:
        return []
    if config.micro_batch_tokens is not None:
        return pack_rows(batch.attention_mask.sum(dim=1).tolist(), config.micro_batch_tokens)
    count, size = len(batch), config.micro_batch_size
    return [list(range(i, min(i + size, count))) for i in range(0, count, size)]


def micro_batch_log_probs(
    model: Any, batch: TokenBatch | None, config: Any, device: torch.device
) -> Iterator[tuple[TokenBatch, torch.Tensor]]:
    """Each micro-batch of ``batch`` (:func:`micro_batch_rows`) on ``device`` and its
    :func:`sequence_log_probs` under the config's autocast, as SFT's step and held-out loss take
    them: the caller weights ``logp * micro.loss_mask`` (and backpropagates, or not).

    Yields:
        ``(micro, logp)``: the micro-batch and its ``[b, L-1]`` float32 log-probs.
    """
    for row in micro_batch_rows(batch, config):  # padded, or packed rows of tokens
        micro = batch.select(row).to(device)
        with autocast(device, config.bf16, cpu_bf16=config.cpu_bf16):
            logp, _ = sequence_log_probs(
                model,
                micro,
                chunk_size=config.logprob_chunk_size,
                packed=config.micro_batch_tokens is not None,
            )
        yield micro, logp


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
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the loss tokens under ``model``, without full-vocabulary logits.

    Runs the decoder once, then the LM head only at positions whose target carries loss
    (``batch.loss_mask > 0``), chunk by chunk
    (:func:`~textgym.algos.token_log_probs.selected_log_probs`): at most ``chunk_size * V``
    float32 logits exist at a time, in the forward and the backward pass, and prompt,
    observation and padding positions cost no LM-head work (for Gemma's 262,144-entry
    vocabulary the head dominates the step otherwise).

    Args:
        model: A causal LM (or a ``peft`` wrapper of one).
        batch: The token batch (on the model's device).
        temperature: Logits are divided by it, as when sampling (> 0).
        chunk_size: Positions per LM-head chunk.
        with_entropy: Also return the per-position entropy (detached).
        share_prefix: Run the prompt that rows share once (:func:`~textgym.algos.decoder_passes.shared_prefix_hidden`): the
            same numbers up to float rounding, fewer FLOPs when rows come in GRPO groups.
        packed: Run the batch's sequences concatenated in one row without padding
            (:func:`~textgym.algos.decoder_passes.packed_hidden`): the same numbers up to float rounding. Packing and
            prefix sharing are alternatives: with ``packed``, ``share_prefix`` is ignored.

    Returns:
        ``(logp, entropy)``: ``[B, L-1]`` float32 each, 0.0 where ``loss_mask`` is 0 (entropy
        ``None`` unless asked for).
    """
    decoder, head = _decoder_and_head(model)
    where = batch.positions  # index tensors on the batch's device, found on the host
    shared = shared_prefix_hidden(decoder, batch) if share_prefix and not packed else None
    if packed:
        hidden_scored = packed_hidden(decoder, batch).index_select(0, where.scored_in_real)
    elif shared is None:
        hidden = padded_hidden(decoder, batch)  # [B, L-1, H]
        hidden_scored = hidden.flatten(0, 1).index_select(0, where.scored)  # [N, H]
    else:
        hidden, start = shared  # [B, L-1-start, H]: no loss position lies before start
        width = batch.input_ids.shape[1]
        rows, columns = where.scored // width, where.scored % width  # [N] long each
        suffix_index = rows * (width - start) + columns - start  # [N] long
        hidden_scored = hidden.flatten(0, 1).index_select(0, suffix_index)  # [N, H]
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    picked, entropy = selected_log_probs(
        hidden_scored[None],  # [1, N, H], N = loss positions
        head,
        batch.targets.reshape(-1).index_select(0, where.scored)[None],  # [1, N]
        temperature=temperature,
        chunk_size=chunk_size,
        softcap=softcap,
        with_entropy=with_entropy,
        check_ids=False,  # make_token_batch checked them on the host
    )
    return _scatter(picked[0], batch), None if entropy is None else _scatter(entropy[0], batch)


def _scatter(values: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """``[N]`` values of the loss positions written into a ``[B, L-1]`` float32 grid of zeros
    (differentiable w.r.t. ``values``)."""
    grid = values.new_zeros(batch.loss_mask.numel(), dtype=torch.float32)  # [B*(L-1)]
    return grid.index_copy(0, batch.positions.scored, values).view(batch.loss_mask.shape)
