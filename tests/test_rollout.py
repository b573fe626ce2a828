"""The batched rollout loop: ordering, batching invariance, conversation records."""

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.evaluation import summarize
from textgym.policies import RandomPolicy
from textgym.rollout import iter_rollout, rollout
from textgym.types import Completion


class FirstLegalMove:
    """Deterministic policy; records the batch sizes it was called with."""

    name = "first"

    def __init__(self):
        self.calls = []

    def act(self, conversations, infos):
        self.calls.append(len(conversations))
        return [Completion(f"<move>{info['legal_moves'][0]}</move>") for info in infos]


def make():
    return gym.make("textgym/TicTacToe-v0", random_move_prob=0.5, agent_mark="random")


def test_batched_equals_one_at_a_time():
    seeds = list(range(20))
    batched = rollout(make, FirstLegalMove(), seeds, batch_size=8)
    single = rollout(make, FirstLegalMove(), seeds, batch_size=1)
    assert [t.to_dict() for t in batched] == [t.to_dict() for t in single]
    assert [t.seed for t in batched] == seeds


def test_one_policy_call_per_turn_across_live_episodes():
    policy = FirstLegalMove()
    rollout(make, policy, list(range(4)), batch_size=4)
    assert policy.calls[0] == 4 and max(policy.calls) == 4
    assert sum(policy.calls) == sum(
        t.num_steps for t in rollout(make, FirstLegalMove(), list(range(4)))
    )


def test_group_copies_share_task_and_opponent():
    trajs = rollout(make, FirstLegalMove(), [7] * 4 + [8] * 4, batch_size=8)
    first = [t.messages[:2] for t in trajs]
    assert all(m == first[0] for m in first[:4]) and all(m == first[4] for m in first[4:])
    assert [t.to_dict() for t in trajs[:4]] == [trajs[0].to_dict()] * 4


def test_messages_alternate_and_end_with_final_observation():
    (traj,) = rollout(make, FirstLegalMove(), [3])
    roles = [m["role"] for m in traj.messages]
    assert roles[0] == "system" and roles[1] == "user"
    assert roles[2:] == ["assistant", "user"] * traj.num_steps
    assert "Game over" in traj.messages[-1]["content"]


def test_wrong_number_of_completions_is_an_error():
    class Broken:
        name = "broken"

        def act(self, conversations, infos):
            return []

    with pytest.raises(ValueError, match="returned 0 completions for 2"):
        rollout(make, Broken(), [0, 1], batch_size=2)


def test_minimax_draws_itself_and_random_never_wins():
    def optimal():
        return gym.make("textgym/TicTacToe-v0", random_move_prob=0.0, agent_mark="random")

    draws = summarize(rollout(optimal, MinimaxPolicy(seed=0), list(range(300)), batch_size=32))
    assert draws["outcomes"] == {"win": 0.0, "draw": 1.0, "loss": 0.0}
    rand = summarize(rollout(optimal, RandomPolicy(seed=0), list(range(300)), batch_size=32))
    assert rand["outcomes"]["win"] == 0.0 and rand["outcomes"]["loss"] > 0.5


def test_minimax_beats_random_opponent_mostly():
    def easy():
        return gym.make("textgym/TicTacToe-v0", opponent="random")

    stats = summarize(rollout(easy, MinimaxPolicy(seed=1), list(range(300)), batch_size=32))
    assert stats["outcomes"]["loss"] == 0.0 and stats["outcomes"]["win"] > 0.9


def test_seeds_are_read_as_episodes_start(memory_cap):
    # A trillion seeds as a lazy sequence: nothing may build a list (or a result slot) per seed
    # up front. The run is stopped after a few episodes by the callback.
    class Stop(Exception):
        pass

    finished = []

    def stop_after_five(traj):
        finished.append(traj.seed)
        if len(finished) == 5:
            raise Stop

    with pytest.raises(Stop):
        rollout(make, FirstLegalMove(), range(10**12), batch_size=4, on_episode_end=stop_after_five)
    assert len(finished) == 5 and set(finished) <= set(range(8))


def test_iter_rollout_yields_each_episode_as_it_finishes():
    seeds = [5, 6, 7, 8, 9]
    streamed = list(iter_rollout(make, FirstLegalMove(), seeds, batch_size=3))
    assert sorted(i for i, _ in streamed) == list(range(5))
    assert [t.seed for i, t in streamed] == [seeds[i] for i, _ in streamed]
    by_index = [t.to_dict() for _, t in sorted(streamed, key=lambda pair: pair[0])]
    assert by_index == [t.to_dict() for t in rollout(make, FirstLegalMove(), seeds, batch_size=3)]


def test_iter_rollout_checks_arguments_when_called():
    with pytest.raises(ValueError, match="batch_size to be an int >= 1"):
        iter_rollout(make, FirstLegalMove(), [0], batch_size=0)
    with pytest.raises(ValueError, match="one options mapping per seed"):
        iter_rollout(make, FirstLegalMove(), [0, 1], options=[{}])
