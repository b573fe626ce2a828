"""Wrappers that read an info key refuse, when built, an env that does not declare it.

``win_speed_bonus`` reads ``info["outcome"]`` and ``info["board"]``, which only TicTacToe-v0
reports; on the other envs it was accepted and crashed with ``KeyError: 'outcome'`` at the first
finished episode, in eval and in train. An env declares its step info keys as ``info_keys``;
they are held equal to its docstring's Information section here.
"""

import importlib.util

import gymnasium as gym
import pytest

import textgym
import textgym.cli.batch_play
from textgym.builder import EnvRecipe, env_factory
from textgym.cli import main
from textgym.env_checker import documented_info_keys
from textgym.wrappers import REWARD_WRAPPERS, WinSpeedBonus

TTT = "textgym/TicTacToe-v0"
WITHOUT_OUTCOME = [i for i in textgym.ENV_DESCRIPTIONS if i != TTT]


def test_every_env_but_tictactoe_lacks_an_outcome():
    assert len(WITHOUT_OUTCOME) == 4
    assert {i.split("/")[1].split("-")[0] for i in WITHOUT_OUTCOME} == {
        "ReverseText",
        "GSM8K",
        "EmailToolUse",
        "Workplace",
    }


@pytest.mark.parametrize("env_id", list(textgym.ENV_DESCRIPTIONS))
def test_declared_info_keys_are_the_documented_step_keys(env_id):
    base = gym.make(env_id).unwrapped
    assert base.info_keys == documented_info_keys(type(base))["step"]


@pytest.mark.parametrize("env_id", WITHOUT_OUTCOME)
def test_win_speed_bonus_refuses_an_env_without_outcome_when_built(env_id):
    with pytest.raises(ValueError, match=r"needs an env that reports info\['outcome'\]") as error:
        WinSpeedBonus(gym.make(env_id))
    message = str(error.value)
    assert "\n" not in message and env_id in message and TTT in message


@pytest.mark.parametrize("env_id", WITHOUT_OUTCOME)
def test_builder_refuses_win_speed_bonus_in_one_line(env_id):
    with pytest.raises(ValueError) as error:
        env_factory(EnvRecipe(env_id, wrappers=("win_speed_bonus",)))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"cannot wrap {env_id} in win_speed_bonus: ")
    assert "info['outcome']" in message


def test_a_plain_gymnasium_env_declares_nothing_and_is_refused():
    class Echo(gym.Env):
        observation_space = gym.spaces.Text(8)
        action_space = gym.spaces.Text(8)

    with pytest.raises(ValueError, match="Echo.info_keys lacks 'outcome', 'board'"):
        WinSpeedBonus(Echo())


def test_still_accepted_on_tictactoe():
    board_wrappers = tuple(name for name in REWARD_WRAPPERS if name != "give_up_penalty")
    make_env, probe = env_factory(EnvRecipe(TTT, wrappers=board_wrappers))
    probe.close()
    env = WinSpeedBonus(gym.make(TTT, opponent="random"))
    env.reset(seed=1)
    for cell in (4, 0, 8):
        *_, info = env.step(f"<move>{cell}</move>")
    assert info["outcome"] == "win" and info["reward_components"]["win_speed"] > 0


@pytest.fixture
def nothing_is_played(monkeypatch):
    def played(*args, **kwargs):
        raise AssertionError("the error must be found before any episode is played")

    monkeypatch.setattr(textgym.cli.batch_play, "iter_rollout", played)


def one_usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and "KeyError" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    return lines[0]


@pytest.mark.parametrize("env_id", WITHOUT_OUTCOME)
def test_eval_refuses_win_speed_bonus_in_one_line(env_id, capsys, nothing_is_played):
    line = one_usage_error(
        capsys,
        ["eval", env_id, "--policy", "random", "--episodes", "2", "--no-progress"]
        + ["--wrappers", "win_speed_bonus"],
    )
    assert f"{env_id} does not" in line and "info['outcome']" in line


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "tyro")),
    reason="needs the training extras: pip install 'textgym[llm,train]'",
)
def test_train_refuses_win_speed_bonus_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_usage_error(
        capsys,
        ["train", "textgym/ReverseText-v0", "--wrappers", "win_speed_bonus"]
        + ["--output-dir", str(tmp_path / "run"), "--device", "cpu"],
    )
    assert "textgym/ReverseText-v0 does not" in line and "info['outcome']" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_eval_still_plays_win_speed_bonus_on_tictactoe(capsys):
    main(
        ["eval", TTT, "--policy", "random", "--episodes", "2", "--no-progress"]
        + ["--wrappers", "win_speed_bonus"]
    )
    assert "win_speed" in capsys.readouterr().out
