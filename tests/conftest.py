"""Shared test settings: hypothesis profiles (CI runs the default profile), a memory cap."""

import os
import re
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A suite started in the background by a non-interactive shell (`nohup python -m pytest &`)
# inherits SIGINT ignored; Python keeps SIG_IGN and every subprocess inherits it, so the Ctrl-C
# tests (hold_interrupts, the CLI's interrupted runs) would see no interrupt. Deliver it again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def memory_cap():
    """Cap this process's address space 1 GiB above its present size while the test runs, so
    that building anything per episode of a trillion fails at once with MemoryError instead
    of exhausting the machine."""
    resource = pytest.importorskip("resource")
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs /proc/self/status (Linux)")
    size = int(re.search(r"VmSize:\s+(\d+) kB", status.read_text()).group(1)) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + 2**30 if hard == resource.RLIM_INFINITY else min(size + 2**30, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture
def distinct_characters_env() -> str:
    """The id of a registered one-turn env whose reward differs within a group, so that every
    step of a test run updates the weights (:class:`tests._runs.DistinctCharacters`)."""
    pytest.importorskip("gymnasium")
    from ._runs import register_distinct_characters

    return register_distinct_characters()
