"""TicTacToe-v0 behaviour: observations, invalid actions, options, arbitrary text."""

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.envs.tictactoe import TicTacToeEnv
from textgym.envs.tictactoe.parsing import is_answer, is_well_formed, parse_move
from textgym.wrappers import FormatReward, InvalidActionPenalty, StratifiedOpponent


def make(**kwargs):
    return gym.make("textgym/TicTacToe-v0", **kwargs)


def test_first_observation_as_x_shows_indices_and_turn():
    obs, info = make().reset(seed=0)
    assert "You play X and move first" in obs
    assert " 0 | 1 | 2" in obs and "Available positions: 0, 1, 2, 3, 4, 5, 6, 7, 8" in obs
    assert "Your turn" in obs
    assert info["board"] == "........." and info["opponent_move"] is None
    assert "<move>N</move>" in info["system_prompt"] and info["tools"] == []


def test_agent_o_sees_opening_move():
    obs, info = make(agent_mark="O").reset(seed=0)
    cell = info["opponent_move"]
    assert f"Opponent (X) played position {cell}" in obs
    assert info["board"][cell] == "X" and info["board"].count("X") == 1
    assert str(cell) not in obs.split("Available positions:")[1].split("\n")[0]


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("4", "no_move_tag"),
        ("<think><move>4</move></think>", "no_move_tag"),
        ("<move>four</move>", "not_an_integer"),
        ("<move>9</move>", "out_of_range"),
        ("<move>-1</move>", "out_of_range"),
    ],
)
def test_invalid_actions_leave_board_unchanged(action, reason):
    env = make()
    _, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info2 = env.step(action)
    assert info2["invalid_action"] and info2["invalid_reason"] == reason
    assert info2["board"] == info["board"] and not terminated and reward == 0.0
    assert obs.startswith("Invalid move:") and "Your turn" in obs


def test_occupied_cell_is_invalid():
    env = make()
    env.reset(seed=0)
    *_, info = env.step("<move>4</move>")
    opp = info["opponent_move"]
    *_, info2 = env.step(f"<move>{opp}</move>")
    assert info2["invalid_reason"] == "occupied" and info2["board"] == info["board"]


def test_reset_options_override_per_episode():
    env = make()
    _, info = env.reset(
        seed=0, options={"agent_mark": "O", "random_move_prob": 0.3, "opponent": "random"}
    )
    assert (info["agent_mark"], info["random_move_prob"], info["opponent"]) == ("O", 0.3, "random")
    _, info = env.reset(seed=0)
    assert (info["agent_mark"], info["random_move_prob"], info["opponent"]) == ("X", 0.0, "minimax")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"random_move_prob": 1.5},
        {"random_move_prob": -0.1},
        {"agent_mark": "Z"},
        {"opponent": "alphazero"},
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs):
    with pytest.raises(ValueError, match="Expected"):
        TicTacToeEnv(**kwargs)
    with pytest.raises(ValueError, match="Expected"):
        TicTacToeEnv().reset(options=kwargs)


def test_unknown_option_rejected():
    with pytest.raises(ValueError, match="Unknown reset options"):
        TicTacToeEnv().reset(options={"random_prob": 0.1})


def test_non_string_action_and_step_after_end():
    env = TicTacToeEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(4)
    env = TicTacToeEnv(opponent="random")
    _, info = env.reset(seed=0)
    terminated = False
    while not terminated:
        *_, terminated, _, info = env.step(f"<move>{info['legal_moves'][0]}</move>")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<move>0</move>")


def test_time_limit_truncates():
    env = make()
    env.reset(seed=0)
    for _ in range(9):
        assert not env.step("nothing")[3]
    assert env.step("nothing")[3] is True


@pytest.mark.parametrize("agent_mark", ["X", "O"])
def test_outcome_reward_values(agent_mark):
    seen = {}
    for seed in range(200):
        env = make(opponent="random", agent_mark=agent_mark)
        _, info = env.reset(seed=seed)
        terminated = False
        while not terminated:
            _, reward, terminated, _, info = env.step(f"<move>{info['legal_moves'][-1]}</move>")
        seen[info["outcome"]] = reward
    assert seen == {"win": 1.0, "draw": 0.5, "loss": 0.0}


def test_parsers():
    assert parse_move("<think>maybe <move>1</move></think> <move> 7 </move>") == 7
    assert parse_move("<move>1</move> then <move>2</move>") == 2
    assert parse_move("no tag") is None
    assert is_well_formed("<think>centre</think>\n<move>4</move>")
    assert not is_well_formed("<move>4</move>")
    assert not is_well_formed("<think>a</think><move>4</move> extra")
    assert not is_well_formed("<think>a<think>b</think><move>4</move>")


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<move>4</move>", True),  # what the compact prompt asks for
        (" <think>centre</think>\n<move>4</move>\n", True),  # the full prompt's example
        ("<move>4</move> and more", False),
        ("I play <move>4</move>", False),
        ("<move>44</move>", False),
        ("<move>4</move><move>5</move>", False),
        ("<think>a</think><think>b</think><move>1</move>", False),
        ("<think>no move</think>", False),
    ],
)
def test_is_answer_accepts_exactly_one_move_after_optional_reasoning(completion, expected):
    assert is_answer(completion) is expected


def wrapped_env():
    env = gym.make("textgym/TicTacToe-v0", agent_mark="random")
    return FormatReward(InvalidActionPenalty(StratifiedOpponent(env, (0.0, 1.0), groups=4)))


ACTIONS = st.one_of(
    st.text(max_size=200),
    st.integers(-3, 12).map(lambda i: f"<move>{i}</move>"),
    st.integers(0, 8).map(lambda i: f"<think>t</think><move>{i}</move>"),
)


@given(seed=st.integers(0, 2**32 - 1), actions=st.lists(ACTIONS, min_size=1, max_size=15))
def test_arbitrary_text_never_raises_and_return_in_range(seed, actions):
    env = wrapped_env()
    _, info = env.reset(seed=seed)
    board, total = info["board"], 0.0
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        total += reward
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
        if info["invalid_action"]:
            assert info["board"] == board
        board = info["board"]
        if terminated or truncated:
            break
    assert -0.1 - 1e-9 <= total <= 1.2 + 1e-9


@given(st.text())
def test_parsers_accept_any_text(text):
    move = parse_move(text)
    assert move is None or isinstance(move, int)
    assert isinstance(is_well_formed(text), bool)
