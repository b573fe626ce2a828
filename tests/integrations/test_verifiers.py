"""verifiers adapter: verifiers' own eval runner against a scripted OpenAI-compatible server.

The agent is verifiers' ``null`` chat harness, a program that verifiers runs in a local
subprocess through ``uv`` (it installs the program's dependencies on first use); the model
behind it is a small in-process HTTP server that answers ``/chat/completions`` with scripted
moves. The rewards verifiers records are checked against a replay of the same actions on a
fresh env.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

vf = pytest.importorskip("verifiers.v1", reason="needs the verifiers extra (verifiers>=0.4)")
if shutil.which("uv") is None:
    pytest.skip("verifiers runs its chat harness through uv; install uv", allow_module_level=True)

import gymnasium as gym

from textgym.integrations.verifiers import episode_rewards, load_environment

MOVES = [4, 0, 8, 2, 6, 1, 3, 5, 7]  # the k-th reply of a game plays MOVES[k]


def scripted_reply(messages: list[dict]) -> str:
    """The next tic-tac-toe move of the script (for GSM8K, a well-formed wrong answer)."""
    turn = sum(m["role"] == "assistant" for m in messages)
    return f"<think>turn {turn}</think><move>{MOVES[turn % 9]}</move>\n#### {turn}"


class FakeOpenAI(BaseHTTPRequestHandler):
    """``POST .../chat/completions``: one scripted reply, as JSON or as a server-sent stream."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = scripted_reply(body["messages"])
        base = {"id": "fake", "created": 0, "model": body.get("model", "fake")}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if body.get("stream"):
            chunks = [
                {"delta": {"role": "assistant", "content": text}, "finish_reason": None},
                {"delta": {}, "finish_reason": "stop"},
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                event = {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, **chunk}],
                }
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        reply = {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def _actions(trace) -> list[str]:
    return [node.message.content for node in trace.nodes if node.sampled]


@pytest.mark.parametrize("env_id", ["textgym/GSM8K-v0", "textgym/TicTacToe-v0"])
def test_verifiers_eval_runner_records_each_component_as_the_env_pays_it(
    env_id, fake_server, tmp_path, monkeypatch
):
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    monkeypatch.setenv("FAKE_API_KEY", "unused")
    env = load_environment(env_id, seeds=[0, 1])
    config = EvalConfig(
        env=env.config,
        model="scripted",
        client=vf.EvalClientConfig(base_url=fake_server, api_key_var="FAKE_API_KEY"),
        rich=None,
        push=False,
        output_dir=tmp_path,
        max_concurrent=2,
    )
    episodes = asyncio.run(run_eval(config))
    assert len(episodes) == 2
    game = gym.make(env_id)
    for episode in episodes:
        assert episode.ok, episode.errors
        (trace,) = episode.traces
        actions = _actions(trace)
        assert len(actions) == 1 if env_id == "textgym/GSM8K-v0" else len(actions) > 1
        game.reset(seed=trace.task.data.info["seed"])
        steps = []
        for action in actions:
            _, _, terminated, truncated, info = game.step(action)
            steps.append(info["reward_components"])
        assert terminated or truncated
        paid = episode_rewards(steps)
        assert {name: r.score for name, r in trace.rewards.items()} == paid
        assert trace.reward == pytest.approx(sum(paid.values()))
