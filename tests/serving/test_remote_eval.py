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


@pytest.mark.subprocess
def test_a_server_killed_mid_eval_stops_it_in_one_line_keeping_what_finished(
    tmp_path: Path,
) -> None:
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    textgym = [sys.executable, "-m", "textgym.cli"]
    server = subprocess.Popen(
        [*textgym, "serve", ENV, "--wrappers", "invalid_action_penalty", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out = tmp_path / "run"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        argv = [*textgym, "eval", ENV, "--policy", "random", "--episodes", "20000"]
        argv += ["--wrappers", "invalid_action_penalty", "--rollout-batch-size", "4"]
        argv += ["--no-progress", "--output-dir", str(out), "--env-url", f"http://127.0.0.1:{port}"]
        run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        trajectories = out / "trajectories.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            if trajectories.exists() and trajectories.read_text().count("\n") >= 8:
                break
            time.sleep(0.02)
        server.kill()  # the server goes away mid-run
        _, err = run.communicate(timeout=120)
    finally:
        server.kill()
        server.wait(timeout=30)
    assert run.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error:"), lines
    assert f"127.0.0.1:{port}" in lines[0]
    kept = [json.loads(line) for line in trajectories.read_text().splitlines()]
    assert len(kept) >= 8  # every finished episode kept, each a whole JSON line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["episodes"] == len(kept)


@pytest.mark.parametrize(("urls", "words"), [((), "got none"), (("host:8000",), "http(s)://")])
def test_remote_env_factory_refuses_no_or_bad_urls_at_once(urls, words) -> None:
    from textgym.errors import SetupError
    from textgym.serving.client import remote_env_factory

    with pytest.raises(SetupError) as raised:
        remote_env_factory(urls, {"env_id": "textgym/TicTacToe-v0"})
    assert words in str(raised.value)
