"""An OpenAI-compatible server's reply longer than the env's action limit is cut, saying so.

Replies past the envs' 65,536-character action limit were kept whole in the episode's history
and sent again with every later request (a 5.6 MB reply: 5.6 MB more per turn, 50 MB by turn 10,
a 56 MB ``trajectories.jsonl``). Now the policy keeps at most ``max_reply_chars`` of a reply
(default the limit), ends it with a line giving its original length, and marks the turn
``finish_reason="length"``.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

pytest.importorskip("openai", reason='needs the openai client: pip install "textgym[openai]"')

import textgym  # noqa: F401
from textgym.cli import main
from textgym.policies.openai_compat import DEFAULT_MAX_REPLY_CHARS, OpenAIPolicy, cut_reply
from textgym.rollout import rollout
from textgym.types import Completion

from .._chat_server import chat_completion, serving

TTT = "textgym/TicTacToe-v0"
LONG = 100_000
LIMIT = DEFAULT_MAX_REPLY_CHARS
NOTE = f"[textgym cut this reply at {LIMIT:,} characters; it had {LONG:,}]"


class Server(ThreadingHTTPServer):
    """Answers the first chat request with ``LONG`` characters of thinking and no move, then
    ``<move>k</move>`` for k = 0, 1, 2, ...; keeps every request body."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.requests: list[dict] = []
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, *args):
        pass

    def send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send(json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            turn = len(self.server.requests)
            self.server.requests.append(request)
        content = "<think>" + "a" * (LONG - 7) if turn == 0 else f"<move>{turn - 1}</move>"
        self.send(chat_completion({"role": "assistant", "content": content}))


@pytest.fixture
def server():
    with serving(Server()) as srv:
        yield srv


def assistant_contents(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "assistant"]


def test_cut_reply_keeps_the_start_and_says_how_long_it_was():
    reply = Completion("<think>" + "a" * (LONG - 7))
    cut = cut_reply(reply, LIMIT)
    assert len(cut.text) == LIMIT and cut.finish_reason == "length"
    assert cut.text.startswith("<think>aaa") and cut.text.endswith("\n" + NOTE)
    short = Completion("<move>4</move>", finish_reason="stop")
    assert cut_reply(short, LIMIT) is short


def test_max_reply_chars_is_checked():
    with pytest.raises(ValueError, match="max_reply_chars"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", check=False, max_reply_chars=10)


def test_the_next_request_holds_at_most_the_limit_of_a_long_reply(server):
    policy = OpenAIPolicy(server.url, "m", max_retries=0, timeout_s=10)
    (traj,) = rollout(lambda: gym.make(TTT, opponent="random"), policy, seeds=[0])
    first, second = server.requests[0], server.requests[1]
    assert assistant_contents(first) == []
    (sent,) = assistant_contents(second)
    assert len(sent) <= LIMIT and sent.endswith(NOTE)
    assert len(json.dumps(second)) < LIMIT + 10_000  # was LONG more
    for later in server.requests[2:]:
        assert max(map(len, assistant_contents(later))) <= LIMIT
    recorded = traj.messages[2]
    assert recorded["role"] == "assistant" and recorded["content"] == sent
    assert traj.finish_reasons[0] == "length" and set(traj.finish_reasons[1:]) == {"stop"}
    assert traj.invalid_actions[0]  # no move in the kept text: invalid, the board unchanged


def test_eval_writes_the_cut_reply_and_counts_it_length_truncated(server, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", TTT, "--policy", "openai", "--base-url", server.url, "--episodes", "1"]
    argv += ["--max-retries", "0", "--no-progress", "--output-dir", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    (line,) = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(line) < LIMIT + 20_000  # was over LONG
    record = json.loads(line)
    kept = record["messages"][2]["content"]
    assert len(kept) <= LIMIT and kept.endswith(NOTE)
    assert record["finish_reasons"][0] == "length"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["length_truncated_rate"] > 0
