"""The prefix cache across turns: the KV caches of finished sequences, keyed by their token ids.

An episode's conversation only grows, so the keys and values of its earlier tokens stay valid:
:func:`textgym.policies.decoding.decode` stores each finished row's cache here and loads the
longest stored prefix of a new prompt, so that only the new tokens are prefilled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from textgym.checks import check_int

__all__ = ["PrefixCache", "SequenceKV"]

#: The cached keys and values of one sequence: ``[layers, 2, H_kv, L, D]`` (keys, values).
SequenceKV = torch.Tensor


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
