"""Batched sampling from a causal LM: per-row KV slots, each sequence's cache kept between calls.

This is the decode engine behind :class:`textgym.policies.hf.HFPolicy`. It is our own rather than
``transformers``' ``generate`` because a multi-turn rollout needs things ``generate`` does not
give (measured on Gemma 3 270M, 2 CPU cores, in issue 16: ``generate`` spent 67% of an
evaluation re-prefilling earlier turns, kept a float32 ``[B, V]`` score tensor per step only to
read one log-probability, and kept computing finished rows); issue 22 then found the first
version of this loop at 7 tokens/s on an H100 (a new attention shape every step, a host sync
per token, a Python loop over rows, the cache copied whenever a row finished). Now:

* **Slots** (:mod:`textgym.policies.kv_slots`). Every row owns a preallocated slot of keys and
  values in the model's dtype, its tokens left-aligned (column = position). Shapes are fixed for
  a whole call, so on CUDA each decode step of a given ``(rows, width)`` is replayed as one CUDA
  graph (:class:`~textgym.policies.kv_slots.StepGraphs`), and the attention runs on PyTorch's
  memory-efficient SDPA kernel, never the cuDNN one that re-plans per shape.
* **A prefix cache across turns.** An episode's conversation only grows, so the keys and values of
  its earlier tokens stay valid. :class:`PrefixCache` keeps, per finished sequence, a copy of its
  slot keyed by its token ids; the next call whose prompt extends those ids loads it and
  prefills only the new tokens. Identical prompts in one call (a GRPO group's first turn) are
  prefilled once and their slot copied.
* **Sampling and end detection on the device.** The next token, its log-probability under the
  processed distribution (temperature, top-k, top-p) and whether it ends the row (an end token,
  or a token sequence known to complete a stop string) are computed on the device; the host
  reads them every ``sync_every`` steps (every step on the CPU, where reads are free), checks
  stop strings on the decoded text, and learns the token sequences that completed them.
* **Finished rows stay in their slots**, masked, so no cache is copied per finished row; when
  the live rows fall to half the batch (on the CPU: whenever one finishes) the live slots are
  moved to the front and the batch shrinks.

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

import contextlib
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from textgym.checks import check_int
from textgym.policies.kv_slots import (
    WIDTH_QUANTUM,
    SlotCache,
    StepGraphs,
    attention_masks,
    cache_kwarg,
    slot_geometry,
)

__all__ = [
    "DecodeStats",
    "DecodedRow",
    "PrefixCache",
    "SlotDecoder",
    "decode",
    "process_logits",
    "sample_categorical",
]

#: The cached keys and values of one sequence: ``[layers, 2, H_kv, L, D]`` (keys, values).
SequenceKV = torch.Tensor


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
    (``[layers, 2, H_kv, L, D]`` tensors, :meth:`SlotCache.row`'s layout) hold
    ``2 * layers * H_kv * D`` numbers per token (Gemma 3 270M: 9,216, i.e. 36 KiB per token in
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
        """Keep the cache ``kv`` (``[layers, 2, H, len(ids), D]``) of ``ids``."""
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


@dataclass
class DecodeStats:
    """Work counters of a :class:`SlotDecoder`, summed over its calls.

    Attributes:
        prefill_tokens: Real (unpadded) prompt tokens run through the model in prefill passes;
            cached prefixes are not counted.
        decode_steps: Single-token forward passes over the batch.
        row_steps: Rows in those passes, summed (finished rows still in the batch included).
        host_syncs: Reads of device results by the host in the decode loop.
        compactions: Times the live slots were moved to the front and the batch shrank.
    """

    prefill_tokens: int = 0
    decode_steps: int = 0
    row_steps: int = 0
    host_syncs: int = 0
    compactions: int = 0


class SlotDecoder:
    """The decode engine of one model: slot buffers, CUDA graphs and learned stop sequences,
    kept between calls of :func:`decode`.

    Args:
        model: A ``transformers`` causal LM in eval mode with ``sdpa`` or ``eager`` attention.
        cuda_graphs: Replay decode steps as CUDA graphs (``None``: on CUDA devices).
        sync_every: Decode steps between host reads of the device results, >= 1 (``None``: 1
            on the CPU, 8 on CUDA).
        bucketed: Batch rows in powers of two, compacted only when the live rows fall to half
            (``None``: with CUDA graphs, which need few distinct shapes); else exactly the live
            rows, compacted whenever one finishes.
        sdpa_backends: PyTorch SDPA backends allowed on CUDA, in ``torch.nn.attention
            .SDPBackend`` names; the default leaves out cuDNN, which re-plans per shape.

    Raises:
        ValueError: an attention implementation other than ``sdpa`` or ``eager`` (e.g.
            ``flash_attention_2``, which takes no 4-D mask; decode with ``decoder="transformers"``).
    """

    def __init__(
        self,
        model: Any,
        *,
        cuda_graphs: bool | None = None,
        sync_every: int | None = None,
        sdpa_backends: Sequence[str] = ("EFFICIENT_ATTENTION", "MATH"),
        bucketed: bool | None = None,
    ) -> None:
        self.model = model
        self.geometry = slot_geometry(model)
        implementation = getattr(model.config, "_attn_implementation", "sdpa") or "sdpa"
        if implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"Expected a model with 'sdpa' or 'eager' attention for the slot decoder, got "
                f"{implementation!r}; load it with attn_implementation='sdpa' or use "
                "decoder='transformers'"
            )
        self.device = model.device
        self.dtype = next(model.parameters()).dtype
        self.additive = self.dtype if implementation == "eager" else None
        on_cuda = self.device.type == "cuda"
        self.sync_every = check_int("sync_every", sync_every or (8 if on_cuda else 1), low=1)

        self.sdpa_backends = tuple(sdpa_backends)
        self.cache_kwarg = cache_kwarg(model)
        self.cache: SlotCache | None = None
        self.stats = DecodeStats()
        self.stop_sequences: set[tuple[int, ...]] = set()
        # Per learned sequence: its ids [L] and the column offsets -L..-1 of a row's tail,
        # built once here rather than at every decode step.
        self._stop_tensors: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.graphs = StepGraphs(
            self._step, enabled=on_cuda if cuda_graphs is None else bool(cuda_graphs)
        )
        # Moving slots costs little next to a CPU forward, so the CPU compacts eagerly.
        self.bucketed = self.graphs.enabled if bucketed is None else bool(bucketed)
        self._tokens = self._cols = self._positions = None

    # -- buffers ------------------------------------------------------------------------------
    def reserve(self, rows: int, width: int) -> SlotCache:
        """Slot buffers of at least ``rows`` x ``width`` (reallocated, graphs dropped, if
        smaller); on the CPU exactly that size, freed at the end of the call."""
        cache = self.cache
        if cache is None or cache.rows < rows or cache.width < width:
            if cache is not None and self.device.type == "cuda":
                rows, width = max(rows, cache.rows), max(width, cache.width)
            self.cache = None  # free the old buffers before allocating
            self.graphs.clear()
            cache = SlotCache(self.geometry, rows, width, dtype=self.dtype, device=self.device)
            self.cache = cache
            long = {"dtype": torch.long, "device": self.device}
            self._tokens = torch.zeros(rows, 1, **long)
            self._cols = torch.zeros(rows, 1, **long)
            self._positions = torch.zeros(rows, 1, **long)
        return cache

    def release(self) -> None:
        """Free the slot buffers where nothing reuses them (the CPU: no graphs hold them)."""
        if not self.graphs.enabled:
            self.cache = None
            self._tokens = self._cols = self._positions = None

    def _attention(self) -> Any:
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, name) for name in self.sdpa_backends])

    # -- forward passes -----------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cols: torch.Tensor,
        width: int,
        last: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One forward pass of ``b`` rows (slots ``0..b-1``); returns ``[b, V]`` float32 logits
        of the last query (or of query ``last``, a 1-element long tensor).

        Args:
            input_ids: ``[b, q]`` long.
            positions: ``[b, q]`` long positions of the queries.
            cols: ``[b, q]`` long slot columns they are written to.
            width: Active slot width (the last active column is scratch).
        """
        cache = self.cache
        cache.write_cols = cols
        cache.active_width = width
        masks = attention_masks(self.geometry, positions, width, additive=self.additive)
        kwargs = {self.cache_kwarg: cache}
        if last is not None:
            # An index tensor, not ``logits_to_keep=1``: transformers slices ``hidden[:, -1:]``
            # for an int, a strided view, and torch's linear on a strided 3-D input with a
            # weight that does not require grad (a frozen LoRA base, a merged adapter) copies
            # the whole LM-head weight once per row: 63 s instead of 0.07 s for Gemma's
            # 262,144 x 640 head at 28 rows (torch 2.13, CPU). Indexing gives a contiguous input.
            kwargs["logits_to_keep"] = last
        with self._attention():
            output = self.model(
                input_ids=input_ids,
                attention_mask=masks,
                position_ids=positions,
                use_cache=True,
                **kwargs,
            )
        return output.logits[:, -1].float()

    def _step(self, rows: int) -> torch.Tensor:
        """One decode step on the static inputs of the first ``rows`` slots (graph-capturable)."""
        return self.forward(
            self._tokens[:rows],
            self._positions[:rows],
            self._cols[:rows],
            self.cache.active_width,
        )

    # -- stop sequences -----------------------------------------------------------------------
    def learn_stop(self, ids: Sequence[int]) -> None:
        """Remember a token sequence that completes a stop string (its text holds one)."""
        key = tuple(int(i) for i in ids)
        if key and key not in self.stop_sequences and len(self.stop_sequences) < 256:
            self.stop_sequences.add(key)
            ids_tensor = torch.tensor(key, dtype=torch.long, device=self.device)
            offsets = torch.arange(-len(key), 0, device=self.device)
            self._stop_tensors.append((ids_tensor, offsets))

    def stop_match(self, generated: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``[b]`` bool: rows whose generated ids ``[b, T]`` (``lengths`` ``[b]`` valid) end
        with a learned stop sequence."""
        hit = torch.zeros(generated.shape[0], dtype=torch.bool, device=generated.device)
        for sequence, offsets in self._stop_tensors:
            tail = generated.gather(1, (lengths[:, None] + offsets).clamp(min=0))  # [b, L]
            hit |= (tail == sequence).all(dim=1) & (lengths >= sequence.numel())
        return hit


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
    engine: SlotDecoder | None = None,
) -> list[DecodedRow]:
    """Generate one completion per prompt, reusing and filling ``prefix_cache``.

    Args:
        model: A ``transformers`` causal LM in eval mode (``sdpa`` or ``eager`` attention).
        prompts: ``N`` non-empty lists of token ids.
        max_new_tokens: Most tokens generated per row, >= 1.
        end_ids: Token ids that end a row (EOS, end of turn).
        pad_id: Id fed in padded and finished positions (never attended to).
        process: Maps ``[A, V]`` float32 logits to sampling logits (temperature, top-k, top-p);
            ``None`` decodes greedily, with log-probabilities of the unprocessed logits.
        generator: RNG of the draws; ``None`` uses torch's global RNG.
        is_stopped: Called with a row's generated ids (or a suffix of them); ``True`` when their
            text holds a stop string, which ends the row at the first token that completes it.
        prefix_cache: Where earlier sequences' caches are looked up and finished rows' caches
            are stored; ``None`` prefills every prompt whole and keeps nothing.
        share_prefill: Prefill identical prompts once and copy the slot to their rows.
        engine: The model's :class:`SlotDecoder` (buffers, graphs, learned stop sequences kept
            between calls); ``None`` builds one for this call.

    Returns:
        ``N`` :class:`DecodedRow`, in prompt order.
    """
    engine = engine if engine is not None else SlotDecoder(model)
    try:
        return _Call(
            engine,
            prompts,
            max_new_tokens,
            end_ids,
            pad_id,
            process,
            generator,
            is_stopped,
            prefix_cache,
            share_prefill,
        ).run()
    finally:
        engine.release()


class _Call:
    """The state of one :func:`decode` call; rows live in slots ``0..n-1`` of the engine."""

    def __init__(
        self,
        engine: SlotDecoder,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        end_ids: Sequence[int],
        pad_id: int,
        process: Callable[[torch.Tensor], torch.Tensor] | None,
        generator: torch.Generator | None,
        is_stopped: Callable[[list[int]], bool] | None,
        prefix_cache: PrefixCache | None,
        share_prefill: bool,
    ) -> None:
        self.engine, self.device = engine, engine.device
        self.prompts = [list(map(int, p)) for p in prompts]
        self.max_new_tokens, self.pad_id = max_new_tokens, pad_id
        self.process, self.generator, self.is_stopped = process, generator, is_stopped
        self.prefix_cache, self.share_prefill = prefix_cache, share_prefill
        self.end_set = {int(i) for i in end_ids}
        self.ends = torch.tensor(sorted(self.end_set), dtype=torch.long, device=self.device)
        self.rows = [DecodedRow() for _ in self.prompts]

    def run(self) -> list[DecodedRow]:
        logits = self._prefill()  # [N, V]; slot i holds prompt self.order[i]
        self._decode(logits)
        return self.rows

    # -- prefill ------------------------------------------------------------------------------
    def _prefill(self) -> torch.Tensor:
        prompts, engine = self.prompts, self.engine
        first: dict[tuple[int, ...], int] = {}
        unique: list[int] = []  # prompt index of each unique prompt, in slot order
        copies: list[tuple[int, int]] = []  # (prompt index, slot of its unique twin)
        for index, prompt in enumerate(prompts):
            key = tuple(prompt)
            if self.share_prefill and key in first:
                copies.append((index, first[key]))
            else:
                first[key] = len(unique)
                unique.append(index)
        self.order = list(range(len(prompts)))  # slot -> prompt index (after the prefill)
        self.longest = max(len(p) for p in prompts)
        width = self.longest + self.max_new_tokens + 1  # + scratch
        width = -(-width // WIDTH_QUANTUM) * WIDTH_QUANTUM
        self.width = width
        cache = engine.reserve(self._rows(len(prompts)), width)
        width = self._columns(0)  # the prefill's active width
        cache.active_width = width
        cached = []
        for slot, index in enumerate(unique):
            key, stored = (None, None)
            if self.prefix_cache is not None:
                key, stored = self.prefix_cache.lookup(prompts[index][:-1])
            length = len(key) if key is not None else 0
            if length:
                cache.load(slot, stored, length)
                self.prefix_cache.discard(key)  # the row stores a longer sequence when done
            cached.append(length)
        tails = [prompts[index][length:] for index, length in zip(unique, cached, strict=True)]
        queries = max(len(t) for t in tails)
        ids = torch.full((len(unique), queries), self.pad_id, dtype=torch.long)
        cols = torch.full((len(unique), queries), width - 1, dtype=torch.long)  # scratch
        positions = torch.zeros((len(unique), queries), dtype=torch.long)
        for slot, (tail, length) in enumerate(zip(tails, cached, strict=True)):
            start = queries - len(tail)  # left-padded queries: every row's last one is last
            ids[slot, start:] = torch.tensor(tail, dtype=torch.long)
            span = torch.arange(length, length + len(tail))
            cols[slot, start:] = span
            positions[slot, start:] = span
        engine.stats.prefill_tokens += sum(len(t) for t in tails)
        logits = engine.forward(
            ids.to(self.device),
            positions.to(self.device),
            cols.to(self.device),
            width,
            last=torch.tensor([queries - 1], device=self.device),
        )  # [U, V]
        # Slots in prompt order (so the draws do not depend on prefill sharing): slot i gets
        # the slot its prompt was prefilled in.
        source = [0] * len(prompts)
        for slot, index in enumerate(unique):
            source[index] = slot
        for index, slot in copies:
            source[index] = slot
        if source != list(range(len(prompts))):
            cache.fill_from(source, self.longest)
            logits = logits[torch.tensor(source, device=self.device)]
        return logits

    # -- decode -------------------------------------------------------------------------------
    def _rows(self, live: int) -> int:
        """Batch rows for ``live`` live rows: on CUDA the next power of two (one CUDA graph per
        size), else exactly ``live``."""
        if not self.engine.bucketed:
            return live
        return 1 << (live - 1).bit_length()

    def _columns(self, fed: int) -> int:
        """Active slot width once ``fed`` tokens per row have been fed after the prompt.

        With CUDA graphs, the call's whole width (one graph per width). Without, only the
        columns a query can see, plus scratch: a position is at most ``max prompt + fed - 1``,
        so the scratch column ``max prompt + fed`` (rounded up to 16) is past every live
        row's; finished rows and padded queries write their own slot's scratch, beyond their
        valid prefix. The attention then reads what the old growing cache read.
        """
        if self.engine.graphs.enabled:
            return self.width
        needed = self.longest + fed + 1
        return min(self.width, -(-needed // 16) * 16)

    def _decode(self, logits: torch.Tensor) -> None:
        engine, cache, device = self.engine, self.engine.cache, self.device
        steps = self.max_new_tokens
        count = len(self.order)
        rows = self._rows(count)
        self.order += [_EMPTY] * (rows - count)  # padding slots: done from the start
        if rows > count:
            logits = torch.cat([logits, logits[:1].expand(rows - count, -1)])
        position = torch.tensor(
            [len(self.prompts[i]) if i >= 0 else 0 for i in self.order], device=device
        )
        done = torch.tensor([i < 0 for i in self.order], device=device)
        lengths = torch.zeros(rows, dtype=torch.long, device=device)
        generated = torch.full((rows, steps), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        checked = [0] * rows  # tokens of each slot already checked for stop strings
        for step in range(steps):
            tokens, token_logprobs = _draw(logits, self.process, self.generator)  # [n] each
            active = ~done
            generated[:, step] = torch.where(active, tokens, self.pad_id)
            logprobs[:, step] = torch.where(active, token_logprobs, 0.0)
            lengths += active
            last = step + 1 == steps
            if last:
                ending = active
            else:
                ending = torch.isin(tokens, self.ends) if self.ends.numel() else active & False
                if engine._stop_tensors:
                    ending = ending | engine.stop_match(generated, lengths)
            done = done | (active & ending)
            if last or (step + 1) % engine.sync_every == 0:
                engine.stats.host_syncs += 1
                done, kept = self._sync(done, generated, logprobs, lengths, checked)
                if not kept:
                    return
                target = self._rows(len(kept))
                if len(kept) < rows and (not engine.bucketed or target < rows):
                    index = torch.tensor(kept, device=device)
                    if engine.bucketed:  # rare (at halvings): one gather of every live slot
                        cache.copy_rows(index, torch.arange(len(kept), device=device))
                    else:  # often (each time a row ends): move only the slots that shift
                        cache.compact(kept, self._columns(step + 1))
                    if target > len(kept):  # pad with a finished slot
                        index = torch.cat([index, index.new_full((target - len(kept),), -1)])
                    fill = list(kept) + [None] * (target - len(kept))
                    self.order = [self.order[k] if k is not None else _EMPTY for k in fill]
                    checked = [checked[k] if k is not None else 0 for k in fill]
                    position, lengths, tokens = position[index], lengths[index], tokens[index]
                    generated, logprobs = generated[index], logprobs[index]
                    done = torch.tensor([i < 0 for i in self.order], device=device)
                    rows = target
                    engine.stats.compactions += 1
            feed = ~done
            active_width = self._columns(step + 1)
            cache.active_width = active_width
            engine._tokens[:rows, 0] = torch.where(feed, tokens, self.pad_id)
            engine._cols[:rows, 0] = torch.where(feed, position, active_width - 1)
            engine._positions[:rows, 0] = torch.where(feed, position, 0)
            logits = engine.graphs(rows, active_width)
            engine.stats.decode_steps += 1
            engine.stats.row_steps += rows
            position = position + feed

    def _sync(
        self,
        done: torch.Tensor,
        generated: torch.Tensor,
        logprobs: torch.Tensor,
        lengths: torch.Tensor,
        checked: list[int],
    ) -> tuple[torch.Tensor, list[int]]:
        """Read the device state (one transfer); end rows on stop strings; hand finished rows
        out to :attr:`rows` (storing their caches).

        Returns:
            The updated ``done`` and the slots still live, in order.
        """
        state = torch.cat([done[:, None].long(), lengths[:, None], generated], dim=1).tolist()
        newly: list[int] = []
        for slot, (is_done, length, *ids) in enumerate(state):
            if self.order[slot] < 0:  # padding, or already handed out
                continue
            ids = ids[:length]
            cut = self._stop_at(ids, checked[slot])
            checked[slot] = length
            if cut is not None or is_done:
                newly.append(slot)
                self._finish(slot, ids[: cut or length], cut is not None)
        if newly:
            host_logprobs = logprobs[newly].tolist()
            for slot, row_logprobs in zip(newly, host_logprobs, strict=True):
                row = self.rows[self.order[slot]]
                row.logprobs = row_logprobs[: len(row.ids)]
                self.order[slot] = _EMPTY
            done = done.clone()
            done[torch.tensor(newly, device=self.device)] = True
        kept = [slot for slot, index in enumerate(self.order) if index >= 0]
        return done, kept

    def _stop_at(self, ids: list[int], checked: int) -> int | None:
        """The number of tokens up to the first that completes a stop string, else ``None``;
        teaches the engine the shortest token suffix that completed it."""
        if self.is_stopped is None or len(ids) <= checked or not self.is_stopped(ids):
            return None
        end = next(e for e in range(max(checked, 1), len(ids) + 1) if self.is_stopped(ids[:e]))
        start = next(s for s in range(end - 1, -1, -1) if self.is_stopped(ids[s:end]))
        self.engine.learn_stop(ids[start:end])
        return end

    def _finish(self, slot: int, ids: list[int], stopped: bool) -> None:
        """Record a finished row's ids and finish reason; store its cache."""
        index = self.order[slot]
        row = self.rows[index]
        row.ids = ids
        ended = stopped or (bool(ids) and ids[-1] in self.end_set)
        row.finish_reason = "stop" if ended else "length"
        if self.prefix_cache is not None and ids:
            stored = len(self.prompts[index]) + len(ids) - 1  # the last id was never fed
            key = [*self.prompts[index], *ids[:-1]]
            self.prefix_cache.store(key, self.engine.cache.row(slot, stored))


_EMPTY = -1  # slot order entry of a padding slot or a row already handed out


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
