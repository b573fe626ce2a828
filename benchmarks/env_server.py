"""Env server cost: steps/s and p50/p99 step latency of TicTacToe-v0 in process and served
(``textgym serve``, OpenEnv's WebSocket stack), with an echo env served by the same stack as
the floor, at 1, 16 and 256 concurrent sessions.

What is measured: each session plays whole games (reset with a seed, then the first legal move
of ``info["legal_moves"]`` as ``<move>N</move>`` until the game ends; the echo env answers the
action as its observation and ends after 9 steps). A step's latency is the time from sending it
to its reply, as the client sees it. Served rows: the server is a separate process (``textgym
serve``, or this script's ``--serve-echo`` mode for the echo env, both through
:func:`textgym.serving.openenv_server.create_server_app` and uvicorn); the load generator is
OpenEnv's own async ``EnvClient``, one per session, all in one asyncio loop in this process, on
the same cores as the server. In-process rows step the same number of envs in turn, one thread.
Each row runs for ``--seconds`` after its sessions are open and reset; the whole run is bounded
(``--budget-s``, default 110 s) and skips the rows it has no time for.

Usage::

    python benchmarks/env_server.py                 # about 1.5 minutes, writes the JSON
    python benchmarks/env_server.py --sessions 1 16 --seconds 2 --output /tmp/x.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
from _provenance import REPO_ROOT, dist_version, git, git_dirty, machine_info, write_result

from textgym.serving.client import text_client_class

ENV_ID = "textgym/TicTacToe-v0"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "env_server.json"


class EchoEnv(gym.Env[str, str]):
    """The floor: answers each action as its observation; an episode is 9 steps."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        from textgym.spaces import UnicodeText

        self.action_space = UnicodeText(max_length=1024)
        self.observation_space = UnicodeText(max_length=1024)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._steps = 0
        return "echo", {"legal_moves": [0]}

    def step(self, action: str):
        self._steps += 1
        return action, 0.0, self._steps >= 9, False, {"legal_moves": [0]}


def _make(name: str) -> gym.Env:
    if name == "echo":
        return EchoEnv()
    import textgym  # noqa: F401  (registers the ids)

    return gym.make(ENV_ID)


def _move(info: dict[str, Any]) -> str:
    return f"<move>{info['legal_moves'][0]}</move>"


def _summary(latencies: list[float], steps: int, seconds: float) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "steps": steps,
        "seconds": round(seconds, 3),
        "steps_per_s": round(steps / seconds, 1),
        "p50_ms": round(1e3 * ordered[len(ordered) // 2], 3) if ordered else None,
        "p99_ms": round(1e3 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3)
        if ordered
        else None,
        "mean_ms": round(1e3 * statistics.fmean(ordered), 3) if ordered else None,
    }


def in_process(name: str, sessions: int, seconds: float) -> dict[str, Any]:
    """Step ``sessions`` local envs in turn for ``seconds``."""
    envs = [_make(name) for _ in range(sessions)]
    infos = [env.reset(seed=i)[1] for i, env in enumerate(envs)]
    games, latencies = list(range(sessions)), []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i, env in enumerate(envs):
            t0 = time.perf_counter()
            _, _, term, trunc, info = env.step(_move(infos[i]))
            if term or trunc:
                games[i] += sessions
                info = env.reset(seed=games[i])[1]
            latencies.append(time.perf_counter() - t0)
            infos[i] = info
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return _summary(latencies, len(latencies), elapsed)


async def _served(url: str, sessions: int, seconds: float) -> dict[str, Any]:
    client_cls = text_client_class()
    clients = [client_cls(base_url=url, message_timeout_s=60) for _ in range(sessions)]
    await asyncio.gather(*(c.connect() for c in clients))
    first = await asyncio.gather(*(c.reset(seed=i) for i, c in enumerate(clients)))
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def play(i: int, client: Any, result: Any) -> None:
        game = i
        info = result.observation.get("info", {})
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            result = await client.step(_move(info))
            obs = result.observation
            if obs.get("terminated") or obs.get("truncated"):
                game += sessions
                result = await client.reset(seed=game)
                obs = result.observation
            latencies.append(time.perf_counter() - t0)
            info = obs.get("info", {})

    start = time.perf_counter()
    await asyncio.gather(*(play(i, c, r) for i, (c, r) in enumerate(zip(clients, first))))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return _summary(latencies, len(latencies), elapsed)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(name: str, max_sessions: int) -> Iterator[str]:
    """A server process of ``name`` on 127.0.0.1; yields its URL and stops it after."""
    port = _free_port()
    if name == "echo":
        argv = [sys.executable, __file__, "--serve-echo", str(port), "--max-sessions"]
        argv.append(str(max_sessions))
    else:
        argv = [sys.executable, "-m", "textgym.cli", "serve", ENV_ID, "--port", str(port)]
        argv += ["--max-sessions", str(max_sessions), "--idle-timeout", "120"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=REPO_ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} server did not start (exit {proc.poll()})")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def serve_echo(port: int, max_sessions: int) -> None:
    """The echo env's server: the same stack as ``textgym serve``."""
    import uvicorn

    from textgym.serving.openenv_server import ServeSettings, create_server_app, ws_max_size

    probe = EchoEnv()
    settings = ServeSettings(max_sessions=max_sessions, idle_timeout=120.0, step_timeout=60.0)
    app = create_server_app(EchoEnv, probe, "echo", settings, {"env_id": "echo"})
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        ws_max_size=ws_max_size(probe.action_space),
        log_level="warning",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per row")
    parser.add_argument("--budget-s", type=float, default=110.0, help="the whole run's bound")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT))
    parser.add_argument("--serve-echo", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--max-sessions", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo is not None:
        serve_echo(args.serve_echo, args.max_sessions or 512)
        return 0
    began, rows = time.monotonic(), []
    record: dict[str, Any] = {
        "benchmark": "env_server",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "versions": {n: dist_version(n) for n in ("openenv", "uvicorn", "websockets", "gymnasium")},
        "settings": {
            "sessions": args.sessions,
            "seconds_per_row": args.seconds,
            "transport": "WebSocket (OpenEnv EnvClient)",
            "env_id": ENV_ID,
        },
        "note": "server and load generator on the same cores of a machine whose 2 cores other "
        "work shared while this ran (load_avg_1m_at_start); numbers are lower bounds.",
        "rows": rows,
    }
    most = max(args.sessions) + 8
    for name in ("echo", "tictactoe"):
        for sessions in args.sessions:
            result = in_process(name, sessions, args.seconds)
            rows.append({"env": name, "mode": "in_process", "sessions": sessions, **result})
            print(rows[-1], flush=True)
        with server(name, most) as url:
            for sessions in args.sessions:
                if time.monotonic() - began > args.budget_s - args.seconds - 10:
                    rows.append(
                        {
                            "env": name,
                            "mode": "served",
                            "sessions": sessions,
                            "skipped": "out of --budget-s",
                        }
                    )
                    continue
                result = asyncio.run(_served(url, sessions, args.seconds))
                rows.append({"env": name, "mode": "served", "sessions": sessions, **result})
                print(rows[-1], flush=True)
    record["wall_s"] = round(time.monotonic() - began, 1)
    record["load_avg_1m_at_end"] = os.getloadavg()[0]
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
