"""The decode engine of one model: slot buffers, forward passes over slots, CUDA graphs of the
decode step and the stop sequences it has learned, all kept between calls of
:func:`textgym.policies.decoding.decode` (which runs one call's prefill and decode loop).

Every row owns a preallocated slot of keys and values (:mod:`textgym.policies.kv_slots`), so
shapes are fixed for a whole call: on CUDA each decode step of a given ``(rows, width)`` is
replayed as one CUDA graph, and the attention runs on PyTorch's memory-efficient SDPA kernel,
never the cuDNN one that re-plans per shape. A token sequence that once completed a stop string
is learned (:meth:`SlotDecoder.learn_stop`) and matched on the device from then on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from textgym.checks import check_int
from textgym.policies.fused import count_kernels
from textgym.policies.kv_slots import (
    SlotCache,
    StepGraphs,
    attention_masks,
    cache_kwarg,
    library_packs_gqa,
    register_packed_gqa_sdpa,
    slot_geometry,
)

__all__ = ["DecodeStats", "SlotDecoder"]


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
        graph_captures: CUDA graphs captured (one per new ``(rows, width)``).
        graph_capture_s: Seconds spent capturing them, warm-up runs and checks included.
        kernels_per_step: Kernels of one decode step run eagerly (CUDA kernels on a GPU, else
            the CPU's compute operators; :func:`textgym.policies.fused.count_kernels`),
            counted once at the first step when the engine's ``count_kernels`` is set; ``None``
            otherwise.
    """

    prefill_tokens: int = 0
    decode_steps: int = 0
    row_steps: int = 0
    host_syncs: int = 0
    compactions: int = 0
    graph_captures: int = 0
    graph_capture_s: float = 0.0
    kernels_per_step: int | None = None


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
        packed_gqa: Run decode steps of a GQA model on its key/value heads without expanding
            them (:func:`~textgym.policies.kv_slots.packed_gqa_sdpa`; ``None``: with ``sdpa``
            attention where the installed ``transformers`` does not already do it).
        count_kernels: Profile the first decode step once (an extra eager run of it) and report
            its kernels in :attr:`DecodeStats.kernels_per_step` (not while a caller's
            ``torch.profiler`` records).

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
        packed_gqa: bool | None = None,
        count_kernels: bool = False,
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
        if packed_gqa is None:
            packed_gqa = implementation == "sdpa" and not library_packs_gqa()
        # The attention implementation set on the config for the engine's own forward passes
        # (training and ``generate`` keep the model's): the name transformers dispatches on.
        self._attention_name = (
            register_packed_gqa_sdpa() if packed_gqa and implementation == "sdpa" else None
        )
        self.device = model.device
        self.dtype = next(model.parameters()).dtype
        self.additive = self.dtype if implementation == "eager" else None
        on_cuda = self.device.type == "cuda"
        self.sync_every = check_int("sync_every", sync_every or (8 if on_cuda else 1), low=1)

        self.count_kernels = bool(count_kernels)
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
        smaller); on the CPU exactly that size, freed at the end of the call.

        On CUDA the buffers never shrink, and with CUDA graphs a wider cache is at least twice
        as wide as the old one: graphs hold the buffers' addresses, so every reallocation
        drops them all, and a conversation that grows every turn should cost a few
        reallocations and recaptures per run, not one per turn.
        """
        cache = self.cache
        if cache is None or cache.rows < rows or cache.width < width:
            if cache is not None and (self.device.type == "cuda" or self.graphs.enabled):
                if self.graphs.enabled and width > cache.width:
                    width = max(width, 2 * cache.width)
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

    @contextlib.contextmanager
    def _attention(self) -> Any:
        """The engine's attention for one forward pass: its SDPA backends on CUDA, and the
        packed-GQA implementation where enabled (the model's own restored after)."""
        with contextlib.ExitStack() as stack:
            if self.device.type == "cuda":
                from torch.nn.attention import SDPBackend, sdpa_kernel

                stack.enter_context(
                    sdpa_kernel([getattr(SDPBackend, name) for name in self.sdpa_backends])
                )
            config = self.model.config
            previous = getattr(config, "_attn_implementation_internal", None)
            if self._attention_name is not None:
                # The internal attribute, not the setter: this config has no sub-configs to
                # update, and the setter would walk them on every decode step.
                config._attn_implementation_internal = self._attention_name
            try:
                yield
            finally:
                if self._attention_name is not None:
                    config._attn_implementation_internal = previous

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

    def decode_step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        feed: torch.Tensor,
        pad_id: int,
        width: int,
    ) -> torch.Tensor:
        """One decode step of the first ``b`` slots, replayed as a CUDA graph where enabled.

        Args:
            tokens: ``[b]`` long, the token each row feeds where ``feed``.
            positions: ``[b]`` long, its position (and slot column).
            feed: ``[b]`` bool; the other rows (finished, padding) feed ``pad_id`` at position 0
                into the scratch column ``width - 1``.
            pad_id: Id fed where not ``feed``.
            width: Active slot width.

        Returns:
            ``[b, V]`` float32 logits of the next token.
        """
        rows = tokens.shape[0]
        self.cache.active_width = width
        self._tokens[:rows, 0] = torch.where(feed, tokens, pad_id)
        self._cols[:rows, 0] = torch.where(feed, positions, width - 1)
        self._positions[:rows, 0] = torch.where(feed, positions, 0)
        # Checked only while a count is owed (not on every step); never under a caller's
        # profiler, which a second one would end.
        if (
            self.count_kernels
            and self.stats.kernels_per_step is None
            and not torch.autograd.profiler._is_profiler_enabled
        ):
            # The same inputs rewrite the same cache column, so this extra run changes nothing.
            self.stats.kernels_per_step = count_kernels(lambda: self._step(rows))
        captures, capture_s = self.graphs.captures, self.graphs.capture_s
        logits = self.graphs(rows, width)
        self.stats.graph_captures += self.graphs.captures - captures
        self.stats.graph_capture_s += self.graphs.capture_s - capture_s
        self.stats.decode_steps += 1
        self.stats.row_steps += rows
        return logits

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
