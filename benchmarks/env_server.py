"""Env server cost: steps/s and p50/p99 step latency in process and served (OpenEnv's stack)
at 1, 16, 256 and 1,024 concurrent sessions, for textgym's TicTacToe-v0 and EmailToolUse-v1
and two references served by the same stack: an echo env (the stack's floor) and TextArena's
TicTacToe-v0 behind a thin adapter (the way OpenEnv's own textarena env serves it).

What is measured: each session plays whole episodes. TicTacToe-v0: reset with a seed, then the
first legal move of ``info["legal_moves"]`` as ``<move>N</move>`` until the game ends (a step is
the agent's move and the seeded minimax opponent's reply). EmailToolUse-v1: a
``email_search_emails`` tool call, then ``Done.`` (a step is one tool turn on the SQLite
mailbox). TextArena's TicTacToe-v0: the client plays both seats, ``[N]`` for the first free cell
(a step is one move, no opponent search). Echo: answers the action, ends after 9 steps. A step's
latency is the time from sending it to its reply, as the client sees it.

Served over WebSocket: the server is a separate process (``textgym serve`` for textgym's envs,
this script's ``--serve NAME PORT`` for the references, all through
:func:`textgym.serving.openenv_server.create_server_app` and uvicorn); the load generator is
OpenEnv's own async ``EnvClient``, one per session, all in one asyncio loop in this process, on
the same cores as the server. Served over HTTP: OpenEnv's HTTP ``/reset`` is stateless (a fresh
env per request, no session), so the HTTP rows time ``POST /reset`` at the given concurrency;
HTTP ``/step`` has no session to step. In-process rows step the same number of envs in turn, one
thread. Each row runs for ``--seconds`` after its sessions are open and reset; the whole run is
bounded (``--budget-s``) and marks the rows it has no time for as skipped.

Usage::

    python benchmarks/env_server.py --output /tmp/env_server.json  # about 5 minutes
    python benchmarks/env_server.py --envs echo tictactoe --sessions 1 16 --seconds 2 \
        --output /tmp/x.json

``--output`` under ``benchmarks/results/`` needs ``--update-results``.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import gymnasium as gym
from _outputs import check_results_write, run_main
from _provenance import REPO_ROOT, dist_version, git, git_dirty, machine_info, write_result

from textgym.cli.usage import script_config
from textgym.serving.client import text_client_class

#: The envs measured: textgym's by id, the references by this script.
TEXTGYM_IDS = {"tictactoe": "textgym/TicTacToe-v0", "email": "textgym/EmailToolUse-v1"}
REFERENCES = ("echo", "textarena_tictactoe")
EnvName = Literal["echo", "tictactoe", "email", "textarena_tictactoe"]
ENVS: tuple[EnvName, ...] = get_args(EnvName)
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


class TextArenaTicTacToe(gym.Env[str, str]):
    """TextArena's TicTacToe-v0 (``textarena.make``) as a one-agent text env, the agent playing
    whichever seat is to move, as OpenEnv's textarena env serves multi-player games; the reward
    is TextArena's for the seat that moved last, at the end. ``info["legal_moves"]`` lists the
    free cells (TextArena's own board state)."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        import textarena

        from textgym.spaces import UnicodeText

        self._env = textarena.make("TicTacToe-v0")
        self.action_space = UnicodeText(max_length=1024)
        self.observation_space = UnicodeText(max_length=8192)

    def _free(self) -> list[int]:
        board = self._env.state.game_state["board"]
        return [3 * r + c for r in range(3) for c in range(3) if board[r][c] == ""]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._env.reset(num_players=2, seed=seed)
        _, observation = self._env.get_observation()
        return str(observation), {"legal_moves": self._free()}

    def step(self, action: str):
        player = self._env.state.current_player_id
        done, _ = self._env.step(action)
        reward = 0.0
        if done:
            rewards, _ = self._env.close()
            reward = float((rewards or {}).get(player, 0.0))
            return "game over", reward, True, False, {"legal_moves": []}
        _, observation = self._env.get_observation()
        return str(observation), reward, False, False, {"legal_moves": self._free()}


def _make(name: str) -> gym.Env:
    if name == "echo":
        return EchoEnv()
    if name == "textarena_tictactoe":
        return TextArenaTicTacToe()
    import textgym  # noqa: F401  (registers the ids)

    return gym.make(TEXTGYM_IDS[name])


#: EmailToolUse-v1's two turns: one tool call on the mailbox, then the final answer.
EMAIL_TURNS = (
    '<tool_call>{"name": "email_search_emails", "arguments": {"query": "meeting"}}</tool_call>',
    "Done.",
)


def _action(name: str, info: dict[str, Any], turn: int) -> str:
    """The scripted action of ``name``'s env at turn ``turn`` of an episode."""
    if name == "email":
        return EMAIL_TURNS[min(turn, 1)]
    if name == "textarena_tictactoe":
        return f"[{info['legal_moves'][0]}]"
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
    games, turns, latencies = list(range(sessions)), [0] * sessions, []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i, env in enumerate(envs):
            t0 = time.perf_counter()
            _, _, term, trunc, info = env.step(_action(name, infos[i], turns[i]))
            turns[i] += 1
            if term or trunc:
                games[i] += sessions
                info, turns[i] = env.reset(seed=games[i])[1], 0
            latencies.append(time.perf_counter() - t0)
            infos[i] = info
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return _summary(latencies, len(latencies), elapsed)


async def _served(name: str, url: str, sessions: int, seconds: float) -> dict[str, Any]:
    client_cls = text_client_class()
    clients = [client_cls(base_url=url, message_timeout_s=60) for _ in range(sessions)]
    await asyncio.gather(*(c.connect() for c in clients))
    first = await asyncio.gather(*(c.reset(seed=i) for i, c in enumerate(clients)))
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def play(i: int, client: Any, result: Any) -> None:
        game, turn = i, 0
        info = result.observation.get("info", {})
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            result = await client.step(_action(name, info, turn))
            turn += 1
            obs = result.observation
            if obs.get("terminated") or obs.get("truncated"):
                game, turn = game + sessions, 0
                result = await client.reset(seed=game)
                obs = result.observation
            latencies.append(time.perf_counter() - t0)
            info = obs.get("info", {})

    start = time.perf_counter()
    await asyncio.gather(*(play(i, c, r) for i, (c, r) in enumerate(zip(clients, first))))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return _summary(latencies, len(latencies), elapsed)


async def _http_resets(url: str, sessions: int, seconds: float) -> dict[str, Any]:
    """``POST /reset`` (OpenEnv's stateless HTTP path) from ``sessions`` concurrent callers."""
    import httpx

    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def call(i: int) -> None:
            seed = i
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                reply = await client.post("/reset", json={"seed": seed})
                reply.raise_for_status()
                latencies.append(time.perf_counter() - t0)
                seed += sessions

        start = time.perf_counter()
        await asyncio.gather(*(call(i) for i in range(sessions)))
        elapsed = time.perf_counter() - start
    return _summary(latencies, len(latencies), elapsed)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(name: str, max_sessions: int) -> Iterator[str]:
    """A server process of ``name`` on 127.0.0.1; yields its URL and stops it after."""
    port = _free_port()
    if name in REFERENCES:
        argv = [sys.executable, __file__, "--serve", name, str(port), "--max-sessions"]
        argv.append(str(max_sessions))
    else:
        argv = [sys.executable, "-m", "textgym.cli", "serve", TEXTGYM_IDS[name], "--port"]
        argv += [str(port), "--max-sessions", str(max_sessions), "--idle-timeout", "300"]
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


def serve_reference(name: str, port: int, max_sessions: int) -> None:
    """A reference env's server (``echo``, ``textarena_tictactoe``): the same stack as
    ``textgym serve``."""
    import uvicorn

    from textgym.serving.openenv_server import ServeSettings, create_server_app, ws_max_size

    probe = _make(name)
    settings = ServeSettings(max_sessions=max_sessions, idle_timeout=300.0, step_timeout=60.0)
    app = create_server_app(lambda: _make(name), probe, name, settings, {"env_id": name})
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        ws_max_size=ws_max_size(probe.action_space),
        log_level="warning",
    )


def _repeated(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several timed windows of one row: the median window's figures, with every window's
    steps/s and their range (``steps_per_s_min`` / ``_max``) beside them."""
    rates = [w["steps_per_s"] for w in windows]
    median = sorted(windows, key=lambda w: w["steps_per_s"])[len(windows) // 2]
    return {
        **median,
        "windows_steps_per_s": rates,
        "steps_per_s_min": min(rates),
        "steps_per_s_max": max(rates),
    }


def _row(name: str, mode: str, sessions: int, result: dict[str, Any]) -> dict[str, Any]:
    row = {"env": name, "mode": mode, "sessions": sessions, **result}
    print(row, flush=True)
    return row


@dataclass
class Config:
    """The command line of this benchmark."""

    envs: tuple[EnvName, ...] = ENVS
    """The envs measured: textgym's (tictactoe, email) and the references (echo, TextArena's)."""
    sessions: tuple[int, ...] = (1, 16, 256, 1024)
    """Concurrent sessions of the in-process and WebSocket rows, one row each."""
    http_sessions: tuple[int, ...] = (1, 16)
    """Concurrent requests of the HTTP /reset rows, one row each (none: no HTTP rows)."""
    seconds: float = 4.0
    """Seconds per timed window, in (0, 60]."""
    repeats: int = 1
    """Timed windows per row (their median and range)."""
    budget_s: float = 420.0
    """The whole run's bound in seconds, in (0, 3600]; rows with no time left are skipped."""
    output: Path = DEFAULT_OUTPUT
    """JSON path (under benchmarks/results/ only with --update-results)."""
    update_results: bool = False
    """Allow --output under benchmarks/results/."""
    serve: tuple[str, int] | None = None
    """Internal (how this script starts a reference's server): serve the env NAME on PORT."""
    max_sessions: int | None = None
    """Internal, with --serve: the server's most sessions (None: 512)."""

    def __post_init__(self) -> None:
        for flag, values in [
            ("--sessions", self.sessions),
            ("--http-sessions", self.http_sessions),
            ("--repeats", (self.repeats,)),
        ]:
            if min(values, default=1) < 1:
                raise ValueError(f"{flag}: expected an integer >= 1, got {min(values)}")
        if not (0 < self.seconds <= 60 and 0 < self.budget_s <= 3600):
            raise ValueError("expected 0 < --seconds <= 60 and 0 < --budget-s <= 3600")


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "env_server.py", __doc__)
    if args.serve is not None:
        serve_reference(args.serve[0], args.serve[1], args.max_sessions or 512)
        return 0
    check_results_write(args.output, "--output", update_results=args.update_results)
    began, rows = time.monotonic(), []
    record: dict[str, Any] = {
        "benchmark": "env_server",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "versions": {
            n: dist_version(n)
            for n in ("openenv", "uvicorn", "websockets", "gymnasium", "textarena")
        },
        "settings": {
            "envs": {n: TEXTGYM_IDS.get(n, n) for n in args.envs},
            "sessions": args.sessions,
            "http_sessions": args.http_sessions,
            "seconds_per_row": args.seconds,
            "windows_per_row": args.repeats,
            "transport": "WebSocket (OpenEnv EnvClient); HTTP POST /reset (httpx)",
        },
        "note": "server and load generator on the same 2 cores (load_avg_1m_at_start says "
        "what else ran); a TextArena step is one move, a textgym TicTacToe step a move and the "
        "minimax reply.",
        "rows": rows,
    }

    def out_of_time() -> bool:
        return time.monotonic() - began > args.budget_s - args.repeats * args.seconds - 10

    most = max(args.sessions + args.http_sessions) + 8
    for name in args.envs:
        for sessions in args.sessions:
            windows = [in_process(name, sessions, args.seconds) for _ in range(args.repeats)]
            rows.append(_row(name, "in_process", sessions, _repeated(windows)))
        with server(name, most) as url:
            for mode, sizes, load in (
                ("served_ws", args.sessions, _served),
                ("served_http_reset", args.http_sessions, None),
            ):
                for sessions in sizes:
                    if out_of_time():
                        rows.append(_row(name, mode, sessions, {"skipped": "out of --budget-s"}))
                        continue
                    windows = [
                        asyncio.run(_http_resets(url, sessions, args.seconds))
                        if load is None
                        else asyncio.run(load(name, url, sessions, args.seconds))
                        for _ in range(args.repeats)
                    ]
                    rows.append(_row(name, mode, sessions, _repeated(windows)))
    record["wall_s"] = round(time.monotonic() - began, 1)
    record["load_avg_1m_at_end"] = os.getloadavg()[0]
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
