"""Batched sampling from a causal LM: per-row KV slots, each sequence's cache kept between calls.

This is the decoding behind :class:`textgym.policies.hf.HFPolicy`. It is our own rather than
``transformers``' ``generate`` because a multi-turn rollout needs things ``generate`` does not
give (measured on Gemma 3 270M, 2 CPU cores: ``generate`` spent 67% of an
evaluation re-prefilling earlier turns, kept a float32 ``[B, V]`` score tensor per step only to
read one log-probability, and kept computing finished rows); the first version of this loop
then ran at 7 tokens/s on an H100 (a new attention shape every step, a host sync
per token, a Python loop over rows, the cache copied whenever a row finished). Now:

* **Slots** (:mod:`textgym.policies.kv_slots`). Every row owns a preallocated slot of keys and
  values in the model's dtype, its tokens left-aligned (column = position). Shapes are fixed for
  a whole call, so on CUDA each decode step of a given ``(rows, width)`` is replayed as one CUDA
  graph (:class:`~textgym.policies.kv_slots.StepGraphs`), and the attention runs on PyTorch's
  memory-efficient SDPA kernel, never the cuDNN one that re-plans per shape.
* **A prefix cache across turns.** An episode's conversation only grows, so the keys and values of
  its earlier tokens stay valid. :class:`~textgym.policies.prefix_cache.PrefixCache` keeps, per
  finished sequence, a copy of its slot keyed by its token ids; the next call whose prompt
  extends those ids loads it and prefills only the new tokens. Identical prompts in one call (a
  GRPO group's first turn) are prefilled once and their slot copied.
* **Sampling and end detection on the device.** The next token, its log-probability under the
  processed distribution (temperature, top-k, top-p) and whether it ends the row (an end token,
  or a token sequence known to complete a stop string) are computed on the device; the host
  reads them every ``sync_every`` steps (every step on the CPU, where reads are free), checks
  stop strings on the decoded text, and learns the token sequences that completed them
  (sampling: :mod:`textgym.policies.sampling`).
* **Finished rows stay in their slots**, masked, so no cache is copied per finished row; when
  the live rows fall to half the batch (on the CPU: whenever one finishes) the live slots are
  moved to the front and the batch shrinks.

The engine that lives between calls (buffers, graphs, learned stop sequences) is
:class:`~textgym.policies.slot_decoder.SlotDecoder`; this module runs one call, its prefill and
its decode loop (:class:`_Call`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from textgym.policies.kv_slots import WIDTH_QUANTUM, SlotCache, graph_width
from textgym.policies.prefix_cache import PrefixCache
from textgym.policies.sampling import draw
from textgym.policies.slot_decoder import SlotDecoder

__all__ = ["DecodedRow", "decode"]


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
        engine: The model's :class:`~textgym.policies.slot_decoder.SlotDecoder` (buffers,
            graphs, learned stop sequences kept between calls); ``None`` builds one for this call.

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


_EMPTY = -1  # slot order entry of a padding slot or a row already handed out


@dataclass(eq=False)
class _Call:
    """The state of one :func:`decode` call (its arguments, as :func:`decode` names them); rows
    live in slots ``0..n-1`` of the engine."""

    engine: SlotDecoder
    prompts: list[list[int]]
    max_new_tokens: int
    end_ids: Sequence[int]
    pad_id: int
    process: Callable[[torch.Tensor], torch.Tensor] | None
    generator: torch.Generator | None
    is_stopped: Callable[[list[int]], bool] | None
    prefix_cache: PrefixCache | None
    share_prefill: bool

    def __post_init__(self) -> None:
        self.device = self.engine.device
        self.prompts = [list(map(int, p)) for p in self.prompts]
        self.end_set = {int(i) for i in self.end_ids}
        self.ends = torch.tensor(sorted(self.end_set), dtype=torch.long, device=self.device)
        self.rows = [DecodedRow() for _ in self.prompts]

    def run(self) -> list[DecodedRow]:
        logits = self._prefill()  # [N, V]; slot i holds prompt self.order[i]
        self._decode(logits)
        return self.rows

    # -- prefill ------------------------------------------------------------------------------
    def _prefill(self) -> torch.Tensor:
        prompts, engine = self.prompts, self.engine
        unique, copies = self._unique_prompts()
        self.order = list(range(len(prompts)))  # slot -> prompt index (after the prefill)
        self.longest = max(len(p) for p in prompts)
        width = self.longest + self.max_new_tokens + 1  # + scratch
        if engine.graphs.enabled:
            width = graph_width(width)
        else:
            width = -(-width // WIDTH_QUANTUM) * WIDTH_QUANTUM
        self.width = width
        cache = engine.reserve(self._rows(len(prompts)), width)
        width = self._columns(0)  # the prefill's active width
        cache.active_width = width
        cached = self._load_prefixes(cache, unique)
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

    def _unique_prompts(self) -> tuple[list[int], list[tuple[int, int]]]:
        """``(unique, copies)``: the prompt index of each prompt to prefill, in slot order, and
        ``(prompt index, slot of its unique twin)`` of each prompt that repeats an earlier one
        (with ``share_prefill``; else every prompt is prefilled)."""
        first: dict[tuple[int, ...], int] = {}
        unique: list[int] = []
        copies: list[tuple[int, int]] = []
        for index, prompt in enumerate(self.prompts):
            key = tuple(prompt)
            if self.share_prefill and key in first:
                copies.append((index, first[key]))
            else:
                first[key] = len(unique)
                unique.append(index)
        return unique, copies

    def _load_prefixes(self, cache: SlotCache, unique: list[int]) -> list[int]:
        """Load into slot ``i`` the longest cached prefix of prompt ``unique[i]`` (its last
        token excluded: it is fed to get the next token's logits); return the tokens loaded per
        slot (0 where nothing was cached)."""
        cached = []
        for slot, index in enumerate(unique):
            key, stored = (None, None)
            if self.prefix_cache is not None:
                key, stored = self.prefix_cache.lookup(self.prompts[index][:-1])
            length = len(key) if key is not None else 0
            if length:
                cache.load(slot, stored, length)
                self.prefix_cache.discard(key)  # the row stores a longer sequence when done
            cached.append(length)
        return cached

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
            tokens, token_logprobs = draw(logits, self.process, self.generator)  # [n] each
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
            width = self._columns(step + 1)
            logits = engine.decode_step(tokens, position, feed, self.pad_id, width)
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
