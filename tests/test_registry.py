"""Checks every registered textgym id must pass: env_checker, determinism, pickling, info docs."""

import pickle
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import textgym

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("textgym/"))


def scripted_actions(n: int, seed: int) -> list[str]:
    """A fixed mix of well-formed, malformed and arbitrary actions."""
    rng = np.random.default_rng(seed)
    pool = [
        "<move>4</move>",
        "<think>x</think><move>0</move>",
        "<move>8</move>",
        "",
        "hello",
        "<move>2</move>",
        "<move>12</move>",
        "<move>6</move>",
        "<move>1</move>",
        "<move>a</move>",
    ]
    return [pool[i] for i in rng.integers(len(pool), size=n)]


def run_episode(env: gym.Env, seed: int, actions: list[str]):
    records = [env.reset(seed=seed)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        records.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return records


def test_ids_match_descriptions():
    assert set(ENV_IDS) == set(textgym.ENV_DESCRIPTIONS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("seed", [0, 7, 2**31 - 1])
def test_twin_env_determinism(env_id, seed):
    actions = scripted_actions(20, seed)
    first = run_episode(gym.make(env_id), seed, actions)
    second = run_episode(gym.make(env_id), seed, actions)
    assert first == second


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_round_trip_mid_episode(env_id):
    env = gym.make(env_id)
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    results = []
    for e in (env, clone):
        steps = []
        for action in scripted_actions(10, 3):
            steps.append(e.step(action))
            if steps[-1][2] or steps[-1][3]:
                break
        results.append(steps)
    assert results[0] == results[1] and len(results[0]) >= 1


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rewards_are_floats_and_flags_bools(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    for action in scripted_actions(10, 0):
        obs, reward, terminated, truncated, info = env.step(action)
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
        if terminated or truncated:
            break


def documented_info_keys(env_cls) -> dict[str, set[str]]:
    """Parse the ``Information`` section: lines ``- ``key`` [reset, step]: ...``."""
    doc = env_cls.__doc__ or ""
    section = doc.split("Information:", 1)[1].split("Arguments:", 1)[0]
    keys: dict[str, set[str]] = {"reset": set(), "step": set()}
    for key, where in re.findall(r"^\s*- ``(\w+)`` \[([a-z, ]+)\]", section, flags=re.M):
        for part in where.split(","):
            keys[part.strip()].add(key)
    return keys


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_documented_info_keys_equal_emitted(env_id):
    env = gym.make(env_id)
    documented = documented_info_keys(type(env.unwrapped))
    assert documented["reset"] and documented["step"]
    emitted = {"reset": set(), "step": set()}
    for seed in range(20):
        _, info = env.reset(seed=seed)
        emitted["reset"] |= set(info)
        for action in scripted_actions(10, seed):
            *_, terminated, truncated, info = env.step(action)
            emitted["step"] |= set(info)
            if terminated or truncated:
                break
    assert emitted == documented
