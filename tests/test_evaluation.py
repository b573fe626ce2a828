"""Summary statistics: the running summary ``textgym eval`` streams into equals ``summarize``."""

import math

import gymnasium as gym

import textgym  # noqa: F401
from textgym.evaluation import RunningSummary, summarize
from textgym.policies import RandomPolicy
from textgym.rollout import rollout
from textgym.wrappers import FormatReward, InvalidActionPenalty


def games(n):
    def make():
        return InvalidActionPenalty(
            FormatReward(gym.make("textgym/TicTacToe-v0", opponent="random"))
        )

    return rollout(make, RandomPolicy(seed=0), list(range(n)), batch_size=8)


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def test_running_summary_after_each_episode_equals_summarize_of_those_episodes():
    trajectories = games(40)
    trajectories[3].invalid_actions[0] = True
    trajectories[5].finish_reasons[-1] = "length"
    running = RunningSummary()
    assert same(running.result(), summarize([]))
    for n, traj in enumerate(trajectories, start=1):
        running.add(traj)
        assert same(running.result(), summarize(trajectories[:n]))
    assert running.result()["episodes"] == 40 and running.result()["invalid_episode_rate"] == 1 / 40


def test_summarize_takes_any_iterable():
    trajectories = games(10)
    assert same(summarize(iter(trajectories)), summarize(trajectories))
