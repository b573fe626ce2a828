"""How torch's CPU threads behave on a machine that other processes keep busy.

On a shared machine (a CI runner, a workstation with other jobs), torch's OpenMP threads
lose far more than a fair share of the cores: libgomp lets a waiting thread spin about
300,000 times before it sleeps, and with as many threads as cores, every parallel region waits
for a thread the kernel has given to a neighbour. Measured on 2 cores (12 linear layers of
Gemma 3 270M's widths at 32 rows, ``benchmarks/cpu_contention.py``,
``benchmarks/results/cpu_contention.json``): under one busy neighbour process, 2 threads with
the default spin ran 16-21 steps/s, with a short spin 22-24, one thread 40-44 (as fast as one
thread on the idle machine); under four, 3.4 / 12-14 / 15-17. On the idle machine two threads
ran 52-69 and one 41, so nothing changes there.

:func:`share_the_cpu` therefore measures the cores that other processes keep busy when a command
starts and, on a busy machine, sets ``GOMP_SPINCOUNT=10000`` (a short spin) and
``OMP_NUM_THREADS`` to the cores left free (at least 1), each unless the user set it; both
only take effect before torch is first imported.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["busy_cores", "share_the_cpu"]

#: Seconds between the two reads of /proc/stat.
SAMPLE_S = 0.2


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot from ``/proc/stat``, or ``None`` where it
    cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def busy_cores(sample_s: float = SAMPLE_S) -> float:
    """Cores busy with other processes now: the busy share of all CPUs over ``sample_s``
    seconds while this process sleeps, times the core count (from ``/proc/stat``); where that
    cannot be read, the 1-minute load average (which lags a change in load by about a minute).
    """
    cores = os.cpu_count() or 1
    first = _cpu_times()
    if first is None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    time.sleep(sample_s)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return 0.0
    return cores * (second[0] - first[0]) / (second[1] - first[1])


def share_the_cpu() -> dict[str, str]:
    """On a busy machine (other processes keep at least half a core busy), set
    ``GOMP_SPINCOUNT=10000`` unless the user chose a wait policy (``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT``) and ``OMP_NUM_THREADS`` to the cores left free, at least 1, unless the
    user set it. Does nothing once torch is imported (OpenMP has read them by then).

    Returns:
        The variables it set (empty on an idle machine).
    """
    if "torch" in sys.modules:
        return {}
    wait_chosen = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ)
    if wait_chosen and "OMP_NUM_THREADS" in os.environ:
        return {}
    busy = busy_cores()
    if busy < 0.5:
        return {}
    chosen: dict[str, str] = {}
    if not wait_chosen:
        chosen["GOMP_SPINCOUNT"] = "10000"
    if "OMP_NUM_THREADS" not in os.environ:
        free = (os.cpu_count() or 1) - busy
        chosen["OMP_NUM_THREADS"] = str(max(1, round(free)))
    os.environ.update(chosen)
    return chosen
