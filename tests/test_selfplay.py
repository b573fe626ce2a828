"""Self-play over the two-seat AEC env: results per seat and per mark, batching, records."""

import json

import pytest

pytest.importorskip("pettingzoo")

from textgym.envs.tictactoe import MinimaxPolicy
from textgym.policies import RandomPolicy  # noqa: E402
from textgym.selfplay import selfplay, selfplay_summary  # noqa: E402
from textgym.types import Completion  # noqa: E402


class Counting:
    """Wraps a policy and counts its batched calls."""

    def __init__(self, policy):
        self.policy, self.name, self.calls, self.sizes = policy, policy.name, 0, []

    def act(self, conversations, infos):
        self.calls += 1
        self.sizes.append(len(conversations))
        return self.policy.act(conversations, infos)


class Babbler:
    """Never gives a move: every action is invalid."""

    name = "babbler"

    def act(self, conversations, infos):
        return [Completion("I would rather chat.") for _ in conversations]


def test_minimax_against_minimax_draws_every_game():
    games = selfplay(MinimaxPolicy(seed=0), range(200), batch_size=16)
    summary = selfplay_summary(games)
    assert summary["games"] == 200
    for tally in [*summary["per_seat"].values(), *summary["per_mark"].values()]:
        assert tally["draw"] == tally["games"] and tally["draw_rate"] == 1.0
    assert summary["per_mark"]["X"]["games"] == summary["per_mark"]["O"]["games"] == 200
    assert all(g.terminated and not g.truncated for g in games)


def test_two_policies_results_per_seat_and_mark():
    games = selfplay([MinimaxPolicy(seed=0), RandomPolicy(seed=1)], range(100), batch_size=7)
    summary = selfplay_summary(games)
    minimax, rand = summary["per_seat"]["player_0"], summary["per_seat"]["player_1"]
    assert minimax["loss"] == 0 and minimax["win"] > 50
    assert (rand["win"], rand["draw"], rand["loss"]) == (
        minimax["loss"],
        minimax["draw"],
        minimax["win"],
    )
    # "alternate": each seat plays X in half of the games.
    assert summary["per_seat_mark"]["player_0"]["X"]["games"] == 50
    as_x, as_o = (summary["per_seat_mark"]["player_0"][m] for m in ("X", "O"))
    assert as_x["loss"] == as_o["loss"] == 0 and as_x["win"] >= as_o["win"]
    per_mark_x = summary["per_mark"]["X"]
    assert per_mark_x["games"] == 100
    assert per_mark_x["win"] == sum(g.winner_mark == "X" for g in games)
    assert summary["invalid_action_rate"] == {"player_0": 0.0, "player_1": 0.0}


def test_one_policy_in_both_seats_makes_one_batched_call_per_turn():
    policy = Counting(MinimaxPolicy(seed=0))
    games = selfplay(policy, range(8), batch_size=8, first_player="player_0")
    # All 8 games run in lockstep: 9 plies of a drawn game, one call each.
    assert policy.calls == 9 and policy.sizes == [8] * 9
    assert all(g.marks == {"player_0": "X", "player_1": "O"} for g in games)


def test_games_come_back_in_seed_order_and_are_deterministic():
    seeds = [5, 1, 5, 9, 2]
    first = selfplay(
        [RandomPolicy(seed=3), RandomPolicy(seed=4)], seeds, batch_size=2, first_player="random"
    )
    second = selfplay(
        [RandomPolicy(seed=3), RandomPolicy(seed=4)], seeds, batch_size=2, first_player="random"
    )
    assert [g.seed for g in first] == seeds
    assert [g.to_dict() for g in first] == [g.to_dict() for g in second]


def test_trajectories_record_each_seat_like_rollout():
    game = selfplay(MinimaxPolicy(seed=0), [0], first_player="player_1")[0]
    x, o = game.trajectories["player_1"], game.trajectories["player_0"]
    assert game.marks == {"player_1": "X", "player_0": "O"}
    for traj, mark in ((x, "X"), (o, "O")):
        roles = [m["role"] for m in traj.messages]
        assert roles[0] == "system" and f"You play {mark}" in traj.messages[0]["content"]
        assert roles[1:] == ["user", "assistant"] * traj.num_steps + ["user"]
        assert traj.messages[-1]["content"].endswith("Game over: draw.")
        assert traj.rewards[-1] == 0.5 and sum(traj.rewards[:-1]) == 0.0
        assert traj.outcome == "draw" and traj.terminated
    assert x.num_steps == 5 and o.num_steps == 4
    assert "Opponent (X) played position" in o.messages[1]["content"]
    json.loads(json.dumps(game.to_dict()))


def test_invalid_actions_are_recorded_and_truncate():
    games = selfplay([Babbler(), MinimaxPolicy(seed=0)], [0, 1], first_player="player_0")
    for game in games:
        assert game.truncated and game.outcomes == {"player_0": None, "player_1": None}
        assert game.trajectories["player_0"].invalid_actions == [True] * 10
        assert game.trajectories["player_1"].num_steps == 0
    summary = selfplay_summary(games)
    assert summary["per_seat"]["player_0"]["truncated"] == 2
    assert summary["invalid_action_rate"]["player_0"] == 1.0


def test_argument_errors():
    with pytest.raises(ValueError, match="one policy or two"):
        selfplay([MinimaxPolicy()] * 3, [0])
    with pytest.raises(ValueError, match="batch_size"):
        selfplay(MinimaxPolicy(), [0], batch_size=0)
    with pytest.raises(ValueError, match="first_player"):
        selfplay(MinimaxPolicy(), [0], first_player="X")

    class Short:
        name = "short"

        def act(self, conversations, infos):
            return []

    with pytest.raises(ValueError, match="returned 0 completions for 1"):
        selfplay(Short(), [0])
