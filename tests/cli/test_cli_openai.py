"""``--policy openai`` in ``textgym eval`` / ``collect``: its flags reach the policy, and an
endpoint that fails mid-run ends it with one ``textgym: error:`` line and exit code 1, keeping
the episodes already finished.

A scripted server on 127.0.0.1 answers the first requests, then fails in one of four ways.
"""

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai", reason='needs the openai client: pip install "textgym[openai]"')

import textgym.cli
import textgym.cli.building
from textgym.cli import main
from textgym.envs.gsm8k.env import GSM8KEnv

from .._chat_server import chat_completion, serving

GOOD = 3  # requests answered before the failure


def chat_body(content):
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    return chat_completion({"role": "assistant", "content": content}, usage)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.failure = "garbage"
        self.answered = 0
        self.auth: list[str] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, *args):
        pass

    def send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up (timed out) first
            self.wfile.write(body)

    def do_GET(self):
        self.send(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.auth.append(self.headers.get("Authorization", ""))
        if self.server.answered < GOOD:
            self.server.answered += 1
            self.send(200, chat_body("#### 7"))
            return
        failure = self.server.failure
        if failure == "garbage":
            self.send(200, b"this is not a chat completion")
        elif failure == "status":
            self.send(500, b'{"error": {"message": "the model crashed"}}')
        elif failure == "hang":
            time.sleep(6.0)
            self.send(200, chat_body("#### 7"))
        elif failure == "drop":
            self.close_connection = True
            self.connection.close()


@pytest.fixture
def server():
    with serving(Server()) as srv:
        yield srv


def openai_args(server, *extra):
    return [
        "--policy",
        "openai",
        "--base-url",
        server.url,
        "--rollout-batch-size",
        "1",
        "--max-retries",
        "0",
        "--timeout-s",
        "2",  # short, yet enough for the client's first connection on a loaded 2-core machine
        "--no-progress",
        *extra,
    ]


FAILURES = [
    ("garbage", "did not answer with a valid chat completion in 1 attempt(s)"),
    ("status", "Error code: 500"),
    ("hang", "the last one cut off at timeout_s=2 s"),
    ("drop", "failed after 1 attempt(s)"),
]


@pytest.mark.parametrize(("failure", "said"), FAILURES, ids=[f for f, _ in FAILURES])
def test_eval_keeps_the_finished_episodes_and_says_what_failed_in_one_line(
    server, failure, said, tmp_path, capsys
):
    server.failure = failure
    out = tmp_path / "run"
    code = main(["eval", "textgym/GSM8K-v0", *openai_args(server, "--output-dir", str(out))])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 1 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("textgym: error: --policy openai failed: ") and said in lines[0]
    assert server.url in lines[0] or failure == "status"
    assert lines[0].endswith(
        f"; stopped after {GOOD} of 18 episodes; wrote them to "
        f"{out / 'trajectories.jsonl'}, {out / 'per_task.jsonl'} and "
        f'{out / "summary.json"} ("complete": false)'
    )
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(records) == summary["episodes"] == GOOD and summary["complete"] is False
    assert said in summary["error"] and summary["tasks"]["played"] == GOOD
    assert len((out / "per_task.jsonl").read_text().splitlines()) == GOOD


def test_collect_keeps_the_finished_records(server, tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["collect", "textgym/GSM8K-v0", *openai_args(server, "--output", str(out))]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("textgym: error: --policy openai failed: ") and "\n" not in line
    assert line.endswith(
        f"; stopped after {GOOD} of 18 episodes; kept {GOOD} of {GOOD} episodes; "
        f"wrote {out} ({GOOD} whole records, valid JSONL)"
    )
    assert len(out.read_text().splitlines()) == GOOD


def test_the_same_error_raised_by_the_env_is_a_bug_and_keeps_its_traceback(server, monkeypatch):
    def step(self, action):
        raise ConnectionError("a bug in an env, not the endpoint")

    monkeypatch.setattr(GSM8KEnv, "step", step)
    with pytest.raises(ConnectionError, match="a bug in an env"):
        main(["eval", "textgym/GSM8K-v0", *openai_args(server)])


def test_the_flags_reach_the_policy_and_the_key_the_server(server, tmp_path, monkeypatch):
    seen = {}
    build = textgym.cli.building.build_policy

    def spy(name, kwargs, make=None):
        seen.update(kwargs)
        return build(name, kwargs, make)

    monkeypatch.setattr(textgym.cli.building, "build_policy", spy)
    server.failure = "none"  # never reached: two episodes only
    argv = [
        "eval",
        "textgym/GSM8K-v0",
        *openai_args(server, "--limit", "2", "--concurrency", "3", "--api-key", "sk-from-flag"),
        "--tool-format",
        "text",
    ]
    assert main(argv) == 0
    keys = ("max_concurrency", "timeout_s", "max_retries", "api_key", "tool_format")
    assert {k: seen[k] for k in keys} == {
        "max_concurrency": 3,
        "timeout_s": 2.0,
        "max_retries": 0,
        "api_key": "sk-from-flag",
        "tool_format": "text",
    }
    assert server.auth == ["Bearer sk-from-flag"] * 2
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    seen.clear()
    assert main(["eval", "textgym/GSM8K-v0", *openai_args(server, "--limit", "1")]) == 0
    assert "api_key" not in seen and server.auth[-1] == "Bearer sk-from-env"
