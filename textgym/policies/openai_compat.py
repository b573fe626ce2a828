"""Any OpenAI-compatible chat endpoint as a policy (OpenAI, vLLM, llama.cpp, SGLang, ...).

:class:`OpenAIPolicy` sends each conversation to ``/v1/chat/completions`` with the official
``openai`` client (``AsyncOpenAI``), many requests at once under a semaphore, spread round-robin
over one or more endpoints. Transient failures (rate limits, timeouts, 5xx answers, dropped
connections) are retried with exponential backoff. When the env offers tools
(``info["tools"]``), they are sent as the request's ``tools`` on every turn and the structured
``tool_calls`` of the answer are written back in the env's text form,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. The history goes to the server
as servers expect it (:func:`~textgym.toolformat.to_chat_messages`): the model's earlier calls as
the assistant message's ``tool_calls``, and their results as ``tool`` messages with the calls'
ids.
``tool_format="text"`` keeps everything in the text form instead, for models without native
tool calling.

The endpoints are checked once, when the policy is built: an unreachable URL raises
:class:`ConnectionError` and a model the server does not list raises :class:`~textgym.errors.SetupError`, each
in one line that names the URL and the fix.

A server is untrusted too. Every attempt, connection and all reads together, is bounded by
``timeout_s`` (a server that trickles bytes cannot hold a request longer); a response body over
``max_response_bytes`` is cut off; and an answer that does not have the shape of a chat
completion (no JSON, no choices, a ``null`` message, content that is not a string, a tool call
without a function) is retried like a transient failure and then reported in one line that names
the server and what was wrong (:class:`~textgym.policies.openai_http.InvalidResponseError`). The
completion text is sanitized by :class:`~textgym.types.Completion` (a lone surrogate
becomes U+FFFD), and a reply longer than ``max_reply_chars`` (default the envs' action limit,
65,536 characters) is cut there (:func:`cut_reply`), saying so in its text: the episode's history
keeps the reply and sends it again with every later request, so one 5.6 MB reply made every
later request 5.6 MB larger.

The HTTP side (the bounded client, retries, one-line errors) is
:mod:`textgym.policies.openai_http`; the shape of requests and answers (tool calls, stop strings,
checking a response) is :mod:`textgym.policies.openai_messages`.

A local server for offline use (see ``DESIGN.md``)::

    pip install "textgym[server]"
    python -m llama_cpp.server --model gemma-3-270m-q4_k_m.gguf --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.checks import check_int, check_sampling
from textgym.errors import SetupError
from textgym.policies.openai_http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    MODELS_ERRORS,
    REQUEST_ERRORS,
    create_completion,
    endpoint_urls,
    make_client,
    reworded,
    run_sync,
    with_retries,
)
from textgym.policies.openai_messages import completion_from_response, model_ids
from textgym.toolformat import chat_tools, to_chat_messages
from textgym.types import Completion, Message, sanitize_text

__all__ = ["DEFAULT_MAX_REPLY_CHARS", "OpenAIPolicy", "cut_reply"]

#: Longest reply kept, in characters: the action limit of textgym's envs (their action spaces
#: are ``UnicodeText(65536)``; ReverseText-v0's is at least that), past which an env reads
#: nothing of an action.
DEFAULT_MAX_REPLY_CHARS = 65_536


def _sanitized(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string passed through
    :func:`~textgym.types.sanitize_text` (lone surrogates become U+FFFD)."""
    if isinstance(value, str):
        return sanitize_text(value)
    if isinstance(value, dict):
        return {_sanitized(k): _sanitized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitized(v) for v in value]
    return value


def cut_reply(completion: Completion, max_chars: int) -> Completion:
    """``completion`` with its text cut to at most ``max_chars`` characters, saying so.

    A longer text keeps its start and ends with a line that says it was cut and how long it
    was, ``[textgym cut this reply at 65,536 characters; it had 100,000]``, within
    ``max_chars``; its ``finish_reason`` becomes ``"length"``, as for a reply cut at the token
    limit (what it is: the model ran on past what the env accepts). So the cut reaches the env,
    the history sent with every later request and the trajectory, and the eval summary counts
    it among the length-truncated turns. A text within the limit is returned as it was.

    Args:
        completion: A completion.
        max_chars: The most characters kept, >= 256 (room for the note).

    Example:
        >>> cut = cut_reply(Completion("<think>" + "a" * 1000), 300)
        >>> len(cut.text), cut.finish_reason, cut.text.splitlines()[-1]
        (300, 'length', '[textgym cut this reply at 300 characters; it had 1,007]')
    """
    text = completion.text
    if len(text) <= max_chars:
        return completion
    note = f"\n[textgym cut this reply at {max_chars:,} characters; it had {len(text):,}]"
    kept = text[: max(0, max_chars - len(note))] + note
    return dataclasses.replace(completion, text=kept[-max_chars:], finish_reason="length")


class OpenAIPolicy:
    """Chat completions from one or more OpenAI-compatible endpoints.

    Each call to :meth:`act` sends one chat-completions request per conversation, at most
    ``max_concurrency`` in flight at once, the i-th request of the policy's lifetime going to
    ``base_url[i % len(base_url)]`` (round-robin). A request that fails with a transient error
    (:func:`~textgym.policies.openai_http.is_transient`) is sent again up to ``max_retries``
    times with exponential backoff (:func:`~textgym.policies.openai_http.with_retries`); each
    attempt, connection and all reads together, may take at most ``timeout_s`` seconds, and its
    response body at most ``max_response_bytes`` bytes. Answers that are not a chat completion
    are retried the same way (:class:`~textgym.policies.openai_http.InvalidResponseError`).
    Completions come back in the order of the conversations.

    When ``infos[i]["tools"]`` is non-empty, those tools are sent as the request's ``tools``
    (:func:`~textgym.toolformat.chat_tools`), the history with structured tool calls and
    ``tool`` messages (:func:`~textgym.toolformat.to_chat_messages`), and any structured
    ``tool_calls`` in the answer are appended to its text as ``<tool_call>`` blocks
    (:func:`~textgym.policies.openai_messages.render_tool_calls`), the form the tool envs parse
    (``tool_format="text"`` sends none of the structure).
    Stop strings that the server drops are put back where they close an open tag
    (:func:`~textgym.policies.openai_messages.restore_stop`). A reply longer than
    ``max_reply_chars`` is cut, saying so in its text (:func:`cut_reply`).
    ``Completion.finish_reason`` is ``"length"`` when the server says so or the reply was cut,
    and ``"stop"`` otherwise; token ids and log-probabilities are ``None``.

    Attributes:
        name: ``"openai"``.
        base_urls: The endpoints, normalized (``/v1`` added to a URL without a path).
        model: The model requested from every endpoint.
        tokens_generated: Completion tokens reported by the servers so far (for tokens/s).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str | Sequence[str] = "http://127.0.0.1:8000/v1",
        model: str | None = None,
        *,
        api_key: str | None = None,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        seed: int | None = None,
        backoff_s: float = 0.5,
        check: bool = True,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        tool_format: str = "native",
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
    ) -> None:
        """Configure the endpoints and sampling, and check that every endpoint serves the model.

        Args:
            base_url: Endpoint URL, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` is added to a URL
                without a path), or a list of them; a string may hold several separated by
                commas.
            model: Model name sent with each request; ``None`` takes the first model listed by
                the first endpoint's ``/v1/models``.
            api_key: Bearer token; default ``$OPENAI_API_KEY``, else ``"EMPTY"`` (local servers
                ignore it).
            max_tokens: Most tokens generated per completion, >= 1.
            temperature: Sampling temperature, >= 0.
            top_p: Nucleus sampling mass in (0, 1].
            stop: Stop strings (at most 4 for OpenAI itself).
            max_concurrency: Most requests in flight at once over all endpoints, >= 1.
            timeout_s: Seconds one attempt may take in all (connecting, sending, every read of
                the answer), > 0; also bounds the ``/v1/models`` check (at most 30 s there).
            max_retries: Retries of a request after a transient failure, >= 0.
            seed: The first request's ``seed`` (best-effort determinism on servers that honour
                it); the n-th request of the policy's lifetime sends ``seed + n``, so that the
                copies of one prompt in a GRPO group are sampled independently. It also seeds
                the retry jitter; ``None`` sends none.
            backoff_s: Wait before the first retry, doubled for each further one (capped at 30 s).
            check: Query each endpoint's ``/v1/models`` now (recommended).
            max_response_bytes: Largest response body read, in bytes after decompression,
                >= 1024 (default 16 MiB); a longer one fails the attempt.
            tool_format: ``"native"``: send the env's tools with every request and the history
                with structured tool calls (:func:`~textgym.toolformat.to_chat_messages`);
                ``"text"``: send no
                ``tools`` and the history as text (the env's system prompt describes the call
                format), for models without native tool calling.
            max_reply_chars: Longest reply kept, in characters, >= 256 (default 65,536, the
                envs' action limit): a longer one is cut, saying so (:func:`cut_reply`), before
                the env, the history of later requests and the trajectory see it.

        Raises:
            SetupError: for an argument out of range, a malformed URL, or a model that an
                endpoint does not serve.
            ConnectionError: an endpoint cannot be reached or does not answer like an
                OpenAI-compatible API.
        """
        self.base_urls = endpoint_urls(base_url)
        check_int("max_tokens", max_tokens, low=1)
        check_sampling(temperature, top_p)
        check_int("max_concurrency", max_concurrency, low=1)
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise SetupError(f"Expected timeout_s > 0, got {timeout_s!r}")
        check_int("max_retries", max_retries, low=0)
        check_int("max_response_bytes", max_response_bytes, low=1024)
        check_int("max_reply_chars", max_reply_chars, low=256)
        if not isinstance(backoff_s, (int, float)) or backoff_s < 0:
            raise SetupError(f"Expected backoff_s >= 0, got {backoff_s!r}")
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        if not all(isinstance(s, str) and s for s in stop):
            raise SetupError(f"Expected stop to be non-empty strings, got {stop!r}")
        if tool_format not in ("native", "text"):
            raise SetupError(f"Expected tool_format 'native' or 'text', got {tool_format!r}")
        if model is not None and (not isinstance(model, str) or not model):
            raise SetupError(f"Expected model to be a non-empty string or None, got {model!r}")

        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.stop = stop
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.seed = seed
        self.backoff_s = float(backoff_s)
        self.max_response_bytes = max_response_bytes
        self.tool_format = tool_format
        self.max_reply_chars = max_reply_chars
        self.tokens_generated = 0
        self._next_endpoint = 0
        self._requests_made = 0
        self._rng = random.Random(seed)
        self.model = model
        if check:
            self.check()
        elif model is None:
            raise SetupError(
                "Pass a model name, or check=True to use the first one the server lists"
            )

    # ----------------------------------------------------------------------------- checking

    def _client(self, url: str, timeout_s: float) -> Any:
        """An ``AsyncOpenAI`` client for ``url`` that reads at most ``max_response_bytes``."""
        return make_client(
            url, api_key=self.api_key, timeout_s=timeout_s, max_bytes=self.max_response_bytes
        )

    def _list_models(self, url: str) -> list[str]:
        """The model ids listed by ``url``'s ``/models``; one-line errors naming the fix
        (:data:`~textgym.policies.openai_http.MODELS_ERRORS`)."""
        timeout_s = min(self.timeout_s, 30.0)

        async def listed() -> list[str]:
            client = self._client(url, timeout_s)
            try:  # the whole answer, however slowly it trickles
                return await asyncio.wait_for(model_ids(client), timeout_s)
            finally:
                await client.close()

        try:
            return run_sync(listed())
        except Exception as error:
            new = reworded(error, MODELS_ERRORS, url=url, timeout_s=timeout_s)
            if new is None:
                raise
            raise new from new.__cause__

    def check(self) -> None:
        """Query every endpoint's ``/v1/models`` and make sure it serves :attr:`model`.

        Sets :attr:`model` to the first listed model when it is ``None``.

        Raises:
            ConnectionError: an endpoint is unreachable or not OpenAI-compatible.
            SetupError: an endpoint does not list the model.
        """
        for url in self.base_urls:
            served = self._list_models(url)
            if self.model is None:
                if not served:
                    raise SetupError(f"{url} lists no models; load one in the server or pass model")
                self.model = served[0]
            elif self.model not in served:
                raise SetupError(
                    f"Model {self.model!r} is not served at {url}; it serves "
                    f"{', '.join(map(repr, served)) or 'no models'}: pass one of them as model "
                    f"(--model)"
                )

    # ----------------------------------------------------------------------------- acting

    def request_body(
        self, messages: Sequence[Message], info: Mapping[str, Any], number: int = 0
    ) -> dict[str, Any]:
        """Keyword arguments of the policy's ``number``-th ``chat.completions.create`` call."""
        tools = info.get("tools") if isinstance(info, Mapping) else None
        native = bool(tools) and self.tool_format == "native"
        chat = to_chat_messages(messages) if native else [dict(m) for m in messages]
        request: dict[str, Any] = {
            "model": self.model,
            # Every string as UTF-8 can carry it: a tool call whose arguments the model wrote
            # with a lone surrogate escape ("Party \\ud83d") parses into a str that no request
            # body can encode (UnicodeEncodeError on the next request), and an env may echo it.
            "messages": _sanitized(chat),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        if self.stop:
            request["stop"] = list(self.stop)
        if self.seed is not None:
            request["seed"] = self.seed + number
        if native:
            request["tools"] = chat_tools(tools)
        return request

    def parse_response(self, response: Any) -> Completion:
        """Turn a chat-completions response into a :class:`Completion`
        (:func:`~textgym.policies.openai_messages.completion_from_response`) cut to
        ``max_reply_chars`` (:func:`cut_reply`), counting the completion tokens the server
        reports in :attr:`tokens_generated`.

        Raises:
            InvalidResponseError: the response does not have the shape of a chat completion.
        """
        completion, completion_tokens = completion_from_response(response, self.stop)
        self.tokens_generated += completion_tokens
        return cut_reply(completion, self.max_reply_chars)

    async def aact(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """Async :meth:`act`: the same requests, for callers that already run an event loop."""
        if len(conversations) != len(infos):
            raise SetupError(
                f"Expected one info per conversation, got {len(conversations)} conversations "
                f"and {len(infos)} infos"
            )
        if self.model is None:
            self.check()
        clients = {url: self._client(url, self.timeout_s) for url in self.base_urls}
        semaphore = asyncio.Semaphore(self.max_concurrency)

        async def one(request: dict[str, Any], url: str) -> Completion:
            async with semaphore:
                return await self._send(clients[url], url, request)

        tasks = [
            asyncio.ensure_future(one(r, u)) for r, u in self._next_requests(conversations, infos)
        ]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:  # after a failure, stop the requests still in flight
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in clients.values():
                await client.close()

    def _next_requests(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[tuple[dict[str, Any], str]]:
        """``(request body, endpoint)`` per conversation. Endpoints round-robin and request seeds
        count over the policy's lifetime, both in conversation order, so a run is reproducible
        whatever order the answers come in."""
        requests = []
        for messages, info in zip(conversations, infos):
            request = self.request_body(messages, info, self._requests_made)
            self._requests_made += 1
            requests.append((request, self.base_urls[self._next_endpoint % len(self.base_urls)]))
            self._next_endpoint += 1
        return requests

    async def _send(self, client: Any, url: str, request: dict[str, Any]) -> Completion:
        """One request, sent again after transient failures
        (:func:`~textgym.policies.openai_http.with_retries`); a failure of every attempt
        reworded in one line
        (:data:`~textgym.policies.openai_http.REQUEST_ERRORS`)."""
        try:
            return await with_retries(
                lambda: self._attempt(client, request),
                max_retries=self.max_retries,
                backoff_s=self.backoff_s,
                rng=self._rng,
            )
        except Exception as error:
            new = reworded(
                error,
                REQUEST_ERRORS,
                url=url,
                attempts=self.max_retries + 1,
                timeout_s=self.timeout_s,
                model=self.model,
            )
            if new is None:
                raise
            raise new from new.__cause__

    async def _attempt(self, client: Any, request: dict[str, Any]) -> Completion:
        """One attempt, bounded as a whole by ``timeout_s``, its answer parsed and checked."""
        return self.parse_response(await create_completion(client, request, self.timeout_s))

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """Return one completion per conversation, in order (see the class docstring).

        Raises:
            ConnectionError: an endpoint stayed unreachable through every retry.
            TimeoutError: every attempt of a request outlived ``timeout_s``.
            InvalidResponseError: every attempt of a request got an answer that is not a chat
                completion (or is over ``max_response_bytes``); a ``ValueError``.
            openai.APIStatusError: a request failed with a non-transient error (bad request,
                authentication, ...) or kept failing with a transient one.
        """
        if not conversations:
            return []
        return run_sync(self.aact(conversations, infos))

    def __repr__(self) -> str:
        urls = self.base_urls[0] if len(self.base_urls) == 1 else self.base_urls
        return f"OpenAIPolicy(base_url={urls!r}, model={self.model!r})"
