"""An OpenEnv server of a textgym env on 127.0.0.1 (any free port), run by uvicorn in a thread
for the length of a test."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import gymnasium as gym
import uvicorn

from textgym.serving.openenv_server import ServeSettings, create_server_app, ws_max_size

__all__ = ["served"]


@contextlib.contextmanager
def served(
    make_env: Callable[[], gym.Env],
    env_id: str,
    settings: ServeSettings,
    recipe: dict | None = None,
) -> Iterator[str]:
    """Serve ``make_env``'s envs; yield the base URL ``http://127.0.0.1:PORT``."""
    probe = make_env()
    app = create_server_app(make_env, probe, env_id, settings, recipe)
    max_size = ws_max_size(probe.action_space)
    probe.close()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", ws_max_size=max_size, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start within 20 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
