"""Memory-bandwidth ceiling of LLM decoding, shared by the benchmarks that report it.

A decode step reads every weight once and each row's K/V cache once, so on a device of
bandwidth ``W`` bytes/s a batch of ``B`` rows decodes at most ``B * W / (weight bytes + B * KV
bytes per row)`` tokens/s. ``W`` is measured with a device-to-device copy in the same run.
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["copy_bandwidth", "kv_bytes_per_row"]


def kv_bytes_per_row(model_config: Any, context: float, dtype_bytes: int) -> float:
    """Bytes of K and V read per decode step for one sequence of ``context`` tokens.

    Sliding-window layers (``layer_types`` == ``"sliding_attention"``, e.g. Gemma 3) read at most
    ``sliding_window`` positions.
    """
    text = getattr(model_config, "text_config", model_config)
    layers = text.num_hidden_layers
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    types = getattr(text, "layer_types", None) or ["full_attention"] * layers
    window = getattr(text, "sliding_window", None)
    positions = sum(
        min(context, window) if t == "sliding_attention" and window else context for t in types
    )
    return 2 * kv_heads * head_dim * dtype_bytes * positions


def copy_bandwidth(device: torch.device, gib: float = 1.0, repeats: int = 20) -> float:
    """Device memory bandwidth in bytes/s: a device-to-device copy reads and writes each byte."""
    x = torch.empty(int(gib * 2**30) // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize(device)
    began = time.perf_counter()
    for _ in range(repeats):
        y.copy_(x)
    torch.cuda.synchronize(device)
    return 2 * x.numel() * 4 * repeats / (time.perf_counter() - began)
