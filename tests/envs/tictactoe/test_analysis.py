"""recipes/tictactoe_ceilings.py's exact win/draw/loss probabilities: known values, hand-checked positions, the ceiling table,
and agreement with games played in the env."""

from __future__ import annotations

import math
from fractions import Fraction as F

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.envs.tictactoe.opponent import (
    OPPONENT_STYLES,
    OPTIMAL_STYLES,
    safe_best_moves,
    value_preserving_moves,
)
from textgym.rollout import rollout

from ..._recipe_scripts import load

_script = load("tictactoe_ceilings")
Outcome, best_response, ceilings = _script.Outcome, _script.best_response, _script.ceilings
minimax_policy, opponent_policy = _script.minimax_policy, _script.opponent_policy
outcome_probabilities, uniform_policy = _script.outcome_probabilities, _script.uniform_policy

# (agent mark, agent, opponent, start board, expected (win, draw, loss)).
OUTCOME_ROWS = [
    # Two uniformly random players: X wins 737/1260, draws 8/63, loses 121/420 (the often
    # quoted 58.5% / 12.7% / 28.8% of random play).
    ("X", uniform_policy, uniform_policy, ".........", (F(737, 1260), F(8, 63), F(121, 420))),
    ("O", uniform_policy, uniform_policy, ".........", (F(121, 420), F(8, 63), F(737, 1260))),
    # O to move with cells 6 and 8 left: 6 draws, 8 lets X complete the left column.
    ("O", uniform_policy, uniform_policy, "XOXXOO.X.", (F(0), F(1, 2), F(1, 2))),
    ("O", minimax_policy, uniform_policy, "XOXXOO.X.", (F(0), F(1), F(0))),
    # X wins at once on 2, and the minimax always takes it.
    ("X", minimax_policy, uniform_policy, "XX.OO....", (F(1), F(0), F(0))),
    # Game over already.
    ("X", uniform_policy, uniform_policy, "XXXOO....", (F(1), F(0), F(0))),
    ("O", uniform_policy, uniform_policy, "XXXOO....", (F(0), F(0), F(1))),
]


@pytest.mark.parametrize(("mark", "agent", "opponent", "board", "expected"), OUTCOME_ROWS)
def test_outcome_probabilities(mark, agent, opponent, board, expected):
    assert outcome_probabilities(mark, agent, opponent, board) == Outcome(*expected)


def test_random_agent_one_move_from_a_win():
    # X to move on "XX.OO....": 2 wins (1/5); otherwise O, random too, may complete row 1.
    got = outcome_probabilities("X", uniform_policy, uniform_policy, "XX.OO....")
    assert got.win > F(1, 5) and got.loss > 0 and sum(got) == 1


@pytest.mark.parametrize("a", OPTIMAL_STYLES)
@pytest.mark.parametrize("b", OPTIMAL_STYLES)
@pytest.mark.parametrize("mark", ["X", "O"])
def test_optimal_styles_always_draw_each_other(a, b, mark):
    got = outcome_probabilities(mark, opponent_policy(a), opponent_policy(b))
    assert got == Outcome(F(0), F(1), F(0))


@pytest.mark.parametrize("mark", ["X", "O"])
@pytest.mark.parametrize("style", ["random", *OPPONENT_STYLES])
@pytest.mark.parametrize("p", ["0", "0.5"])
def test_best_response_dominates_minimax(mark, style, p):
    opponent = opponent_policy(style, p)
    minimax = outcome_probabilities(mark, minimax_policy, opponent)
    by_score = best_response(mark, opponent, "score")
    by_win = best_response(mark, opponent, "win")
    safe = best_response(mark, opponent, "score", allowed=value_preserving_moves)
    for o in (minimax, by_score, by_win, safe):
        assert sum(o) == 1 and min(o) >= 0
    assert by_score.score >= max(minimax.score, by_win.score, safe.score)
    assert by_win.win >= max(minimax.win, by_score.win, safe.win)
    assert minimax.loss == 0 and safe.loss == 0  # the safe players never lose to anyone
    assert safe.score >= minimax.score


def test_best_response_against_greedy_players_wins_every_game():
    # Both greedy styles can be forked as O; the best X against them wins with certainty.
    for style in ("greedy_center", "greedy_edge"):
        assert best_response("X", opponent_policy(style), "win").win == 1


def test_ceiling_table_values():
    table = ceilings()
    assert set(table) == {"X", "O"}
    x, o = table["X"], table["O"]
    # Minimax (uniform among optimal moves) vs random, and the best possible, exact.
    assert x["minimax_vs_random"]["win_exact"] == "75257/77760"
    assert x["minimax_vs_random"]["loss_exact"] == "0"
    assert o["minimax_vs_random"]["win_exact"] == "2645/3402"
    assert x["best_score_vs_random"]["win_exact"] == "191/192"
    assert (o["best_score_vs_random"]["win_exact"], o["best_score_vs_random"]["loss_exact"]) == (
        "883/945",
        "1/105",
    )
    assert o["best_win_vs_random"]["win_exact"] == "887/945"
    assert (o["best_safe_vs_random"]["win_exact"], o["best_safe_vs_random"]["loss_exact"]) == (
        "866/945",
        "0",
    )
    for mark in "XO":
        assert table[mark]["minimax_vs_optimal"]["draw"] == 1.0
        for row in table[mark].values():
            assert row["win"] + row["draw"] + row["loss"] == pytest.approx(1.0)
            assert row["score"] == pytest.approx(row["win"] + row["draw"] / 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"style": "alphazero"}, "opponent style"),
        ({"style": "minimax", "random_move_prob": "1.5"}, r"random_move_prob in \[0, 1\]"),
    ],
)
def test_opponent_policy_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        opponent_policy(**kwargs)


def test_bad_mark_and_objective():
    with pytest.raises(ValueError, match="agent_mark"):
        outcome_probabilities("Z", uniform_policy, uniform_policy)
    with pytest.raises(ValueError, match="objective"):
        best_response("X", uniform_policy, "draws")


def test_opponent_policy_mixes_exactly():
    probs = opponent_policy("greedy_edge", "0.25")(".........")
    assert probs[1] == F(1, 4) * F(1, 9) + F(3, 4) * F(1, 4) and probs[4] == F(1, 36)
    assert sum(probs.values()) == 1


@pytest.mark.parametrize(
    ("style", "p", "mark"),
    [("random", "1", "O"), ("greedy_center", "0.5", "O"), ("fork", "0", "X")],
)
def test_env_games_match_the_exact_probabilities(style, p, mark):
    """The env's seeded opponent is the distribution :func:`opponent_policy` describes: the
    scripted minimax policy's W/D/L over 600 env games lie within 4 standard errors."""
    n = 600
    env_kwargs = {"opponent": style, "random_move_prob": float(p), "agent_mark": mark}
    games = rollout(
        lambda: gym.make("textgym/TicTacToe-v0", **env_kwargs),
        MinimaxPolicy(seed=1, reasoning=False),
        range(n),
        batch_size=64,
    )
    exact = outcome_probabilities(mark, minimax_policy, opponent_policy(style, p))
    for name, prob in zip(("win", "draw", "loss"), exact, strict=True):
        seen = sum(g.outcome == name for g in games) / n
        stderr = max(math.sqrt(float(prob) * (1 - float(prob)) / n), 1 / n)
        assert abs(seen - float(prob)) <= 4 * stderr, (name, seen, float(prob))


@pytest.mark.parametrize("mark", ["X", "O"])
def test_safe_best_moves_reach_the_safe_ceiling_with_either_tie_break(mark):
    # Each of its moves attains the best_safe_vs_random value computed independently by
    # best_response (expectimax over value-preserving moves), so any tie-break does.
    ceiling = best_response(mark, uniform_policy, "score", allowed=value_preserving_moves)
    uniform = outcome_probabilities(mark, opponent_policy("safe_best"), uniform_policy)
    first = outcome_probabilities(mark, lambda b: {safe_best_moves(b)[0]: F(1)}, uniform_policy)
    assert uniform.score == first.score == ceiling.score
    assert uniform.loss == first.loss == 0
    assert uniform.win > outcome_probabilities(mark, minimax_policy, uniform_policy).win


def test_safe_best_moves_hand_checked():
    # X's corners beat the centre against random play (99.5% wins; the minimax opens anywhere).
    assert safe_best_moves(".........") == (0, 2, 6, 8)
    # O answers a centre opening with a corner; an edge loses against best play.
    assert safe_best_moves("....X....") == (0, 2, 6, 8)
    # A win on the board is taken; a threat is blocked.
    assert safe_best_moves("XX.OO....") == (2,)
    assert safe_best_moves("XX..O....") == (2,)
    with pytest.raises(ValueError, match="finished"):
        safe_best_moves("XXXOO....")


@pytest.mark.parametrize("mark", ["X", "O"])
def test_expert_tie_break_first_plays_the_lowest_candidate(mark):
    env = gym.make(
        "textgym/TicTacToe-v0", agent_mark=mark, opponent="random", prompt_style="compact"
    )
    games = rollout(
        lambda: env,
        MinimaxPolicy(seed=0, reasoning=False, style="safe_best", tie_break="first"),
        list(range(40)),
        batch_size=1,
    )
    assert {g.outcome for g in games} <= {"win", "draw"}
    first_moves = {g.messages[2]["content"] for g in games}
    if mark == "X":  # always cell 0, the lowest of the four corners
        assert first_moves == {"<move>0</move>"}
    else:  # the lowest safe reply to each of X's random openings
        assert len(first_moves) > 1


def test_expert_refuses_a_style_that_can_lose_and_unknown_tie_breaks():
    with pytest.raises(ValueError, match="never loses"):
        MinimaxPolicy(style="greedy_center")
    with pytest.raises(ValueError, match="tie_break"):
        MinimaxPolicy(tie_break="last")
    assert MinimaxPolicy().name == "minimax"  # the style names the policy in self-play records
    assert MinimaxPolicy(style="safe_best").name == "safe_best"
