"""A list of opponent styles: one drawn per episode from its seed; single styles unchanged."""

import collections

import gymnasium as gym
import pytest

import textgym  # noqa: F401

MIX = ["minimax", "fork", "greedy_center"]


def opening(env, seed):
    _, info = env.reset(seed=seed)
    return info["opponent"], info["task_id"], info["agent_mark"], info["board"]


def test_each_style_is_drawn_and_a_seed_always_gives_the_same_one():
    env = gym.make("textgym/TicTacToe-v0", opponent=MIX, agent_mark="random")
    twin = gym.make("textgym/TicTacToe-v0", opponent=tuple(MIX), agent_mark="random")
    drawn = collections.Counter(opening(env, seed)[0] for seed in range(300))
    assert set(drawn) == set(MIX)
    assert min(drawn.values()) > 60  # uniform: about 100 each
    for seed in range(20):
        assert opening(env, seed) == opening(twin, seed)
        style, task_id, _, _ = opening(env, seed)
        assert f"-{style}-" in task_id


def test_the_drawn_style_plays_the_episode():
    env = gym.make("textgym/TicTacToe-v0", opponent=["random", "greedy_edge"], agent_mark="O")
    first = collections.defaultdict(set)
    for seed in range(80):
        style, _, _, board = opening(env, seed)
        first[style].add(board.index("X"))
    assert first["greedy_edge"] <= {1, 3, 5, 7}  # nothing to win or block: an edge first
    assert first["random"] - {1, 3, 5, 7}  # the random player also opens elsewhere


def test_a_single_style_keeps_its_episodes():
    for style in ("minimax", "fork"):
        one = gym.make("textgym/TicTacToe-v0", opponent=style, agent_mark="random")
        listed = gym.make("textgym/TicTacToe-v0", opponent=[style], agent_mark="random")
        for seed in range(30):
            assert opening(one, seed) == opening(listed, seed)


def test_reset_option_takes_a_list_too():
    env = gym.make("textgym/TicTacToe-v0")
    styles = {env.reset(seed=s, options={"opponent": MIX})[1]["opponent"] for s in range(60)}
    assert styles == set(MIX)


@pytest.mark.parametrize("bad", [[], ["minimax", "nobody"], 3, {"fork": 1}])
def test_bad_opponent_lists_are_refused(bad):
    with pytest.raises(ValueError, match="Expected opponent"):
        gym.make("textgym/TicTacToe-v0", opponent=bad)
