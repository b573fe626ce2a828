"""A hostile OpenAI-compatible server on 127.0.0.1: ``textgym eval --policy openai`` ends in
bounded time with one ``textgym: error:`` line and exit code 1, keeping the episodes finished
before the server turned.

The server answers the first ``GOOD`` requests with a chat completion, then every request in
one hostile way: a body that is not UTF-8, JSON 100,000 levels deep (at the top, inside
``choices``), a body cut short of its Content-Length, cut-off JSON, a hang past ``--timeout-s``,
bytes trickled slower than the timeout allows, a choice nested 500 levels deep (a message that
quoted it would fail), an empty body.
"""

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai", reason='needs the openai client: pip install "textgym[openai]"')

from textgym.cli import main

from .._chat_server import chat_completion, serving

GOOD = 2  # requests answered before the server turns
TIMEOUT_S = 2.0
DEEP = 100_000


def chat_body(content: str) -> bytes:
    return chat_completion({"role": "assistant", "content": content})


#: mode -> (what the body is, words the one line must hold)
MODES = {
    "not-utf8": (b'{"choices": "\xff\xfe\xfa\xfb"}', "not UTF-8"),
    "deep-json": (b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    "deep-choices": (b'{"choices": [' + b"[" * DEEP + b"]" * DEEP + b"]}", "nested too deeply"),
    "nested-choice": (b'{"choices": [' + b"[" * 500 + b"]" * 500 + b"]}", "no message object"),
    "cut-json": (b'{"choices": [{"message": {"content": "#### 7', "not a chat completion"),
    "empty": (b"", "not a chat completion"),
    "short-body": (None, "failed after 1 attempt(s)"),
    "hang": (None, f"cut off at timeout_s={TIMEOUT_S:g} s"),
    "trickle": (None, f"cut off at timeout_s={TIMEOUT_S:g} s"),
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str):
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.mode = mode
        self.answered = 0
        self.stop = threading.Event()

    def handle_error(self, request, client_address):
        pass  # the client hung up on a hostile answer: expected, and not worth a traceback


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, *args):
        pass

    def head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
        self.head(len(body))
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with contextlib.suppress(OSError):  # the client gave up first
            if self.server.answered < GOOD:
                self.server.answered += 1
                body = chat_body("#### 7")
                self.head(len(body))
                self.wfile.write(body)
                return
            mode = self.server.mode
            body = MODES[mode][0]
            if body is not None:
                self.head(len(body))
                self.wfile.write(body)
            elif mode == "short-body":  # promise 1000 bytes, send 20, hang up
                self.head(1000)
                self.wfile.write(chat_body("x")[:20])
                self.close_connection = True
            elif mode == "hang":
                self.server.stop.wait(4 * TIMEOUT_S)
            elif mode == "trickle":  # one byte every 0.5 s: each read is quick, the whole is not
                self.head(2000)
                for byte in chat_body("#### 7")[:40]:
                    if self.server.stop.wait(0.5):
                        break
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()


@pytest.fixture
def hostile():
    with contextlib.ExitStack() as servers:

        def start(mode: str) -> Server:
            srv = servers.enter_context(serving(Server(mode)))
            servers.callback(srv.stop.set)  # before the shutdown: a trickling handler stops
            return srv

        yield start


@pytest.mark.parametrize("mode", list(MODES))
def test_a_hostile_server_ends_eval_in_one_line_keeping_the_finished_episodes(
    hostile, mode, tmp_path, capsys
):
    server = hostile(mode)
    out = tmp_path / "run"
    argv = ["eval", "textgym/GSM8K-v0", "--policy", "openai", "--base-url", server.url]
    argv += ["--limit", "5", "--rollout-batch-size", "1", "--max-retries", "0"]
    argv += ["--timeout-s", str(TIMEOUT_S), "--no-progress", "--output-dir", str(out)]
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 1 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("textgym: error: --policy openai failed: "), lines[0]
    assert MODES[mode][1] in lines[0], lines[0]
    assert f"stopped after {GOOD} of 5 episodes" in lines[0]
    # Bounded: one attempt of at most --timeout-s, plus the client's start on a loaded machine.
    assert elapsed < 3 * TIMEOUT_S + 10, elapsed
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(records) == summary["episodes"] == GOOD and summary["complete"] is False
    assert [r["return"] for r in records] == [summary["mean_return"]] * GOOD


def test_a_models_list_nested_too_deeply_is_one_usage_line(hostile, capsys, monkeypatch):
    server = hostile("hang")
    deep = b'{"object": "list", "data": [' + b"[" * DEEP + b"]" * DEEP + b"]}"

    def do_get(self):
        self.head(len(deep))
        self.wfile.write(deep)

    monkeypatch.setattr(Handler, "do_GET", do_get)
    argv = ["eval", "textgym/GSM8K-v0", "--policy", "openai", "--base-url", server.url]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--limit", "1", "--timeout-s", str(TIMEOUT_S), "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith("textgym: error: cannot build policy 'openai'")
    assert "nested too deeply" in err
