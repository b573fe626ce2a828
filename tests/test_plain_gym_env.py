"""A plain ``gymnasium.Env`` with text spaces on the command line: played through
``textgym.core.TextEnvAdapter``; an env whose spaces are not text is refused in one line."""

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from textgym.builder import EnvRecipe, env_factory
from textgym.cli import main
from textgym.core import TextEnvAdapter

FIXTURES = Path(__file__).parent / "fixtures"
PLAIN = "mypkg.plain:Plain-v0"


@pytest.fixture
def mypkg(monkeypatch):
    """``tests/fixtures`` on the path; the ids ``mypkg.plain`` registers removed afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    yield
    for env_id in ("Plain-v0", "Counter-v0"):
        gym.registry.pop(env_id, None)
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def test_the_builder_gives_a_plain_text_env_the_default_contract(mypkg):
    make_env, probe = env_factory(EnvRecipe(PLAIN))
    base = probe.unwrapped
    assert isinstance(base, TextEnvAdapter) and type(base.env.unwrapped).__name__ == "PlainEnv"
    assert (base.stop_strings, base.task_ids, base.expert_policy) == ((), None, None)
    assert not base.has_gold_completion and not base.has_opponent
    obs, info = probe.reset(seed=0)
    assert obs.startswith("Say ") and info == {}  # no system prompt, no tools: as the env gave
    _, reward, terminated, truncated, _ = probe.step(obs.removeprefix("Say "))
    assert (reward, terminated, truncated) == (1.0, False, False) and type(reward) is float
    probe.close()
    assert isinstance(make_env().unwrapped, TextEnvAdapter)  # the workers' envs too


def test_eval_random_on_a_plain_env(mypkg, tmp_path, capsys):
    argv = ["eval", PLAIN, "--policy", "random", "--episodes", "6", "--no-progress"]
    assert main([*argv, "--output-dir", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["mean_turns"] == 2.0
    episode = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()[0])
    assert episode["messages"][0]["role"] == "user"  # no system message
    assert "random over 6 episodes" in capsys.readouterr().out


def test_rollouts_per_seed_collect_and_play_on_a_plain_env(mypkg, tmp_path, monkeypatch, capsys):
    argv = ["eval", PLAIN, "--policy", "random", "--no-progress", "--limit", "2"]
    assert main([*argv, "--rollouts-per-task", "3"]) == 0
    assert "2 of 2, 3 rollouts each" in capsys.readouterr().out
    out = tmp_path / "sft.jsonl"
    collect = ["collect", PLAIN, "--policy", "random", "--episodes", "3", "--no-progress"]
    assert main([*collect, "--output", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 3
    monkeypatch.setattr("builtins.input", lambda prompt="": "apple")
    assert main(["play", PLAIN, "--seed", "0"]) == 0
    assert "Say " in capsys.readouterr().out


def test_an_env_whose_actions_are_not_text_is_refused_in_one_line(mypkg, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "mypkg.plain:Counter-v0", "--policy", "random"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("textgym: error: mypkg.plain:Counter-v0 builds CounterEnv, whose ")
    assert "spaces are not text" in err and "Discrete(3)" in err
