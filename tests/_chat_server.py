"""What the tests' scripted OpenAI-compatible servers share: a chat-completions response body,
and serving a ``ThreadingHTTPServer`` on a thread for the length of a test.

Each test module scripts its own server (what it answers, how it fails); import these
relatively (``from .._chat_server import chat_completion, serving``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["chat_completion", "serving"]

Server = TypeVar("Server", bound=ThreadingHTTPServer)


def chat_completion(message: Any, usage: dict[str, int] | None = None) -> bytes:
    """The JSON body of a chat completion whose one choice is ``message``, finished by "stop",
    with ``usage`` when given.

    Example:
        >>> chat_completion({"role": "assistant", "content": "hi"})[:41]
        b'{"id": "x", "object": "chat.completion", '
    """
    body: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """Serve ``server`` on a daemon thread (polling every 0.05 s) until the block ends, then
    shut it down and close its socket."""
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
