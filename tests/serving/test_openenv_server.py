"""textgym envs served through OpenEnv, driven by OpenEnv's own client (GenericEnvClient):
whole episodes equal to local ones, capacity, faults and hostile requests."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest

pytest.importorskip("openenv")
import httpx
from openenv import GenericEnvClient
from websockets.sync.client import connect

import textgym
from textgym.serving.openenv_server import ServeSettings

from ._server import served

FAST = ServeSettings(max_sessions=4, idle_timeout=30.0, step_timeout=2.0)


def _action(info: dict) -> str:
    """A scripted action from the info: the gold completion, a legal move, else plain text."""
    if "gold_completion" in info:
        return info["gold_completion"]
    if info.get("legal_moves"):
        return f"<move>{info['legal_moves'][0]}</move>"
    return "hello"


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=5).json()


@pytest.mark.parametrize("env_id", list(textgym.ENV_DESCRIPTIONS))
def test_whole_episode_equals_the_local_one(env_id: str) -> None:
    make_env = lambda: gym.make(env_id)  # noqa: E731
    local = make_env()
    with served(make_env, env_id, FAST) as url:
        client = GenericEnvClient(base_url=url).sync()
        with client:
            obs, info = local.reset(seed=7)
            remote = client.reset(seed=7)
            assert remote.observation["text"] == obs
            assert remote.observation["info"]["task_id"] == info.get("task_id")
            for _ in range(50):
                action = _action(info)
                obs, reward, terminated, truncated, info = local.step(action)
                got = client.step({"text": action})
                assert got.observation["text"] == obs
                assert got.reward == pytest.approx(reward)
                assert got.observation["terminated"] is terminated
                assert got.observation["truncated"] is truncated
                assert got.done is (terminated or truncated)
                assert got.observation["info"].get("reward_components") == json.loads(
                    json.dumps(info.get("reward_components"))
                )
                assert got.observation["info"].get("invalid_action") == info.get("invalid_action")
                if terminated or truncated:
                    break
            else:
                pytest.fail(f"{env_id}: the episode did not end in 50 steps")
        assert _health(url)["active_sessions"] == 0  # the closed session was freed
    local.close()


class _Faulty(gym.Env):
    """A text env whose step raises on 'raise' and sleeps on 'sleep'."""

    observation_space = action_space = gym.spaces.Text(100)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "go", {}

    def step(self, action):
        if action == "raise":
            raise RuntimeError("the env broke")
        if action == "sleep":
            time.sleep(5)
        return "ok", 1.0, False, False, {}


def test_over_max_sessions_is_refused_at_once() -> None:
    with served(_Faulty, "faulty", ServeSettings(1, 30.0, 2.0)) as url:
        first = GenericEnvClient(base_url=url).sync()
        with first:
            first.reset(seed=0)
            second = GenericEnvClient(base_url=url, message_timeout_s=5).sync()
            start = time.monotonic()
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"), second:
                second.reset(seed=0)
            assert time.monotonic() - start < 3
            assert first.step({"text": "x"}).reward == 1.0  # the first still plays
        assert _health(url)["active_sessions"] == 0


@pytest.mark.parametrize(
    ("action", "message"), [("raise", "the env broke"), ("sleep", "step timeout of 1 s")]
)
def test_a_failing_step_errors_that_session_only(action: str, message: str) -> None:
    with served(_Faulty, "faulty", ServeSettings(4, 30.0, 1.0)) as url:
        other = GenericEnvClient(base_url=url).sync()
        bad = GenericEnvClient(base_url=url).sync()
        with other, bad:
            other.reset(seed=0)
            bad.reset(seed=0)
            with pytest.raises(RuntimeError, match=message):
                bad.step({"text": action})
            assert other.step({"text": "x"}).reward == 1.0
            bad.reset(seed=1)  # a fresh env after the fault
            assert bad.step({"text": "x"}).reward == 1.0


def test_a_disconnect_mid_episode_frees_the_session() -> None:
    with served(lambda: gym.make("textgym/TicTacToe-v0"), "ttt", FAST) as url:
        ws = connect(url.replace("http", "ws") + "/ws").__enter__()
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        ws.recv()
        assert _health(url)["active_sessions"] == 1
        ws.socket.close()  # killed, no close handshake
        deadline = time.monotonic() + 10
        while _health(url)["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _health(url)["active_sessions"] == 0


HOSTILE = {
    "invalid json": "{not json",
    "deep json": "[" * 100_000 + "]" * 100_000,
    "garbage board": json.dumps({"type": "reset", "data": {"options": {"board": "xx?"}}}),
    "bad seed": json.dumps({"type": "reset", "data": {"seed": -1}}),
    "options not an object": json.dumps({"type": "reset", "data": {"options": [1]}}),
    "step before reset": json.dumps({"type": "step", "data": {"text": "<move>4</move>"}}),
    "action not text": json.dumps({"type": "step", "data": {"text": {"a": 1}}}),
    "unknown type": json.dumps({"type": "launch", "data": {}}),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_messages_get_an_error_and_the_server_lives(name: str) -> None:
    with served(lambda: gym.make("textgym/TicTacToe-v0"), "ttt", FAST) as url:
        with connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
            ws.send(HOSTILE[name])
            reply = json.loads(ws.recv(timeout=10))
            assert reply["type"] == "error", reply
        with GenericEnvClient(base_url=url).sync() as client:  # still serving
            assert "Your turn" in client.reset(seed=0).observation["text"]


def test_hostile_transport_the_server_lives() -> None:
    with served(lambda: gym.make("textgym/TicTacToe-v0"), "ttt", FAST) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        with connect(ws_url, max_size=None) as ws:  # 10 MB: over the message bound
            ws.send(json.dumps({"type": "step", "data": {"text": "x" * 10_000_000}}))
            with pytest.raises(Exception):  # noqa: B017 - closed (1009 message too big)
                ws.recv(timeout=10)
        with connect(ws_url) as ws:  # invalid UTF-8 in a text frame
            with ws.protocol_mutex:  # the sync client's own send path, minus its encoding
                ws.protocol.send_text(b"\xff\xfe")
                ws.send_data()
            with pytest.raises(Exception):  # noqa: B017 - closed (1007)
                ws.recv(timeout=10)
        with connect(ws_url + "?session_id=nope") as ws:  # unknown session id
            assert json.loads(ws.recv(timeout=10))["type"] == "error"
        reply = httpx.post(f"{url}/step", json={"action": {"text": "x" * 1000}}, timeout=10)
        assert reply.status_code == 409
        reply = httpx.post(f"{url}/reset", content=b"{" * 100_000, timeout=10)
        assert reply.status_code >= 400
        assert _health(url) == {"status": "healthy", "active_sessions": 0, "max_sessions": 4}
        schema = httpx.get(f"{url}/schema", timeout=5).json()
        text = schema["action"]["properties"]["text"]
        assert text["maxLength"] == gym.make("textgym/TicTacToe-v0").action_space.max_length


def test_an_idle_session_is_freed_and_then_errors() -> None:
    settings = ServeSettings(max_sessions=2, idle_timeout=1.0, step_timeout=0.5)
    with served(lambda: gym.make("textgym/TicTacToe-v0"), "ttt", settings) as url:
        client = GenericEnvClient(base_url=url).sync()
        with client:
            client.reset(seed=0)
            assert _health(url)["active_sessions"] == 1
            deadline = time.monotonic() + 15  # OpenEnv's reaper looks every 5 s at least
            while _health(url)["active_sessions"] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _health(url)["active_sessions"] == 0
            with pytest.raises(RuntimeError, match="idle-timeout"):
                client.step({"text": "<move>4</move>"})


def test_the_quality_card_is_published_at_card_and_in_the_metadata() -> None:
    from fastapi.testclient import TestClient

    from textgym.card import env_card
    from textgym.serving.openenv_server import create_server_app

    env_id = "textgym/TicTacToe-v0"
    card = env_card(env_id, tasks=2)
    probe = gym.make(env_id)
    app = create_server_app(lambda: gym.make(env_id), probe, env_id, FAST, card=card)
    client = TestClient(app)
    assert client.get("/card").json() == json.loads(json.dumps(card))
    assert (
        "quality card (textgym check) at /card: pass"
        in client.get("/metadata").json()["description"]
    )
    bare = create_server_app(lambda: gym.make(env_id), probe, env_id, FAST)
    assert TestClient(bare).get("/card").status_code == 404
