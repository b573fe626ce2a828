"""``torch.profiler`` for the speed benchmarks: one run under the profiler, summarised as JSON.

Used by ``grpo_vs_trl.py`` and ``llm_decode.py`` (``--profile-output``) to say where a missed
speed target's time goes: the named ranges of a run in order (``textgym.algos.grpo`` marks each
step's ``grpo.rollout`` and ``grpo.update``) and the operators that take the most time, with
their call counts (calls per decode step show what runs outside a CUDA graph).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["profiler", "profile_summary"]


def profiler() -> Any:
    """A ``torch.profiler.profile`` over CPU ops and, where there is one, the GPU's kernels."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def profile_summary(prof: Any, *, ranges: str | None = None, top: int = 30) -> dict[str, Any]:
    """What a profiled run spent its time on.

    Args:
        prof: A finished :func:`profiler`.
        ranges: A name prefix (e.g. ``"grpo."``): each ``record_function`` range whose name
            starts with it, in start order, with its CPU wall time and the GPU time of the
            kernels it launched (ms).
        top: How many operators to list.

    Returns:
        ``{"ranges": {name: [{"cpu_ms", "device_ms"}, ...]}, "sorted_by", "top_ops": [{"name",
        "calls", "self_ms", "self_cpu_ms"}], "table"}``: operators by self GPU time on CUDA,
        else by self CPU time; ``table`` is ``key_averages``' text table of the same.
    """
    key = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    found: dict[str, list[dict[str, float]]] = {}
    if ranges is not None:
        for event in sorted(prof.events(), key=lambda e: e.time_range.start):
            if event.name.startswith(ranges):
                found.setdefault(event.name, []).append(
                    {
                        "cpu_ms": event.cpu_time_total / 1e3,
                        "device_ms": getattr(event, "device_time_total", 0.0) / 1e3,
                    }
                )
    averages = prof.key_averages()
    ops = sorted(averages, key=lambda e: getattr(e, key), reverse=True)[:top]
    return {
        "ranges": found,
        "sorted_by": key,
        "top_ops": [
            {
                "name": e.key,
                "calls": e.count,
                "self_ms": getattr(e, key) / 1e3,
                "self_cpu_ms": e.self_cpu_time_total / 1e3,
            }
            for e in ops
        ],
        "table": averages.table(sort_by=key, row_limit=top),
    }
