"""Env workers out of process: the same trajectories as in-process for the same seeds."""

import functools
import os
import time

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.policies import GoldPolicy, RandomPolicy
from textgym.rollout import WorkerEnv, rollout


@pytest.mark.parametrize(
    ("env_id", "policy"),
    [
        ("textgym/Workplace-v1", GoldPolicy),
        ("textgym/EmailToolUse-v1", GoldPolicy),
        ("textgym/TicTacToe-v0", lambda: RandomPolicy(seed=3)),
    ],
)
def test_worker_trajectories_equal_in_process_ones(env_id, policy):
    make = functools.partial(gym.make, env_id)
    seeds = list(range(12))
    local = rollout(make, policy(), seeds, batch_size=4)
    remote = rollout(make, policy(), seeds, batch_size=4, env_workers=True)
    assert [t.to_dict() for t in remote] == [t.to_dict() for t in local]
    # Different episodes, not one repeated: the comparison could fail.
    assert len({str(t.messages) for t in local}) > 1


class SlowEnv(gym.Env):
    """A one-step text env whose step takes ``delay`` seconds (a stand-in for a heavy sandbox)."""

    observation_space = gym.spaces.Text(100)
    action_space = gym.spaces.Text(100)

    def __init__(self, delay: float = 0.5):
        self.delay = delay

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "go", {"pid": os.getpid()}

    def step(self, action):
        if action == "crash":
            raise RuntimeError("the sandbox fell over")
        time.sleep(self.delay)
        return "done", 1.0, True, False, {"pid": os.getpid()}


class Say:
    """A policy that answers every conversation with one fixed text."""

    name = "say"

    def __init__(self, text):
        self.text = text

    def act(self, conversations, infos):
        from textgym.types import Completion

        return [Completion(self.text) for _ in conversations]


def test_worker_envs_step_in_parallel_in_other_processes():
    env = WorkerEnv(SlowEnv)
    try:
        _, info = env.reset(seed=0)
        assert info["pid"] != os.getpid()
    finally:
        env.close()
    start = time.perf_counter()
    trajectories = rollout(SlowEnv, Say("x"), [0, 1, 2, 3], batch_size=4, env_workers=True)
    elapsed = time.perf_counter() - start
    assert [t.rewards for t in trajectories] == [[1.0]] * 4
    # Four 0.5 s steps in one turn: in sequence they take 2 s; in four workers about 0.5 s plus
    # the workers' start-up (the whole test took 0.63 s here).
    assert elapsed < 1.9, elapsed


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium logs the worker's traceback
def test_an_error_in_a_worker_is_raised_in_the_caller():
    with pytest.raises(RuntimeError, match="the sandbox fell over"):
        rollout(SlowEnv, Say("crash"), [0, 1], batch_size=2, env_workers=True)
