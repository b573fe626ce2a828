"""Shared test settings: hypothesis profiles (CI runs the default profile), a memory cap."""

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
    """The id of a registered one-turn env whose reward is the number of distinct characters in
    the reply over 8 (``textgym_test/DistinctCharacters-v0``).

    Untrained models (the tiny one, base Gemma) never write the tags of the real tasks, so
    every group of theirs has equal rewards and GRPO skips the update; this reward differs
    within a group, so every step of a test run updates the weights.
    """
    gym = pytest.importorskip("gymnasium")
    env_id = "textgym_test/DistinctCharacters-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_distinct_characters_class(), max_episode_steps=1)
    return env_id


def _distinct_characters_class():
    from textgym.core import TextEnv
    from textgym.spaces import UnicodeText

    class DistinctCharacters(TextEnv):
        def __init__(self, render_mode: str | None = None):
            self._init_render(render_mode)
            self.observation_space = UnicodeText(256)
            self.action_space = UnicodeText(4096)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            info = {"system_prompt": "Answer.", "tools": [], "task_id": "distinct"}
            return self._emit(f"Say {int(self.np_random.integers(100))}."), info

        def step(self, action):
            self._check_action(action)
            reward = len(set(action)) / 8
            info = {"reward_components": {"distinct": reward}, "invalid_action": False}
            return self._emit("done"), reward, True, False, info

    return DistinctCharacters
