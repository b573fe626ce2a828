"""WinSpeedBonus: paid once on a win, by empty cells left; never on a draw, loss or invalid move."""

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.builder import EnvRecipe
from textgym.wrappers import REWARD_WRAPPERS, InvalidActionPenalty, WinSpeedBonus


def ttt(**kwargs):
    return gym.make("textgym/TicTacToe-v0", **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    choices=st.lists(st.integers(0, 8), min_size=9, max_size=9),
    per_cell=st.sampled_from([0.0, 0.05, 0.25]),
    opponent=st.sampled_from(["random", "minimax", "greedy_edge"]),
)
def test_bonus_is_per_empty_cell_on_a_win_and_zero_otherwise(seed, choices, per_cell, opponent):
    env = WinSpeedBonus(ttt(opponent=opponent, agent_mark="random"), per_empty_cell=per_cell)
    _, info = env.reset(seed=seed)
    bonuses = []
    for choice in choices:
        legal = info["legal_moves"]
        _, reward, terminated, _, info = env.step(f"<move>{legal[choice % len(legal)]}</move>")
        components = info["reward_components"]
        assert sum(components.values()) == pytest.approx(reward)
        bonuses.append(components["win_speed"])
        if terminated:
            break
    assert terminated
    expected = per_cell * info["board"].count(".") if info["outcome"] == "win" else 0.0
    assert bonuses[-1] == pytest.approx(expected)
    assert all(b == 0.0 for b in bonuses[:-1])
    assert 0.0 <= bonuses[-1] <= 4 * per_cell  # a win leaves at most 4 empty cells


def test_fastest_win_gets_the_largest_bonus_and_invalid_moves_get_none():
    env = InvalidActionPenalty(WinSpeedBonus(ttt(opponent="random"), per_empty_cell=0.05))
    env.reset(seed=1)
    _, reward, _, _, info = env.step("no move here")
    assert info["reward_components"] == {"outcome": 0.0, "win_speed": 0.0, "invalid_action": -0.1}
    for cell in (4, 0, 8):  # the opponent of seed 1 leaves the diagonal open
        _, reward, terminated, _, info = env.step(f"<move>{cell}</move>")
    assert terminated and info["outcome"] == "win" and info["board"].count(".") == 4
    assert info["reward_components"]["win_speed"] == pytest.approx(0.2)
    assert reward == pytest.approx(1.2)


@pytest.mark.parametrize(
    "kwargs",
    [{"per_empty_cell": -0.1}, {"per_empty_cell": float("nan")}, {"empty": ""}, {"empty": ".."}],
)
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="Expected"):
        WinSpeedBonus(ttt(), **kwargs)


def test_named_in_the_wrapper_table_and_built_by_recipe():
    assert REWARD_WRAPPERS["win_speed_bonus"] is WinSpeedBonus
    env = EnvRecipe(
        "textgym/TicTacToe-v0",
        {"opponent": "random"},
        wrappers=("invalid_action_penalty", "win_speed_bonus"),
    ).make()
    env.reset(seed=1)
    for cell in (4, 0, 8):
        _, reward, _, _, info = env.step(f"<move>{cell}</move>")
    assert set(info["reward_components"]) == {"outcome", "invalid_action", "win_speed"}
    assert reward == pytest.approx(1.2)
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, WinSpeedBonus)
