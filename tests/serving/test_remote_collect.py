"""``textgym collect --env-url``: a collect over a served env writes the same records, in the
same order, as the local collect with the same seed."""

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


def _collect(out: Path, *extra: str) -> list[dict]:
    argv = ["collect", ENV, "--policy", "minimax", "--episodes", "8", "--seed", "5"]
    argv += ["--wrappers", "invalid_action_penalty", "--rollout-batch-size", "4"]
    argv += ["--no-progress", "--output", str(out), *extra]
    assert main(argv) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_collect_over_a_served_env_writes_the_local_records(tmp_path: Path) -> None:
    local = _collect(tmp_path / "local.jsonl")
    with served(
        EnvRecipe(ENV, wrappers=("invalid_action_penalty",)).make, ENV, SETTINGS, RECIPE
    ) as url:
        remote = _collect(tmp_path / "remote.jsonl", "--env-url", url)
    assert len(local) == 8
    assert remote == local


def test_collect_refuses_a_server_of_another_env(tmp_path: Path, capsys) -> None:
    with served(EnvRecipe(ENV).make, ENV, SETTINGS, {**RECIPE, "wrappers": []}) as url:
        argv = ["collect", ENV, "--policy", "random", "--episodes", "2", "--no-progress"]
        argv += ["--wrappers", "invalid_action_penalty", "--env-url", url]
        argv += ["--output", str(tmp_path / "x.jsonl")]
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected" in err[0] and "--wrappers" in err[0], err
