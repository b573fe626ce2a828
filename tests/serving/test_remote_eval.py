"""``textgym eval --env-url``: the same seed gives the same trajectories local or remote, over
two servers; a server that goes away stops the run with one error line, keeping what finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv")

from textgym.builder import EnvRecipe
from textgym.cli import main
from textgym.serving.openenv_server import ServeSettings

from ._server import served

ENV = "textgym/TicTacToe-v0"
RECIPE = {"env_id": ENV, "env_kwargs": {}, "wrappers": ["invalid_action_penalty"]}
SETTINGS = ServeSettings(max_sessions=8, idle_timeout=30.0, step_timeout=5.0)


def _eval(out: Path, *extra: str) -> list[dict]:
    argv = ["eval", ENV, "--policy", "random", "--episodes", "12", "--seed", "3"]
    argv += ["--wrappers", "invalid_action_penalty", "--rollout-batch-size", "4"]
    argv += ["--no-progress", "--output-dir", str(out), *extra]
    assert main(argv) == 0
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_same_seed_same_trajectories_local_and_over_two_servers(tmp_path: Path) -> None:
    make_env = EnvRecipe(ENV, wrappers=("invalid_action_penalty",)).make
    local = _eval(tmp_path / "local")
    with served(make_env, ENV, SETTINGS, RECIPE) as a, served(make_env, ENV, SETTINGS, RECIPE) as b:
        remote = _eval(tmp_path / "remote", "--env-url", a, b)
    assert len(remote) == len(local) == 12
    assert remote == local


def test_a_server_of_another_env_is_refused(tmp_path: Path, capsys) -> None:
    make_env = EnvRecipe(ENV).make
    other = {**RECIPE, "wrappers": []}
    with served(make_env, ENV, SETTINGS, other) as url:
        argv = ["eval", ENV, "--policy", "random", "--episodes", "2", "--no-progress"]
        argv += ["--wrappers", "invalid_action_penalty", "--env-url", url]
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected" in err[0] and "--wrappers" in err[0], err
