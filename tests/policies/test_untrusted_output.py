"""Model and server output is untrusted input.

A lone surrogate in a completion must travel the whole path (policy -> env -> next request ->
trajectories -> JSONL) as U+FFFD, and an OpenAI-compatible server that trickles, answers
malformed JSON or sends too much must fail one attempt within ``timeout_s`` and the request with
one clear line. The server here is a small scripted HTTP server on 127.0.0.1; every test is
bounded to about a second.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

openai = pytest.importorskip("openai")

import textgym  # noqa: F401  (registers the envs)
from textgym.cli import main
from textgym.collect import sft_record
from textgym.policies.openai_compat import OpenAIPolicy
from textgym.policies.openai_http import InvalidResponseError
from textgym.rollout import rollout
from textgym.types import Completion, sanitize_text

from .._chat_server import chat_completion, serving

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)

# --------------------------------------------------------------------------- sanitize_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<move>4</move>", "<move>4</move>"),
        ("\ud800<move>4</move>", "\ufffd<move>4</move>"),
        ("a\udfffb\ud800", "a\ufffdb\ufffd"),
        ("\udc00\ud800", "\ufffd\ufffd"),  # low then high: not a pair
        ("\ud83d\ude00", "\U0001f600"),  # a high-low pair is the character it encodes
        ("", ""),
    ],
)
def test_sanitize_text(text, expected):
    assert sanitize_text(text) == expected


def _reference(text: str) -> str:
    """Pairs joined, every other surrogate replaced: the rule, one code point at a time."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if "\ud800" <= c <= "\udbff" and i + 1 < len(text) and "\udc00" <= text[i + 1] <= "\udfff":
            out.append(chr(0x10000 + ((ord(c) - 0xD800) << 10) + ord(text[i + 1]) - 0xDC00))
            i += 2
            continue
        out.append("\ufffd" if "\ud800" <= c <= "\udfff" else c)
        i += 1
    return "".join(out)


@given(st.lists(st.one_of(st.characters(), SURROGATES)).map("".join))
def test_sanitize_text_always_encodes_and_keeps_other_characters(text):
    clean = sanitize_text(text)
    clean.encode("utf-8")  # never raises
    assert clean == _reference(text)
    if not any("\ud800" <= c <= "\udfff" for c in text):
        assert clean is text


def test_completion_sanitizes_its_text_and_rejects_non_text():
    assert Completion("\ud800<move>4</move>", finish_reason="stop").text == "\ufffd<move>4</move>"
    with pytest.raises(TypeError, match="Completion.text to be a str"):
        Completion(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- a scripted server


def _chat(content: str | None = None, **message) -> bytes:
    """A chat-completion body; ``content`` is JSON-escaped, so a lone surrogate is ``\\ud800``."""
    usage = {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    return chat_completion({"role": "assistant", "content": content, **message}, usage)


class _Reply:
    """What the server sends: ``body``, optionally ``seconds_per_byte`` apart, ``forever``."""

    def __init__(
        self,
        body: bytes,
        *,
        seconds_per_byte: float = 0.0,
        forever: bool = False,
        headers: dict[str, str] | None = None,
    ):
        self.body, self.seconds_per_byte, self.forever = body, seconds_per_byte, forever
        self.headers = headers or {}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.models: _Reply = _Reply(json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())
        self.chat: Callable[[dict], _Reply] = lambda request: _Reply(_chat("ok"))
        self.requests: list[bytes] = []
        self.stopping = False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._send(self.server.models)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append(raw)
        self._send(self.server.chat(json.loads(raw.decode("utf-8"))))

    def _send(self, reply: _Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.forever:
            self.send_header("Content-Length", str(10**9))
        else:
            self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        try:
            if not reply.seconds_per_byte:
                self.wfile.write(reply.body)
                return
            position = 0
            while not self.server.stopping and (reply.forever or position < len(reply.body)):
                self.wfile.write(b" " if reply.forever else reply.body[position : position + 1])
                self.wfile.flush()
                position += 1
                time.sleep(reply.seconds_per_byte)
        except OSError:  # the client gave up
            pass


@pytest.fixture
def server():
    with serving(_Server()) as srv:
        yield srv
        srv.stopping = True


def _policy(server, **kwargs) -> OpenAIPolicy:
    kwargs = {"model": "m", "check": False, "max_retries": 0, "backoff_s": 0.0, **kwargs}
    return OpenAIPolicy(server.url, **kwargs)


def _one_line(error: BaseException, url: str) -> str:
    message = str(error)
    assert "\n" not in message and url in message, message
    return message


# --------------------------------------------------------------------------- lone surrogates

_FREE = re.compile(r"Available positions: ([0-9, ]+)|free ([0-9 ]+)")


def _play_first_free_cell(request: dict) -> _Reply:
    """Answer the last observation with its first free cell, after a lone surrogate."""
    free = _FREE.findall(request["messages"][-1]["content"])[-1]
    cell = re.findall(r"\d", free[0] or free[1])[0]
    return _Reply(_chat("\ud800<move>" + cell + "</move>"))


def test_a_lone_surrogate_travels_the_whole_path_as_replacement_character(server, tmp_path):
    server.chat = _play_first_free_cell
    policy = _policy(server, stop=["</move>"])
    trajectories = rollout(lambda: gym.make("textgym/TicTacToe-v0"), policy, seeds=[0, 1])
    assert all(t.terminated for t in trajectories)
    assert sum(t.num_steps for t in trajectories) == len(server.requests) > 2
    for raw in server.requests:  # every later request carried the earlier answers, encodable
        raw.decode("utf-8")
    for traj in trajectories:
        answers = [m["content"] for m in traj.messages if m["role"] == "assistant"]
        assert answers and all(a.startswith("\ufffd<move>") for a in answers)
        assert not any(traj.invalid_actions)
    path = tmp_path / "trajectories.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for traj in trajectories:
            fh.write(traj.to_json() + "\n")
            fh.write(json.dumps(sft_record(traj), ensure_ascii=False) + "\n")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(json.loads(line) for line in lines)


def test_cli_eval_and_collect_write_every_file_despite_a_lone_surrogate(server, tmp_path, capsys):
    server.chat = _play_first_free_cell
    common = ["--policy", "openai", "--base-url", server.url, "--episodes", "2", "--no-progress"]
    assert main(["eval", "textgym/TicTacToe-v0", *common, "--output-dir", str(tmp_path / "e")]) == 0
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["model"] == "m"
    records = (tmp_path / "e" / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) == 2 and "\ufffd<move>" in json.loads(records[0])["messages"][2]["content"]
    out = tmp_path / "sft.jsonl"
    assert main(["collect", "textgym/TicTacToe-v0", *common, "--output", str(out)]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    capsys.readouterr()


def _tool_call_with_a_lone_surrogate(form: str) -> Callable[[dict], _Reply]:
    """A reply whose tool call's arguments hold the escape of half an emoji, as models emit:
    as structured ``tool_calls``, or as a ``<tool_call>`` block in the text."""
    arguments = '{"query": "Party \\ud83d"}'  # the JSON text the model wrote
    if form == "structured":
        call = {"id": "c1", "type": "function"}
        call["function"] = {"name": "email_search_emails", "arguments": arguments}
        return lambda request: _Reply(_chat(None, tool_calls=[call]))
    block = '<tool_call>{"name": "email_search_emails", "arguments": ' + arguments + "}</tool_call>"
    return lambda request: _Reply(_chat(block))


@pytest.mark.parametrize("form", ["structured", "text"])
@pytest.mark.parametrize("tool_format", ["native", "text"])
def test_eval_survives_a_tool_call_holding_a_lone_surrogate_escape(
    server, tmp_path, capsys, form, tool_format
):
    # The audit's case: the second request crashed with UnicodeEncodeError, leaving
    # trajectories.jsonl empty and no summary.
    server.chat = _tool_call_with_a_lone_surrogate(form)
    out = tmp_path / "e"
    argv = ["eval", "textgym/EmailToolUse-v1", "--policy", "openai", "--base-url", server.url]
    argv += ["--episodes", "2", "--no-progress", "--tool-format", tool_format]
    assert main([*argv, "--output-dir", str(out)]) == 0
    assert len(server.requests) > 2  # every episode went on past its first turn
    for raw in server.requests:  # UTF-8 whose JSON holds no half of a character
        assert not re.search("[\ud800-\udfff]", json.dumps(json.loads(raw), ensure_ascii=False))
    assert json.loads((out / "summary.json").read_text())["episodes"] == 2
    records = (out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) == 2 and all(json.loads(line) for line in records)
    capsys.readouterr()


# --------------------------------------------------------------------------- misbehaving servers


def test_a_trickling_server_cannot_hold_an_attempt_past_timeout(server):
    server.chat = lambda request: _Reply(_chat("slow"), seconds_per_byte=0.02)  # ~5 s in all
    policy = _policy(server, timeout_s=0.3, max_retries=1)
    began = time.perf_counter()
    with pytest.raises(TimeoutError) as info:
        policy.act([[{"role": "user", "content": "hi"}]], [{}])
    assert time.perf_counter() - began < 1.5
    assert "timeout_s=0.3" in _one_line(info.value, server.url)
    assert len(server.requests) == 2  # retried once, each attempt cut at 0.3 s


def test_a_server_trickling_forever_fails_the_request_in_time(server):
    server.chat = lambda request: _Reply(b"", seconds_per_byte=0.01, forever=True)
    policy = _policy(server, timeout_s=0.3)
    began = time.perf_counter()
    with pytest.raises(TimeoutError):
        policy.act([[{"role": "user", "content": "hi"}]], [{}])
    assert time.perf_counter() - began < 1.5


def test_a_trickling_model_list_fails_the_check_in_time(server):
    server.models = _Reply(b"", seconds_per_byte=0.01, forever=True)
    began = time.perf_counter()
    with pytest.raises(ConnectionError) as info:
        OpenAIPolicy(server.url, model="m", timeout_s=0.3)
    assert time.perf_counter() - began < 1.5
    assert "did not answer within 0.3 s" in _one_line(info.value, server.url)


def _body(choices) -> bytes:
    return json.dumps(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices}
    ).encode()


MALFORMED = {
    "null message": _body([{"index": 0, "message": None, "finish_reason": "stop"}]),
    "string choice": _body(["hello"]),
    "int content": _chat(5),  # type: ignore[arg-type]
    "list content": _chat(["a"]),  # type: ignore[arg-type]
    "null tool function": _chat(
        None, tool_calls=[{"id": "1", "type": "function", "function": None}]
    ),
    "nameless tool function": _chat(
        None, tool_calls=[{"id": "1", "type": "function", "function": {"arguments": "{}"}}]
    ),
    "string tool calls": _chat(None, tool_calls="call"),
    "null choices": _body(None),
    "no choices": _body([]),
    "not json": b"{not json",
    "json list": b"[1, 2]",
    "json string": b'"hello"',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_answer_is_retried_then_one_clear_error(server, body):
    server.chat = lambda request: _Reply(body)
    policy = _policy(server, max_retries=1)
    with pytest.raises(InvalidResponseError) as info:
        policy.act([[{"role": "user", "content": "hi"}]], [{}])
    assert isinstance(info.value, ValueError)
    assert "valid chat completion in 2 attempt(s)" in _one_line(info.value, server.url)
    assert len(server.requests) == 2


def test_a_malformed_answer_then_a_good_one_succeeds(server):
    replies = [_Reply(MALFORMED["null message"]), _Reply(_chat("<move>4</move>"))]
    server.chat = lambda request: replies.pop(0)
    (completion,) = _policy(server, max_retries=1).act([[{"role": "user", "content": "hi"}]], [{}])
    assert completion.text == "<move>4</move>"


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_a_response_over_max_response_bytes_is_refused(server, compressed):
    body = _chat("x" * 2_000_000)
    headers = {}
    if compressed:  # 2 MB that gzip to a few kB: the cap counts the decompressed bytes
        body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
        assert len(body) < 100_000
    server.chat = lambda request: _Reply(body, headers=headers)
    policy = _policy(server, max_response_bytes=1_000_000)
    with pytest.raises(InvalidResponseError) as info:
        policy.act([[{"role": "user", "content": "hi"}]], [{}])
    assert "max_response_bytes=1000000" in _one_line(info.value, server.url)
    # Within the cap the same answer is fine.
    (completion,) = _policy(server, max_response_bytes=4_000_000, max_reply_chars=2_000_000).act(
        [[{"role": "user", "content": "hi"}]], [{}]
    )
    assert completion.text == "x" * 2_000_000


def test_max_response_bytes_is_validated():
    with pytest.raises(ValueError, match="max_response_bytes"):
        OpenAIPolicy("http://127.0.0.1:9/v1", model="m", check=False, max_response_bytes=10)
