"""No session leaks under churn: 10,000 TicTacToe-v0 episodes against one ``textgym serve``
process, 64 clients at a time, one WebSocket session an episode, and every tenth client killed
mid-episode (the TCP connection dropped, no close handshake). ``/health`` counts no live session
afterwards, and every episode that was played out ended as the env says it ends."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("openenv")
import httpx
from websockets.asyncio.client import connect

EPISODES = 10_000
CONCURRENCY = 64
KILL_EVERY = 10  # episode i is killed mid-episode when i % KILL_EVERY == 0
BUDGET_S = 900  # the whole load, bounded; about 150 s on 2 shared cores


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=10).json()


def _serve(port: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "textgym.cli", "serve", "textgym/TicTacToe-v0"]
    argv += ["--port", str(port), "--max-sessions", str(2 * CONCURRENCY)]
    argv += ["--idle-timeout", "60", "--step-timeout", "10"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"textgym serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            _health(url)
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("textgym serve did not answer /health within 60 s")


async def _episode(ws_url: str, index: int, ended: list[int]) -> None:
    """One episode on its own session: reset, then the lowest legal move until it ends; a
    killed one drops its connection after its first move."""
    async with connect(ws_url) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"seed": index}}))
        reply = json.loads(await ws.recv())
        for _ in range(10):
            assert reply["type"] == "observation", reply
            obs = reply["data"]["observation"]
            if reply["data"]["done"]:
                assert obs["terminated"] or obs["truncated"]
                ended.append(index)
                return
            move = obs["info"]["legal_moves"][0]
            await ws.send(json.dumps({"type": "step", "data": {"text": f"<move>{move}</move>"}}))
            reply = json.loads(await ws.recv())
            if index % KILL_EVERY == 0:
                ws.transport.abort()  # killed: no close frame, the socket just goes
                return
        raise AssertionError(f"episode {index} did not end in 10 moves")


async def _load(ws_url: str) -> list[int]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(EPISODES):
        queue.put_nowait(index)
    ended: list[int] = []

    async def worker() -> None:
        while not queue.empty():
            await _episode(ws_url, queue.get_nowait(), ended)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONCURRENCY))), BUDGET_S)
    return ended


@pytest.mark.slow
@pytest.mark.subprocess
def test_ten_thousand_episodes_with_killed_clients_leak_no_session() -> None:
    port = _free_port()
    proc = _serve(port)
    url = f"http://127.0.0.1:{port}"
    try:
        ended = asyncio.run(_load(f"ws://127.0.0.1:{port}/ws"))
        assert len(ended) == EPISODES - EPISODES // KILL_EVERY
        deadline = time.monotonic() + 30
        while _health(url)["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _health(url) == {
            "status": "healthy",
            "active_sessions": 0,
            "max_sessions": 2 * CONCURRENCY,
        }
        assert proc.poll() is None  # the server lives
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
