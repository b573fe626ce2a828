"""Preallocated per-row KV slots, their attention masks, and CUDA graphs of a decode step.

The storage behind :func:`textgym.policies.decoding.decode`. Every row of a decode call owns a
*slot*: one row of a preallocated buffer ``kv[layer, key|value, row, head, column, dim]`` in the
model's dtype. A row's tokens sit left-aligned in its slot, so **column = position**: row ``r``'s
token at position ``p`` is in column ``p``. Rows of different lengths need no padding and no
shared column layout; each forward pass writes its new keys and values at per-row columns
(:attr:`SlotCache.write_cols`) and the attention mask allows, per query at position ``p``, the
columns ``c <= p`` (and ``c > p - window`` on sliding-window layers, the rule of ``transformers``'
``sliding_window_overlay``). The last column is scratch: padded queries and finished rows write
there and no query ever reads it.

Why not ``transformers``' caches: ``DynamicCache`` concatenates (a copy of the layer per token and
a new shape per step, which made PyTorch's cuDNN attention re-plan at every step on an H100),
and ``StaticCache`` writes one ``cache_position`` shared by all rows, so rows of a
multi-turn batch, whose cached lengths differ, would need a common left-padded layout rebuilt at
every turn. Here shapes are fixed per call, finished rows stay in place (masked), and the
decode step of a given ``(rows, width)`` is one CUDA graph (:class:`StepGraphs`).
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache

__all__ = ["SlotCache", "StepGraphs", "attention_masks", "cache_kwarg", "slot_geometry"]

#: Widths of the slot buffers are multiples of this (whole 16-element rows of the mask suit
#: the memory-efficient SDPA kernel; fewer distinct widths mean fewer CUDA graphs).
WIDTH_QUANTUM = 64


def graph_width(needed: int) -> int:
    """The slot width a CUDA-graphed call uses for ``needed`` columns: the smallest of
    ``WIDTH_QUANTUM`` x (1, 2, 3, 4, 6, 8, 12, ...) (powers of two and 1.5 times them) that holds
    them.

    One graph is captured per ``(rows, width)``, so widths grow geometrically: a multi-turn
    rollout whose prompts lengthen every turn reuses a few graphs instead of capturing one per
    turn, at most 50% (on average about 20%) more masked columns read per step.
    """
    units = max(1, -(-needed // WIDTH_QUANTUM))
    power = 1 << (units - 1).bit_length()  # the smallest power of two >= units
    half_step = 3 * power // 4  # 1.5 times the power below; 0 when power is 1
    return WIDTH_QUANTUM * (half_step if half_step >= units else power)


def cache_kwarg(model: Any) -> str:
    """The forward keyword that takes the KV cache: ``cache`` since transformers 5.2x, earlier
    ``past_key_values`` (still accepted there with a ``FutureWarning``)."""
    try:
        parameters = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - C-implemented forward
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def slot_geometry(model: Any) -> dict[str, Any]:
    """Layer count, KV heads, head size and attention layout of a ``transformers`` causal LM.

    Returns:
        ``{"layers", "heads", "dim", "layer_types", "window", "mapping"}``: ``layer_types`` is
        one of ``"full_attention"`` / ``"sliding_attention"`` per layer, ``window`` the sliding
        window in tokens (``None`` without one), and ``mapping`` whether the model takes one mask
        per layer type as a dict (models that mix both kinds, e.g. Gemma 3) or a single mask.

    Raises:
        ValueError: a config without the usual ``num_hidden_layers`` / ``num_attention_heads``.
    """
    config = model.config
    config = getattr(config, "get_text_config", lambda: config)()
    try:
        layers = int(config.num_hidden_layers)
        heads_q = int(config.num_attention_heads)
    except AttributeError as error:
        raise ValueError(
            f"Expected a causal LM config with num_hidden_layers and num_attention_heads, got "
            f"{type(config).__name__}; decode it with decoder='transformers'"
        ) from error
    heads = int(getattr(config, "num_key_value_heads", None) or heads_q)
    dim = getattr(config, "head_dim", None) or config.hidden_size // heads_q
    window = getattr(config, "sliding_window", None)
    types = list(getattr(config, "layer_types", None) or [])
    if len(types) != layers:
        types = ["sliding_attention" if window else "full_attention"] * layers
    return {
        "layers": layers,
        "heads": heads,
        "dim": int(dim),
        "layer_types": types,
        "window": int(window) if window else None,
        "mapping": len(set(types)) > 1,
    }


class SlotCache(DynamicCache):
    """A KV cache of per-row slots that a ``transformers`` forward pass writes into.

    ``kv`` is ``[layers, 2, rows, heads, width, dim]`` (keys at index 0, values at 1); the last
    active column is scratch. Before each forward pass the caller sets :attr:`active_width` (the
    leading columns in use, <= ``width``) and :attr:`write_cols` (``[b, q]`` long: the column
    each new token of batch row ``i`` goes to; the batch rows are slots ``0..b-1``), and the
    layers return those ``b`` rows' slots, ``active_width`` columns, for the attention to read
    under the caller's mask.

    Args:
        geometry: :func:`slot_geometry` of the model.
        rows: Slots, >= 1.
        width: Columns per slot including the scratch column, >= 2.
        dtype: Dtype of the keys and values (the model's).
        device: Where the buffer lives.
    """

    def __init__(
        self,
        geometry: dict[str, Any],
        rows: int,
        width: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.geometry = geometry
        shape = (geometry["layers"], 2, rows, geometry["heads"], width, geometry["dim"])
        self.kv = torch.zeros(shape, dtype=dtype, device=device)
        self.active_width = width  # columns the next forward passes use (a prefix of width)
        self.write_cols = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self._row_index = torch.arange(rows, device=device)[:, None]  # [rows, 1]

    @property
    def rows(self) -> int:
        return self.kv.shape[2]

    @property
    def width(self) -> int:
        """Columns per slot, the scratch column included."""
        return self.kv.shape[4]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kw
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``[b, H, q, D]`` new keys and values at :attr:`write_cols`; return the ``b``
        rows' slots, ``[b, H, active_width, D]`` each."""
        rows, queries = key_states.shape[0], key_states.shape[2]
        cols = self.write_cols
        if cols.shape != (rows, queries):
            raise ValueError(
                f"Expected write_cols of shape {(rows, queries)} for this forward pass, got "
                f"{tuple(cols.shape)}"
            )
        width = self.active_width
        keys = self.kv[layer_idx, 0, :rows, :, :width]
        values = self.kv[layer_idx, 1, :rows, :, :width]
        index = self._row_index[:rows]  # [b, 1], broadcast against cols [b, q]
        # Advanced indices on dims 0 and 2 put their [b, q] shape first: [b, q, H, D].
        keys[index, :, cols] = key_states.transpose(1, 2).to(keys.dtype)
        values[index, :, cols] = value_states.transpose(1, 2).to(values.dtype)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.active_width - 1

    def row(self, row: int, length: int) -> torch.Tensor:
        """A copy of one slot's first ``length`` columns, ``[layers, 2, H, length, D]``."""
        return self.kv[:, :, row, :, :length].clone()

    def load(self, row: int, stored: torch.Tensor, length: int) -> None:
        """Write the first ``length`` columns of ``stored`` (:meth:`row`'s layout) to a slot."""
        self.kv[:, :, row, :, :length] = stored[:, :, :, :length]

    def compact(self, kept: list[int], columns: int) -> None:
        """Move slots ``kept`` (ascending) to the front, ``kept[i]`` to ``i``, copying only
        the slots that move and only their first ``columns`` columns (in order, so a slot is
        read before anything overwrites it: ``kept[i] >= i``)."""
        for target, source in enumerate(kept):
            if source != target:
                self.kv[:, :, target, :, :columns].copy_(self.kv[:, :, source, :, :columns])

    def copy_rows(self, sources: torch.Tensor, targets: torch.Tensor) -> None:
        """Slots ``targets[i]`` become copies of slots ``sources[i]`` (``[n]`` long each), all
        columns, in one gather (the CUDA path)."""
        self.kv[:, :, targets] = self.kv[:, :, sources]

    def fill_from(self, sources: list[int], columns: int) -> None:
        """Slot ``i`` becomes a copy of slot ``sources[i]``'s first ``columns`` columns, for
        ``sources[i] <= i`` (each prompt's prefilled slot comes no later than the prompt):
        copied from the last slot down, so no source is overwritten before it is read, and
        one slot at a time (on the CPU a gather of every slot cost 99 ms a call)."""
        for target in range(len(sources) - 1, -1, -1):
            source = sources[target]
            if source != target:
                self.kv[:, :, target, :, :columns].copy_(self.kv[:, :, source, :, :columns])


#: The ``transformers`` attention implementation the engine registers: SDPA whose single-query
#: steps attend on the key/value heads directly (:func:`packed_gqa_sdpa`).
PACKED_GQA_SDPA = "textgym_packed_gqa_sdpa"


def library_packs_gqa() -> bool:
    """Whether ``transformers``' own SDPA attention already runs a single-query step on the
    key/value heads without expanding them (its ``pack_gqa``, in releases after 5.17)."""
    from transformers.integrations import sdpa_attention

    return hasattr(sdpa_attention, "pack_gqa")


def packed_gqa_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``transformers``' SDPA attention, except a decode step (one query per row) of a GQA
    model, which attends on the key/value heads directly.

    With a mask, ``transformers`` 5.17 expands keys and values to every query head before SDPA
    (``repeat_kv``): for Gemma 3 270M (4 query heads, 1 KV head) each decode step then copies
    the whole cache 4 times. Here the ``G`` query heads of one KV head become ``G`` query rows
    of that head instead, which the mask ``[b, 1, 1, W]`` covers by broadcasting; later
    ``transformers`` releases do the same (their ``pack_gqa``), and the engine uses this
    function only where the installed one does not (:func:`library_packs_gqa`).

    Args:
        module: The attention layer (its ``num_key_value_groups`` is ``G``).
        query: ``[b, H, q, D]``; packed only when ``q == 1``.
        key: ``[b, H_kv, W, D]``, ``H = H_kv * G``.
        value: ``[b, H_kv, W, D]``.
        attention_mask: ``[b, 1, q, W]`` boolean or additive, or ``None``.

    Returns:
        ``([b, q, H, D] attention output, None)``, the layout ``transformers`` expects.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups == 1
        or query.shape[2] != 1
        or (attention_mask is not None and attention_mask.shape[1] != 1)
        or kwargs.get("softcap") is not None
        or kwargs.get("position_bias") is not None
        or dropout
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    rows, heads, _, dim = query.shape
    # repeat_kv's order: query head h reads KV head h // G, so heads regroup as [H_kv, G].
    packed = query.reshape(rows, heads // groups, groups, dim)  # [b, H_kv, G, D]
    output = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, scale=scaling
    )  # [b, H_kv, G, D]
    return output.reshape(rows, heads, 1, dim).transpose(1, 2).contiguous(), None


def register_packed_gqa_sdpa() -> str:
    """Register :func:`packed_gqa_sdpa` with ``transformers`` (idempotent); returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_GQA_SDPA, packed_gqa_sdpa)
    return PACKED_GQA_SDPA


def attention_masks(
    geometry: dict[str, Any],
    positions: torch.Tensor,
    width: int,
    *,
    additive: torch.dtype | None = None,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The 4-D attention mask(s) of queries at ``positions`` over slots of ``width`` columns.

    A query at position ``p`` sees columns ``c <= p`` (causal; column = position) that are not
    the scratch column, and on sliding-window layers only ``c > p - window``.

    Args:
        geometry: :func:`slot_geometry` of the model.
        positions: ``[b, q]`` long positions of the queries (padded queries may hold anything
            in ``[0, width - 2]``; their outputs are ignored).
        width: Slot width including the scratch column.
        additive: ``None`` for boolean masks (``True`` = attend; SDPA), or a float dtype for
            additive masks (0 / the dtype's minimum; eager attention).

    Returns:
        ``[b, 1, q, width]`` mask, or for a model with both layer kinds a dict
        ``{"full_attention": mask, "sliding_attention": mask}``.
    """
    columns = torch.arange(width, device=positions.device)  # [W]
    query = positions[:, :, None]  # [b, q, 1]
    allowed = (columns <= query) & (columns < width - 1)  # [b, q, W]
    masks = {"full_attention": allowed}
    if geometry["window"]:
        masks["sliding_attention"] = allowed & (columns > query - geometry["window"])
    if additive is not None:
        low = torch.finfo(additive).min
        masks = {
            kind: torch.zeros(mask.shape, dtype=additive, device=mask.device).masked_fill_(
                ~mask, low
            )
            for kind, mask in masks.items()
        }
    masks = {kind: mask[:, None] for kind, mask in masks.items()}  # [b, 1, q, W]
    if geometry["mapping"]:
        return masks
    return masks[geometry["layer_types"][0]]


class StepGraphs:
    """CUDA graphs of one decode step, one per ``(rows, width)``, each checked against eager.

    A decode step (write this token's keys and values, attend, compute logits) is idempotent:
    running it twice on the same inputs writes the same values to the same columns. So a new
    graph is captured after two eager warm-up runs, replayed once, and its logits compared with
    the eager run's; a capture that raises or disagrees (beyond ``rtol``) turns graphs off for
    this engine with one warning, and decoding goes on eagerly. About 1,400 kernel launches per
    step of Gemma 3 270M (profiled on an H100) become one graph launch.

    Args:
        step: Runs one step eagerly on the static inputs; returns ``[rows, V]`` logits.
        enabled: Capture graphs at all (``False`` on the CPU).
        rtol: Largest allowed difference between graph and eager logits, relative to the
            largest eager logit magnitude (plus 1).
    """

    def __init__(self, step: Callable[[int], torch.Tensor], *, enabled: bool, rtol: float = 1e-2):
        self.step = step
        self.enabled = enabled
        self.rtol = rtol
        self._graphs: dict[tuple[int, int], tuple[Any, torch.Tensor]] = {}
        self._pool: Any = None
        #: Graphs captured, and the seconds their captures took (warm-up runs and check
        #: included), over this object's life.
        self.captures = 0
        self.capture_s = 0.0

    def clear(self) -> None:
        """Drop every graph (their buffers are about to be reallocated) and their memory pool.

        The pool goes with them: once its last graph is gone, PyTorch's caching allocator keeps
        the pool with a use count of 0 until its blocks are freed, and a capture into it
        then fails its ``use_count > 0`` assert (seen on an H200, torch 2.11, at the first
        capture after a wider cache). The next capture starts a fresh pool.
        """
        self._graphs.clear()
        self._pool = None

    def __call__(self, rows: int, width: int) -> torch.Tensor:
        """Logits ``[rows, V]`` of one step on the first ``rows`` slots."""
        if not self.enabled:
            return self.step(rows)
        key = (rows, width)
        if key not in self._graphs:
            start = time.perf_counter()
            captured = self._capture(rows)
            self.capture_s += time.perf_counter() - start
            if captured is None:
                return self.step(rows)
            self._graphs[key] = captured
        graph, logits = self._graphs[key]
        graph.replay()
        return logits

    def _capture(self, rows: int) -> tuple[Any, torch.Tensor] | None:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up: lazy initialisation, allocator, kernel choice
                    eager = self.step(rows).clone()
            torch.cuda.current_stream().wait_stream(stream)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = self.step(rows)
            graph.replay()
            # Relative to the logits' scale: bfloat16 logits of magnitude 16-32 are 0.125 apart,
            # so a kernel choice that differs by one rounding must not count as a mismatch;
            # stale inputs or a missed write move logits by whole units.
            scale = 1.0 + float(eager.float().abs().max())
            difference = float((logits.float() - eager.float()).abs().max()) / scale
            if not math.isfinite(difference) or difference > self.rtol:
                raise RuntimeError(
                    f"graph logits differ from eager ones by {difference:.3g} of their scale "
                    f"(> {self.rtol})"
                )
        except Exception as error:  # noqa: BLE001 - any capture failure means: decode eagerly
            warnings.warn(
                f"CUDA graphs turned off for this decoder ({type(error).__name__}: {error}); "
                "decoding eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            self.enabled = False
            self.clear()
            return None
        self.captures += 1
        return graph, logits
