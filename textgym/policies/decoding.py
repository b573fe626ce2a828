"""Batched sampling from a causal LM with each sequence's KV cache kept between calls.

This is the decode loop behind :class:`textgym.policies.hf.HFPolicy`. It is our own rather than
``transformers``' ``generate`` because a multi-turn rollout needs three things ``generate`` does
not give (measured on Gemma 3 270M, 2 CPU cores, in issue 16: ``generate`` spent 67% of an
evaluation re-prefilling earlier turns, kept a float32 ``[B, V]`` score tensor per step only to
read one log-probability, and kept finished rows in the batch):

* **A prefix cache across turns.** An episode's conversation only grows, so the keys and values of
  its earlier tokens stay valid. :class:`PrefixCache` keeps, per finished sequence, its KV cache
  keyed by its token ids; the next call whose prompt extends those ids prefills only the new
  tokens (the env's observation and the chat template's turn markers). Identical prompts in one
  call (a GRPO group's first turn) are prefilled once.
* **Log-probabilities as sampled.** The log-probability of each sampled token under the processed
  distribution (temperature, top-k, top-p) is gathered at the step it is drawn; no ``[B, T, V]``
  scores are kept.
* **Rows leave when they finish.** A row that samples an end token or completes a stop string is
  dropped from the batch (its cache stored first), so later steps run only live rows.

Sampling is inverse-CDF sampling in two levels. ``torch.multinomial`` and the exponential race
(``argmax(p / E)``, ``E ~ Exp(1)``) both touch the whole vocabulary several times per draw, and
on the CPU drawing 262,144 exponentials per row cost more than Gemma's forward pass (measured:
``exponential_`` was 33% of a batch-20 decode). Here one uniform per row picks a block of the
vocabulary from the block sums of ``exp(logits - max)``, then a token inside the block, so a draw
costs one ``exp`` pass and one sum over ``V``, plus cumulative sums over ``sqrt(V)`` entries. The
log-probability of the drawn token, ``logit - max - log(sum)``, comes from the same sums: no
``log_softmax`` over the vocabulary. A test checks the frequencies against ``softmax(logits)``.

Layout of a batch. Rows are left-padded so every row's tokens are contiguous and end at the same
column: ``[pad][cached tokens][new tokens]``. With ``Q`` the most new tokens of any row, a row
keeps ``max(0, len(prompt) - Q)`` of its cached tokens and feeds the rest (possibly a few cached
tokens again) as queries, so no row has a hole and the attention mask is the usual left-padding
mask. Positions are explicit (``cumsum(mask) - 1``), so a row's positions equal those of an
unpadded, uncached forward pass; sliding-window layers see the same window because cache columns
of a row are as far apart as its positions.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from textgym.checks import check_int

__all__ = [
    "DecodedRow",
    "PrefixCache",
    "decode",
    "process_logits",
    "sample_categorical",
]

#: The cached keys and values of one sequence: per layer, keys and values ``[H_kv, L, D]``.
SequenceKV = list[tuple[torch.Tensor, torch.Tensor]]


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


class PrefixCache:
    """KV caches of finished sequences, keyed by their token ids; least recently used go first.

    A lookup finds the longest stored sequence that is a prefix of a new prompt. Stored caches
    hold ``2 * layers * H_kv * D`` numbers per token (Gemma 3 270M: 9,216, i.e. 36 KiB per token in
    float32 and 18 KiB in bfloat16); ``max_tokens`` bounds the total.

    The cache is only valid for the weights that computed it: :meth:`validate` clears it when the
    model's parameters change (an optimizer step, ``load_state_dict``, a LoRA merge).

    Args:
        max_tokens: Most tokens kept over all entries, >= 0 (0 disables the cache).
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = check_int("max_tokens", max_tokens, low=0)
        self._entries: OrderedDict[tuple[int, ...], SequenceKV] = OrderedDict()
        self._num_tokens = 0
        self._weights_tag: object = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_tokens(self) -> int:
        """Tokens held over all entries."""
        return self._num_tokens

    def clear(self) -> None:
        """Drop every entry (frees their memory)."""
        self._entries.clear()
        self._num_tokens = 0

    def validate(self, model: Any) -> None:
        """Clear the cache if ``model``'s parameters changed since the last call.

        A parameter changes storage (``.to()``) or is written in place (optimizer steps,
        ``load_state_dict``, ``copy_``), which bumps its version counter; the tag is the tuple
        of every parameter's storage pointer and version.
        """
        tag = tuple((p.data_ptr(), p._version) for p in model.parameters())
        if tag != self._weights_tag:
            self.clear()
            self._weights_tag = tag

    def lookup(self, ids: Sequence[int]) -> tuple[tuple[int, ...] | None, SequenceKV | None]:
        """The longest stored sequence that is a prefix of ``ids`` (or equal to it).

        Returns:
            ``(key, layers)``, or ``(None, None)`` when nothing matches.
        """
        best: tuple[int, ...] | None = None
        for key in self._entries:
            length = len(key)
            if (
                length <= len(ids)
                and (best is None or length > len(best))
                and key[-1] == ids[length - 1]
                and key == tuple(ids[:length])
            ):
                best = key
        if best is None:
            return None, None
        self._entries.move_to_end(best)
        return best, self._entries[best]

    def store(self, ids: Sequence[int], kv: SequenceKV) -> None:
        """Keep the cache ``kv`` (per layer, keys and values ``[H, len(ids), D]``) of ``ids``."""
        key = tuple(int(i) for i in ids)
        if not key or len(key) > self.max_tokens:
            return
        self.discard(key)
        self._entries[key] = kv
        self._num_tokens += len(key)
        while self._num_tokens > self.max_tokens:
            old, _ = self._entries.popitem(last=False)
            self._num_tokens -= len(old)

    def discard(self, key: tuple[int, ...]) -> None:
        """Drop one entry if present."""
        if self._entries.pop(key, None) is not None:
            self._num_tokens -= len(key)


class _GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of buffers with room to spare.

    ``DynamicLayer.update`` concatenates, copying the layer's whole cache at every decode step
    (and briefly holding it twice); here a token is written in place. The buffers are
    reallocated, with ``spare`` free positions, only when full or after ``batch_select_indices``
    (which makes the keys a fresh tensor).
    """

    def __init__(self, spare: int) -> None:
        super().__init__()
        self.spare = spare
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = length + key_states.shape[-2]
        buffers = self._buffers
        if (
            buffers is None
            or buffers[0].shape[-2] < end
            or buffers[0].shape[0] != key_states.shape[0]
            or (length and buffers[0].data_ptr() != self.keys.data_ptr())
        ):
            buffers = tuple(
                states.new_empty((*states.shape[:2], end + self.spare, states.shape[-1]))
                for states in (key_states, value_states)
            )
            if length:
                buffers[0][:, :, :length] = self.keys
                buffers[1][:, :, :length] = self.values
            self._buffers = buffers
        buffers[0][:, :, length:end] = key_states
        buffers[1][:, :, length:end] = value_states
        self.keys, self.values = buffers[0][:, :, :end], buffers[1][:, :, :end]
        return self.keys, self.values


def _growing_cache(spare: int) -> DynamicCache:
    """An empty ``DynamicCache`` whose layers are :class:`_GrowingLayer`."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = functools.partial(_GrowingLayer, spare)
    return cache


@dataclass
class DecodedRow:
    """What :func:`decode` returns for one prompt.

    Attributes:
        ids: Generated token ids ``[T]``, the end token or the token that completed a stop
            string included.
        logprobs: ``[T]`` float log-probabilities of ``ids`` under the distribution each was
            drawn from.
        finish_reason: ``"stop"`` (end token or stop string) or ``"length"``.
    """

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"


@torch.no_grad()
def decode(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    end_ids: Sequence[int],
    pad_id: int,
    process: Callable[[torch.Tensor], torch.Tensor] | None,
    generator: torch.Generator | None = None,
    is_stopped: Callable[[list[int]], bool] | None = None,
    prefix_cache: PrefixCache | None = None,
    share_prefill: bool = True,
) -> list[DecodedRow]:
    """Generate one completion per prompt, reusing and filling ``prefix_cache``.

    Args:
        model: A ``transformers`` causal LM in eval mode whose forward takes ``past_key_values``
            (a ``DynamicCache``), ``position_ids`` and ``logits_to_keep``.
        prompts: ``N`` non-empty lists of token ids.
        max_new_tokens: Most tokens generated per row, >= 1.
        end_ids: Token ids that end a row (EOS, end of turn).
        pad_id: Id written in padded input positions (masked out).
        process: Maps ``[A, V]`` float32 logits to sampling logits (temperature, top-k, top-p);
            ``None`` decodes greedily, with log-probabilities of the unprocessed logits.
        generator: RNG of the draws; ``None`` uses torch's global RNG.
        is_stopped: Called with a row's generated ids after each token; ``True`` ends the row
            (stop strings).
        prefix_cache: Where earlier sequences' caches are looked up and finished rows' caches
            are stored; ``None`` prefills every prompt whole and keeps nothing.
        share_prefill: Prefill identical prompts once and copy the cache to their rows.

    Returns:
        ``N`` :class:`DecodedRow`, in prompt order.
    """
    device = model.device
    ends = torch.tensor(sorted(set(end_ids)), dtype=torch.long, device=device)
    unique: dict[tuple[int, ...], int] = {}
    if share_prefill:
        row_to_unique = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        unique_prompts = [list(p) for p in unique]
    else:
        row_to_unique, unique_prompts = list(range(len(prompts))), [list(p) for p in prompts]
    matches = [
        prefix_cache.lookup(p[:-1]) if prefix_cache is not None else (None, None)
        for p in unique_prompts
    ]
    cache, mask, logits = _prefill(model, unique_prompts, matches, pad_id, max_new_tokens)
    if prefix_cache is not None:
        for key, _ in matches:
            if key is not None:
                prefix_cache.discard(key)  # each such row stores a longer sequence below
    del matches  # free the consumed entries now, not after the decode

    select = torch.tensor(row_to_unique, dtype=torch.long, device=device)
    if len(unique_prompts) < len(prompts):
        cache.batch_select_indices(select)
        mask, logits = mask[select], logits[select]
    positions = mask.sum(dim=-1)  # [A]: position of each row's next token
    rows = [DecodedRow() for _ in prompts]
    live = list(range(len(prompts)))  # batch row a is prompt live[a]
    for step in range(max_new_tokens):
        tokens, logprobs = _draw(logits, process, generator)  # [A], [A]
        finished = torch.isin(tokens, ends).tolist() if ends.numel() else [False] * len(live)
        keep: list[int] = []
        done: list[tuple[int, int]] = []  # (batch row, prompt index) of rows that end here
        for a, (index, token, logprob) in enumerate(
            zip(live, tokens.tolist(), logprobs.tolist(), strict=True)
        ):
            row = rows[index]
            row.ids.append(token)
            row.logprobs.append(logprob)
            if finished[a] or (is_stopped is not None and is_stopped(row.ids)):
                row.finish_reason = "stop"
                done.append((a, index))
            elif step + 1 < max_new_tokens:
                keep.append(a)
            else:
                done.append((a, index))
        if prefix_cache is not None:
            for a, index in done:  # the cache holds the prompt and all ids but the last
                kv = _row_kv(cache, a, int(positions[a]))
                prefix_cache.store([*prompts[index], *rows[index].ids[:-1]], kv)
        if not keep:
            break
        if len(keep) < len(live):
            index_tensor = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(index_tensor)
            mask, positions, tokens = (
                mask[index_tensor],
                positions[index_tensor],
                tokens[index_tensor],
            )
            live = [live[a] for a in keep]
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)  # [A, S + 1]
        output = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        logits = output.logits[:, -1].float()  # [A, V]
        positions = positions + 1
    return rows


def _prefill(
    model: Any,
    prompts: list[list[int]],
    matches: list[tuple[tuple[int, ...] | None, SequenceKV | None]],
    pad_id: int,
    max_new_tokens: int,
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """Run the uncached tail of each prompt; see the module docstring for the layout.

    Returns:
        The batch cache (every layer ``[U, H, W + Q, D]``), the attention mask ``[U, W + Q]``
        long, and the last position's logits ``[U, V]`` float32.
    """
    device = model.device
    cached = [len(key) if key is not None else 0 for key, _ in matches]
    width_new = max(len(p) - c for p, c in zip(prompts, cached, strict=True))  # Q
    kept = [max(0, len(p) - width_new) for p in prompts]  # cached tokens each row keeps
    width_cache = max(kept)  # W
    input_ids = torch.full((len(prompts), width_new), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(prompts), width_cache + width_new, dtype=torch.long, device=device)
    for u, (prompt, k) in enumerate(zip(prompts, kept, strict=True)):
        tail = prompt[k:]
        input_ids[u, width_new - len(tail) :] = torch.tensor(tail, dtype=torch.long)
        mask[u, width_cache + width_new - len(prompt) :] = 1
    cache = _growing_cache(spare=width_new + max_new_tokens)
    if width_cache:
        _load_rows(cache, [kv for _, kv in matches], kept, width_cache)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)[:, width_cache:]  # [U, Q]
    output = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        # The last position as an index tensor, not ``logits_to_keep=1``: transformers slices
        # ``hidden[:, -1:]`` for an int, a strided view, and torch's linear on a strided 3-D
        # input with a weight that does not require grad (a frozen LoRA base, a merged adapter)
        # copies the whole LM-head weight once per row: 63 s instead of 0.07 s for Gemma's
        # 262,144 x 640 head at 28 rows (torch 2.13, CPU). Indexing gives a contiguous input.
        logits_to_keep=torch.tensor([width_new - 1], device=device),
    )
    return cache, mask, output.logits[:, -1].float()


def _load_rows(
    cache: DynamicCache, stored: list[SequenceKV | None], kept: list[int], width: int
) -> None:
    """Fill ``cache`` layer by layer, left-padded to ``width``: row ``u`` gets the first
    ``kept[u]`` positions of ``stored[u]`` at its right end."""
    template = next(kv for kv in stored if kv is not None)
    for layer, (keys, _) in enumerate(template):
        heads, _, dim = keys.shape
        states = keys.new_zeros((2, len(stored), heads, width, dim))  # keys, values
        for u, (kv, k) in enumerate(zip(stored, kept, strict=True)):
            if kv is not None and k:
                states[0, u, :, width - k :] = kv[layer][0][:, :k]
                states[1, u, :, width - k :] = kv[layer][1][:, :k]
        cache.update(states[0], states[1], layer)


def _row_kv(cache: DynamicCache, row: int, length: int) -> SequenceKV:
    """Copies of one row's last ``length`` cached positions, ``[H, length, D]`` per layer."""
    return [
        (layer.keys[row, :, -length:].clone(), layer.values[row, :, -length:].clone())
        for layer in cache.layers
    ]


def _draw(
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
