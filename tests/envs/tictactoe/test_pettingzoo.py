"""The PettingZoo twin ``tictactoe_text_v0``: API checks, same prompts as TicTacToe-v0, same
outcomes as PettingZoo's own ``tictactoe_v3``."""

import importlib
import re
import time

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.test import api_test, seed_test  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.envs.tictactoe import board as B  # noqa: E402
from textgym.envs.tictactoe import tictactoe_text_v0  # noqa: E402
from textgym.envs.tictactoe.env import TicTacToeEnv  # noqa: E402
from textgym.envs.tictactoe.pettingzoo_env import TicTacToeTextAEC  # noqa: E402
from textgym.policies import conversation_start  # noqa: E402
from textgym.types import Completion  # noqa: E402

PZ_API = importlib.import_module("pettingzoo.test.api_test")


def _text_aware_compatibility(original):
    """PettingZoo's dtype check, with ``Text`` spaces checked as ``str`` members instead.

    ``api_test`` compares ``space.dtype`` with ``observation.dtype``, which assumes array
    observations: a ``str`` has no ``dtype``. For a ``Text`` space the equivalent check is that
    the observation is a ``str`` the space contains; every other check of ``api_test`` runs as is.
    """

    def check(expected, seen, recursed_keys):
        if isinstance(expected, gym.spaces.Text):
            assert isinstance(seen, str) and expected.contains(seen), (recursed_keys, seen)
            return
        original(expected, seen, recursed_keys)

    return check


def play(env, moves):
    """Play row-major ``moves`` as text until the game ends; return each seat's final last()."""
    env.reset(seed=0)
    finals = {}
    for seat in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        if terminated or truncated:
            finals[seat] = (reward, info["outcome"])
            env.step(None)
            continue
        env.step(f"<move>{moves.pop(0)}</move>")
    return finals


def random_game(rng):
    """A random legal game as a list of row-major cells."""
    board, moves = B.EMPTY_BOARD, []
    while B.legal_moves(board):
        move = int(rng.choice(B.legal_moves(board)))
        board = B.apply_move(board, move)
        moves.append(move)
    return moves


# -- PettingZoo's own checks --------------------------------------------------------------------
@pytest.mark.parametrize(
    "prompt_style", ["full", "compact", {"player_0": "full", "player_1": "compact"}]
)
def test_api_test_text_aware(monkeypatch, prompt_style):
    monkeypatch.setattr(
        PZ_API,
        "_test_observation_space_compatibility",
        _text_aware_compatibility(PZ_API._test_observation_space_compatibility),
    )
    with pytest.warns(UserWarning):  # "Observation is not a NumPy array" and similar advice
        api_test(tictactoe_text_v0.env(prompt_style=prompt_style), num_cycles=1000)


def test_unpatched_api_test_fails_only_on_the_array_dtype_assumption():
    with (
        pytest.raises(AttributeError, match="'str' object has no attribute 'dtype'"),
        pytest.warns(UserWarning),
    ):
        api_test(tictactoe_text_v0.env(), num_cycles=10)


@pytest.mark.parametrize("first_player", ["player_0", "player_1", "random"])
def test_seed_test(first_player):
    seed_test(lambda: tictactoe_text_v0.env(first_player=first_player), num_cycles=100)


def test_random_first_player_depends_on_seed():
    env = tictactoe_text_v0.env(first_player="random")
    firsts = set()
    for seed in range(20):
        env.reset(seed=seed)
        firsts.add(env.agent_selection)
        again = tictactoe_text_v0.env(first_player="random")
        again.reset(seed=seed)
        assert again.agent_selection == env.agent_selection
    assert firsts == {"player_0", "player_1"}


def test_parallel_view_is_refused():
    from pettingzoo.utils.conversions import aec_to_parallel

    assert TicTacToeTextAEC.metadata["is_parallelizable"] is False
    with pytest.raises(AssertionError, match="is_parallelizable"):
        aec_to_parallel(TicTacToeTextAEC())


# -- same outcomes as PettingZoo's tictactoe_v3 -------------------------------------------------
def pz_cell(cell: int) -> int:
    """Our row-major cell -> tictactoe_v3's column-major cell (a transpose, its own inverse)."""
    row, col = divmod(cell, 3)
    return col * 3 + row


def test_cell_mapping_is_a_transpose():
    assert [pz_cell(c) for c in range(9)] == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert all(pz_cell(pz_cell(c)) == c for c in range(9))


@pytest.mark.parametrize("seed", range(5))
def test_random_games_match_pettingzoo_tictactoe_v3(seed):
    from pettingzoo.classic import tictactoe_v3

    rng = np.random.default_rng(seed)
    ours, theirs = tictactoe_text_v0.env(), tictactoe_v3.env()
    for _ in range(40):
        moves = random_game(rng)
        ours.reset(seed=0)
        theirs.reset(seed=0)
        board = B.EMPTY_BOARD
        for move in moves:
            # Same position: plane 0 of the mover's observation holds its own marks, column-major.
            mover_mark = B.to_move(board)
            planes = theirs.observe(theirs.agent_selection)["observation"]  # [3, 3, 2] int8
            own = {r * 3 + c for r in range(3) for c in range(3) if planes[c, r, 0]}
            assert own == {i for i, m in enumerate(board) if m == mover_mark}
            ours.step(f"<move>{move}</move>")
            theirs.step(pz_cell(move))
            board = B.apply_move(board, move)
        assert ours.unwrapped.board == board
        assert all(ours.terminations.values()) and all(theirs.terminations.values())
        our_x = ours.infos["player_0"]["outcome"]  # our player_0 plays X by default
        pz_x = theirs.rewards["player_1"]  # tictactoe_v3's player_1 moves first (X)
        assert our_x == {1: "win", 0: "draw", -1: "loss"}[pz_x]


# -- same prompts, parsing and invalid-action handling as TicTacToe-v0 ---------------------------
ACTIONS = [
    "hello",
    "<move>4</move>",
    "<move>4</move>",
    "<move>nine</move>",
    "<move>0</move>",
    "<think><move>1</move></think>",
    "<move>12</move>",
    "<move>2</move>",
    "<move>6</move>",
    "<move>8</move>",
    "<move>1</move>",
    "<move>3</move>",
    "<move>5</move>",
    "<move>7</move>",
]


@pytest.mark.parametrize(
    ("style", "other_style"), [("full", "full"), ("compact", "compact"), ("compact", "full")]
)
@pytest.mark.parametrize("agent_mark", ["X", "O"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seat_sees_what_the_single_agent_env_shows(agent_mark, seed, style, other_style):
    """One seat replays the agent's actions, the other the single-agent env's opponent."""
    single = TicTacToeEnv(agent_mark=agent_mark, random_move_prob=0.3, prompt_style=style)
    obs, info = single.reset(seed=seed)
    first = "player_0" if agent_mark == "X" else "player_1"
    aec = tictactoe_text_v0.env(
        first_player=first,
        max_actions_per_seat=20,
        prompt_style={"player_0": style, "player_1": other_style},
    )
    aec.reset(seed=seed)
    agent, opponent = "player_0", "player_1"
    if agent_mark == "O":
        aec.step(f"<move>{info['opponent_move']}</move>")
    assert aec.agent_selection == agent
    assert aec.observe(agent) == obs
    assert aec.unwrapped.infos[agent]["system_prompt"] == info["system_prompt"]
    for action in ACTIONS:
        obs, reward, terminated, _, info = single.step(action)
        aec.step(action)
        if info["opponent_move"] is not None:
            assert aec.agent_selection == opponent
            aec.step(f"<move>{info['opponent_move']}</move>")
        assert aec.observe(agent) == obs
        shared = (
            "board",
            "legal_moves",
            "agent_mark",
            "outcome",
            "invalid_action",
            "invalid_reason",
            "agent_move",
        )
        assert {k: aec.unwrapped.infos[agent][k] for k in shared} == {k: info[k] for k in shared}
        if terminated:
            assert all(aec.unwrapped.terminations.values())
            assert aec.rewards[agent] == reward
            break
    else:
        pytest.fail("the scripted actions should finish the game")


class Replay:
    """A policy that answers with the given completions, in order."""

    name = "replay"
    tokens_generated = None

    def __init__(self, texts):
        self.texts = list(texts)

    def act(self, conversations, infos):
        return [Completion(self.texts.pop(0)) for _ in conversations]


def single_agent_conversation(agent_mark, seed, style):
    """The chat of a TicTacToe-v0 agent playing ACTIONS until the game ends, and the
    opponent's moves (as completions of the other seat)."""
    single = TicTacToeEnv(agent_mark=agent_mark, random_move_prob=0.3, prompt_style=style)
    obs, info = single.reset(seed=seed)
    messages = conversation_start(obs, info)
    opponent = [] if info["opponent_move"] is None else [info["opponent_move"]]
    for action in ACTIONS:
        obs, _, terminated, _, info = single.step(action)
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
        if info["opponent_move"] is not None:
            opponent.append(info["opponent_move"])
        if terminated:
            return messages, [f"<move>{m}</move>" for m in opponent], info["outcome"]
    pytest.fail("the scripted actions should finish the game")


@pytest.mark.parametrize("other_style", ["full", "compact"])
@pytest.mark.parametrize("style", ["full", "compact"])
@pytest.mark.parametrize("agent_mark", ["X", "O"])
@pytest.mark.parametrize("seed", [0, 2, 4])  # the game ends on the agent's move or the opponent's
def test_selfplay_conversation_equals_the_single_agent_conversation(
    agent_mark, seed, style, other_style
):
    """The conversation selfplay records for a seat (system prompt, every observation it acts
    on, invalid actions, the final result) is byte-identical to the TicTacToe-v0 agent's chat."""
    from textgym.selfplay import selfplay

    expected, opponent_moves, outcome = single_agent_conversation(agent_mark, seed, style)
    assert any(m["content"].startswith(("invalid ", "Invalid move:")) for m in expected)
    styles = {"player_0": style, "player_1": other_style}
    (game,) = selfplay(
        [Replay(ACTIONS), Replay(opponent_moves)],
        [seed],
        first_player="player_0" if agent_mark == "X" else "player_1",
        make_env=lambda: tictactoe_text_v0.env(max_actions_per_seat=20, prompt_style=styles),
    )
    assert game.trajectories["player_0"].messages == expected
    assert game.outcomes["player_0"] == outcome and game.terminated


def test_compact_texts():
    env = tictactoe_text_v0.env(prompt_style={"player_0": "compact", "player_1": "full"})
    env.reset(seed=0)
    assert env.unwrapped.infos["player_0"]["system_prompt"] == (
        "Tic-tac-toe. You are X. Reply <move>N</move>, N a free cell 0-8."
    )
    assert env.unwrapped.infos["player_1"]["system_prompt"].startswith("You are playing")
    assert env.observe("player_0") == "012\n345\n678\nfree 0 1 2 3 4 5 6 7 8"
    env.step("<move>4</move>")
    assert env.observe("player_0") == "012\n3X5\n678\nwaiting"
    assert env.observe("player_1").startswith("A new game begins. You play O. Opponent (X)")
    env.step("<move>0</move>")
    assert env.observe("player_0") == "opp 0\nO12\n3X5\n678\nfree 1 2 3 5 6 7 8"
    env.step("<move>0</move>")
    assert env.observe("player_0") == "invalid occupied\nO12\n3X5\n678\nfree 1 2 3 5 6 7 8"
    for move in [8, 1, 2, 5, 6]:  # X: 4 8 2 6 wins on the 2-4-6 diagonal
        env.step(f"<move>{move}</move>")
    assert env.unwrapped.infos["player_0"]["outcome"] == "win"
    assert env.observe("player_0") == "over win"
    assert env.observe("player_1").endswith("Game over: loss.")


@pytest.mark.parametrize(
    "prompt_style",
    [
        "short",
        None,
        {"player_0": "full"},
        {"player_0": "full", "player_1": "tiny"},
        {"player_0": "full", "player_1": "full", "player_2": "full"},
    ],
)
def test_prompt_style_errors(prompt_style):
    with pytest.raises(ValueError, match="Expected prompt_style in \\('full', 'compact'\\)"):
        TicTacToeTextAEC(prompt_style=prompt_style)


# -- rewards, termination, truncation, errors ----------------------------------------------------
@pytest.mark.parametrize(
    ("moves", "rewards", "outcomes"),
    [
        (
            [0, 3, 1, 4, 2],
            {"player_0": 1.0, "player_1": 0.0},
            {"player_0": "win", "player_1": "loss"},
        ),
        (
            [4, 0, 8, 2, 1, 7, 6, 3, 5],
            {"player_0": 0.5, "player_1": 0.5},
            {"player_0": "draw", "player_1": "draw"},
        ),
        (
            [0, 3, 1, 4, 8, 5],
            {"player_0": 0.0, "player_1": 1.0},
            {"player_0": "loss", "player_1": "win"},
        ),
    ],
)
def test_per_seat_rewards(moves, rewards, outcomes):
    finals = play(tictactoe_text_v0.env(), list(moves))
    assert {s: r for s, (r, _) in finals.items()} == rewards
    assert {s: o for s, (_, o) in finals.items()} == outcomes


def test_marks_follow_first_player():
    env = tictactoe_text_v0.env(first_player="player_1")
    finals = play(env, [0, 3, 1, 4, 2])  # X wins: player_1 plays X
    assert finals == {"player_1": (1.0, "win"), "player_0": (0.0, "loss")}


def test_invalid_actions_keep_the_turn_and_truncate_at_the_limit():
    env = tictactoe_text_v0.env(max_actions_per_seat=5)
    env.reset(seed=0)
    for _ in range(5):
        assert env.agent_selection == "player_0"
        env.step("no move here")
        info = env.unwrapped.infos["player_0"]
        assert info["invalid_action"] and info["invalid_reason"] == "no_move_tag"
        assert env.unwrapped.board == B.EMPTY_BOARD
        assert env.observe("player_0").startswith("Invalid move:")
    assert all(env.unwrapped.truncations.values()) and not any(env.unwrapped.terminations.values())
    _, reward, terminated, truncated, info = env.last()
    assert (reward, terminated, truncated, info["outcome"]) == (0.0, False, True, None)


def test_errors():
    env = tictactoe_text_v0.env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="Expected the action of player_0 to be a str"):
        env.step(4)
    with pytest.raises(ValueError, match="first_player"):
        TicTacToeTextAEC(first_player="X")
    with pytest.raises(ValueError, match="max_actions_per_seat"):
        TicTacToeTextAEC(max_actions_per_seat=4)
    for move in [0, 3, 1, 4, 2]:
        env.step(f"<move>{move}</move>")
    assert env.terminations[env.agent_selection]
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("<move>5</move>")


def documented_info_keys() -> dict[str, set[str]]:
    section = TicTacToeTextAEC.__doc__.split("Information:", 1)[1].split("Arguments:", 1)[0]
    keys: dict[str, set[str]] = {"reset": set(), "step": set()}
    for key, where in re.findall(r"^\s*- ``(\w+)`` \[([a-z, ]+)\]", section, flags=re.M):
        for part in where.split(","):
            keys[part.strip()].add(key)
    return keys


def test_documented_info_keys_equal_emitted():
    documented = documented_info_keys()
    env = tictactoe_text_v0.env()
    env.reset(seed=0)
    emitted_reset = set().union(*(set(i) for i in env.unwrapped.infos.values()))
    emitted_step: set[str] = set()
    for action in [
        "bad",
        "<move>0</move>",
        "<move>0</move>",
        "<move>3</move>",
        "<move>1</move>",
        "<move>4</move>",
        "<move>2</move>",
    ]:
        seat = env.agent_selection
        env.step(action)
        emitted_step |= set(env.unwrapped.infos[seat])
    assert emitted_reset == documented["reset"]
    assert emitted_step == documented["step"]


def test_render_modes():
    env = TicTacToeTextAEC(render_mode="ansi")
    env.reset(seed=0)
    env.step("<move>4</move>")
    assert env.render() == " 0 | 1 | 2\n---+---+---\n 3 | X | 5\n---+---+---\n 6 | 7 | 8"
    with pytest.raises(ValueError, match="render_mode"):
        TicTacToeTextAEC(render_mode="rgb_array")


@pytest.mark.parametrize("style", ["full", "compact"])
def test_an_over_long_action_is_invalid_and_not_read(style):
    aec = tictactoe_text_v0.env(prompt_style=style)
    aec.reset(seed=0)
    seat = aec.agent_selection
    limit = aec.action_space(seat).max_length
    started = time.perf_counter()
    aec.step("<move>4</move>" + "<think>" * limit)
    assert time.perf_counter() - started < 0.5
    info = aec.infos[seat]
    assert info["invalid_action"] is True and info["invalid_reason"] == "too_long"
    assert aec.agent_selection == seat and aec.board == B.EMPTY * 9  # unchanged, same seat
    assert len(aec.observe(seat)) <= aec.observation_space(seat).max_length


# --- reset options: honoured or refused exactly as TicTacToe-v0 (issue 52 item 7) ---------

HOSTILE_OPTIONS = [
    {"board": "garbage"},
    {"board": "X" * 1_000_000},
    {"board": "XXXXXXXXX"},
    {"board": "XXX.OO..."},
    {"board": 5},
    {"board": ["X"] * 9},
    {"board": "XOXOXOOXO"},  # full
]


@pytest.mark.parametrize("options", HOSTILE_OPTIONS, ids=lambda o: repr(o)[:30])
def test_the_twin_refuses_the_boards_the_single_agent_env_refuses(options):
    with pytest.raises(ValueError) as single:
        TicTacToeEnv().reset(seed=0, options=options)
    twin = tictactoe_text_v0.env()
    with pytest.raises(ValueError) as paired:
        twin.reset(seed=0, options=options)
    assert str(paired.value) == str(single.value)
    assert len(str(paired.value)) < 400  # a bounded excerpt of the input
    twin.reset(seed=0)  # a refused reset leaves the twin usable
    twin.step("<move>4</move>")
    assert twin.infos[twin.agent_selection]["board"] == "....X...."


@pytest.mark.parametrize("options", [{"nope": 1}, {"agent_mark": "X"}, {"opponent": "random"}])
def test_the_twin_warns_of_options_it_does_not_have(options):
    # PettingZoo's api_test resets with {"options": 1}, so the twin cannot refuse them as
    # TicTacToe-v0 does; it never ignores them silently.
    twin = tictactoe_text_v0.env()
    with pytest.warns(UserWarning, match="Unknown reset options"):
        twin.reset(seed=0, options=options)
    assert twin.infos[twin.agent_selection]["board"] == B.EMPTY_BOARD


@pytest.mark.parametrize("board", ["XO.......", "XO.X.O...", "X........"])
@pytest.mark.parametrize("first", ["player_0", "player_1"])
def test_the_twin_starts_from_a_board_option_as_the_single_agent_env(board, first):
    twin = tictactoe_text_v0.env()
    twin.reset(seed=3, options={"board": board, "first_player": first})
    mover = B.to_move(board)
    seat = twin.agent_selection
    assert twin.infos[seat]["board"] == board and twin.infos[seat]["agent_mark"] == mover
    assert (seat == first) == (mover == "X")
    single_obs, _ = TicTacToeEnv().reset(seed=3, options={"board": board})
    assert twin.observe(seat) == single_obs  # the mover sees what a TicTacToe-v0 agent sees
    waiting = next(s for s in twin.agents if s != seat)
    assert "it is your move" not in twin.observe(waiting)


def test_a_refused_reset_of_the_single_agent_env_has_no_effect():
    # Options are checked before the env is reseeded, so the next unseeded reset continues the
    # seeded stream as if the refused call had not happened.
    touched, untouched = TicTacToeEnv(agent_mark="random"), TicTacToeEnv(agent_mark="random")
    for env in (touched, untouched):
        env.reset(seed=11)
    with pytest.raises(ValueError):
        touched.reset(seed=99, options={"board": "garbage"})
    for _ in range(5):
        assert touched.reset()[1]["agent_mark"] == untouched.reset()[1]["agent_mark"]
        assert touched.reset()[0] == untouched.reset()[0]
