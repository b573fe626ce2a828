"""Any OpenAI-compatible chat endpoint as a policy (OpenAI, vLLM, llama.cpp, SGLang, ...).

:class:`OpenAIPolicy` sends each conversation to ``/v1/chat/completions`` with the official
``openai`` client (``AsyncOpenAI``), many requests at once under a semaphore, spread round-robin
over one or more endpoints. Transient failures (rate limits, timeouts, 5xx answers, dropped
connections) are retried with exponential backoff. When the env offers tools
(``info["tools"]``), they are sent as the request's ``tools`` on every turn and the structured
``tool_calls`` of the answer are written back in the env's text form,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. The history goes to the server
as servers expect it (:func:`to_chat_messages`): the model's earlier calls as the assistant
message's ``tool_calls``, and their results as ``tool`` messages with the calls' ids.
``tool_format="text"`` keeps everything in the text form instead, for models without native
tool calling.

The endpoints are checked once, when the policy is built: an unreachable URL raises
:class:`ConnectionError` and a model the server does not list raises :class:`ValueError`, each
in one line that names the URL and the fix.

A server is untrusted too. Every attempt, connection and all reads together, is bounded by
``timeout_s`` (a server that trickles bytes cannot hold a request longer); a response body over
``max_response_bytes`` is cut off; and an answer that does not have the shape of a chat
completion (no JSON, no choices, a ``null`` message, content that is not a string, a tool call
without a function) is retried like a transient failure and then reported in one line that names
the server and what was wrong (:class:`InvalidResponseError`). The completion text is sanitized
by :class:`~textgym.policies.base.Completion` (a lone surrogate becomes U+FFFD).

A local server for offline use (see ``DESIGN.md``)::

    pip install "textgym[server]"
    python -m llama_cpp.server --model gemma-3-270m-q4_k_m.gguf --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import os
import random
import re
import reprlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from textgym.checks import check_int, check_sampling
from textgym.policies.base import Completion, Message
from textgym.toolformat import chat_tools, to_chat_messages

try:
    import openai
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        f'OpenAIPolicy needs the openai client ({error}); pip install "textgym[openai]"'
    ) from error

__all__ = [
    "TRANSIENT_ERRORS",
    "InvalidResponseError",
    "OpenAIPolicy",
    "chat_tools",
    "is_transient",
    "render_tool_calls",
    "restore_stop",
    "to_chat_messages",
    "with_retries",
]

T = TypeVar("T")

#: Errors worth retrying: rate limits (429), timeouts, dropped connections and 5xx answers.
#: ``APITimeoutError`` is a subclass of ``APIConnectionError``.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    openai.RateLimitError,
    openai.APIConnectionError,
    openai.InternalServerError,
)

#: Default of ``max_response_bytes``: far above any chat completion of a few thousand tokens
#: (each token is a few bytes, at most 6 per character once JSON-escaped), far below memory.
DEFAULT_MAX_RESPONSE_BYTES = 16 * 2**20

_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_CLOSING_TAG = re.compile(r"</([A-Za-z_][\w.-]*)>")
_SERVER_HINT = (
    "start an OpenAI-compatible server there (offline: python -m llama_cpp.server "
    "--model <file.gguf> --host 127.0.0.1 --port <port>) or fix base_url (--base-url)"
)


class InvalidResponseError(openai.OpenAIError, ValueError):
    """A server answered 200 with something that is not a usable chat completion.

    Raised for a body that is not JSON or not a chat completion (no ``choices``, a choice or
    message that is not an object, content that is not a string, a tool call without a function
    name), and for a body over the policy's ``max_response_bytes``. It is an
    ``openai.OpenAIError`` (the client passes it through unwrapped) and a ``ValueError``.
    """


def is_transient(error: BaseException) -> bool:
    """Whether a request that failed with ``error`` may succeed if sent again.

    True for rate limits (429), timeouts (the client's, and :class:`TimeoutError` from an attempt
    that outlived its deadline), connection errors, 5xx status errors and malformed answers
    (:class:`InvalidResponseError`: a server under load may cut a body short); False for every
    other error (bad request, authentication, not found, ...).
    """
    if isinstance(error, (*TRANSIENT_ERRORS, TimeoutError, InvalidResponseError)):
        return True
    status = getattr(error, "status_code", None)
    return isinstance(error, openai.APIStatusError) and isinstance(status, int) and status >= 500


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_s: float = 0.5,
    max_backoff_s: float = 30.0,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """Await ``call()``, retrying transient failures (:func:`is_transient`) with backoff.

    Retry ``k`` (1-based) waits ``min(max_backoff_s, backoff_s * 2 ** (k - 1))`` seconds scaled
    by a jitter factor drawn uniformly from [0.5, 1] (so many clients hitting one rate limit do
    not retry in lockstep). Non-transient errors propagate at once.

    Args:
        call: Makes one attempt; called up to ``max_retries + 1`` times.
        max_retries: Retries after the first attempt, >= 0.
        backoff_s: Wait before the first retry (before jitter), >= 0.
        max_backoff_s: Longest wait between two attempts.
        rng: Source of the jitter; a fresh unseeded ``random.Random`` by default.
        sleep: The awaitable sleep (tests pass a fake one).

    Returns:
        What the first successful attempt returned.

    Raises:
        The last attempt's error when every attempt failed, or the first non-transient error.
    """
    rng = rng if rng is not None else random.Random()
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as error:
            if attempt >= max_retries or not is_transient(error):
                raise
            attempt += 1
            delay = min(max_backoff_s, backoff_s * 2 ** (attempt - 1))
            await sleep(delay * rng.uniform(0.5, 1.0))


def render_tool_calls(tool_calls: Sequence[Any] | None) -> str:
    """Write a response's structured ``tool_calls`` as ``<tool_call>{...}</tool_call>`` blocks.

    Each call becomes ``{"name": ..., "arguments": {...}}`` with the arguments parsed from the
    call's JSON string; arguments that are not valid JSON are kept as the raw string, so the env
    reports the malformed call instead of the policy hiding it. ``</`` inside the JSON is written
    ``<\\/`` (a legal JSON escape), so a value holding ``</tool_call>`` cannot end its block early.
    Blocks are joined by newlines; no calls give ``""``.

    Args:
        tool_calls: ``message.tool_calls`` of a chat completion (objects with
            ``.function.name`` and ``.function.arguments``, or the equivalent dicts).

    Raises:
        InvalidResponseError: a call without a function or without a string function name.
    """
    blocks = []
    for call in tool_calls or ():
        function = _field(call, "function")
        name = _field(function, "name")
        if not isinstance(name, str):
            raise InvalidResponseError(
                f"a tool call has no function name (function={_preview(function, 80)})"
            )
        raw = _field(function, "arguments")
        arguments: Any = raw
        if isinstance(raw, str):
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                arguments = raw
        elif raw is None:
            arguments = {}
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        blocks.append(_CALL_OPEN + body.replace("</", "<\\/") + _CALL_CLOSE)
    return "\n".join(blocks)


def _preview(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, nesting cut at 6 levels (:mod:`reprlib`):
    a server's deeply nested answer cannot make the message itself fail."""
    shown = reprlib.Repr()  # keyword arguments only from Python 3.12
    shown.maxlevel, shown.maxstring, shown.maxother = 6, limit, limit
    try:
        text = shown.repr(value)
    except (RecursionError, ValueError, TypeError):
        text = f"<{type(value).__name__}>"
    return text[:limit]


def _field(value: Any, name: str) -> Any:
    """``value[name]`` of a mapping or ``value.name`` of an object; ``None`` when absent."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def restore_stop(text: str, stop: Sequence[str]) -> str:
    """Put back the stop string that ended ``text``, where it can be told which one it was.

    OpenAI-compatible servers drop the stop string from the completion, whereas textgym's envs
    expect it (``<move>4</move>`` with stop ``</move>``; :class:`~textgym.policies.hf.HFPolicy`
    keeps it). A stop string that is a closing tag ``</tag>`` is appended when ``text`` has an
    unclosed ``<tag>`` (the first such stop string wins); other stop strings cannot be told from
    an end of turn and are not restored.
    """
    for s in stop:
        match = _CLOSING_TAG.fullmatch(s)
        if match and text.rfind(f"<{match.group(1)}>") > text.rfind(s):
            return text + s
    return text


def _normalize_url(url: Any) -> str:
    """``http://host:port`` -> ``http://host:port/v1``; URLs with a path are kept as given."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(
            f"Expected base_url to be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
        )
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"Expected base_url to be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
        )
    return url if parts.path else url + "/v1"


#: The HTTP library the openai client is built on (``httpx``, or ``httpx2`` in new releases).
_http = importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])


class _CappedHttpClient(openai.DefaultAsyncHttpxClient):  # type: ignore[misc,valid-type]
    """The openai client's default HTTP client, reading at most ``max_bytes`` of each body.

    A body is read (and decompressed) chunk by chunk; one over the cap stops the read and
    raises :class:`InvalidResponseError`, which the openai client passes through unwrapped.
    """

    def __init__(self, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_bytes = max_bytes

    async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        response = await super().send(request, stream=True, **kwargs)
        if stream:  # streamed bodies are read by the caller (textgym never asks for them)
            return response
        body = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self._max_bytes:
                    raise InvalidResponseError(
                        f"the response body is over max_response_bytes={self._max_bytes}"
                    )
        finally:
            await response.aclose()
        skip = {"content-encoding", "content-length", "transfer-encoding"}  # body is decoded
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in skip]
        return _http.Response(
            response.status_code,
            headers=headers,
            content=bytes(body),
            request=request,
            extensions=response.extensions,
            history=response.history,
        )


def _run(coroutine: Awaitable[T]) -> T:
    """Run ``coroutine`` to completion from synchronous code.

    Uses ``asyncio.run``; when this thread already runs an event loop (a notebook, an async
    trainer), the coroutine runs on a private loop in a helper thread instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="textgym-openai") as pool:
        return pool.submit(asyncio.run, coroutine).result()  # type: ignore[arg-type]


class OpenAIPolicy:
    """Chat completions from one or more OpenAI-compatible endpoints.

    Each call to :meth:`act` sends one chat-completions request per conversation, at most
    ``max_concurrency`` in flight at once, the i-th request of the policy's lifetime going to
    ``base_url[i % len(base_url)]`` (round-robin). A request that fails with a transient error
    (:func:`is_transient`) is sent again up to ``max_retries`` times with exponential backoff
    (:func:`with_retries`); each attempt, connection and all reads together, may take at most
    ``timeout_s`` seconds, and its response body at most ``max_response_bytes`` bytes. Answers
    that are not a chat completion are retried the same way (:class:`InvalidResponseError`).
    Completions come back in the order of the conversations.

    When ``infos[i]["tools"]`` is non-empty, those tools are sent as the request's ``tools``
    (:func:`chat_tools`), the history with structured tool calls and ``tool`` messages
    (:func:`to_chat_messages`), and any structured ``tool_calls`` in the answer are appended to
    its text as ``<tool_call>`` blocks (:func:`render_tool_calls`), the form the tool envs parse
    (``tool_format="text"`` sends none of the structure).
    Stop strings that the server drops are put back where they close an open tag
    (:func:`restore_stop`). ``Completion.finish_reason`` is ``"length"`` when the server says
    so and ``"stop"`` otherwise; token ids and log-probabilities are ``None``.

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
                with structured tool calls (:func:`to_chat_messages`); ``"text"``: send no
                ``tools`` and the history as text (the env's system prompt describes the call
                format), for models without native tool calling.

        Raises:
            ValueError: for an argument out of range, a malformed URL, or a model that an
                endpoint does not serve.
            ConnectionError: an endpoint cannot be reached or does not answer like an
                OpenAI-compatible API.
        """
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        urls = [
            part for url in urls for part in (url.split(",") if isinstance(url, str) else [url])
        ]
        if not urls:
            raise ValueError("Expected at least one base_url, got none")
        self.base_urls = [_normalize_url(url) for url in urls]
        check_int("max_tokens", max_tokens, low=1)
        check_sampling(temperature, top_p)
        check_int("max_concurrency", max_concurrency, low=1)
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"Expected timeout_s > 0, got {timeout_s!r}")
        check_int("max_retries", max_retries, low=0)
        check_int("max_response_bytes", max_response_bytes, low=1024)
        if not isinstance(backoff_s, (int, float)) or backoff_s < 0:
            raise ValueError(f"Expected backoff_s >= 0, got {backoff_s!r}")
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"Expected stop to be non-empty strings, got {stop!r}")
        if tool_format not in ("native", "text"):
            raise ValueError(f"Expected tool_format 'native' or 'text', got {tool_format!r}")
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError(f"Expected model to be a non-empty string or None, got {model!r}")

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
        self.tokens_generated = 0
        self._next_endpoint = 0
        self._requests_made = 0
        self._rng = random.Random(seed)
        self.model = model
        if check:
            self.check()
        elif model is None:
            raise ValueError(
                "Pass a model name, or check=True to use the first one the server lists"
            )

    # ----------------------------------------------------------------------------- checking

    def _client(self, url: str, timeout_s: float) -> Any:
        """An ``AsyncOpenAI`` client for ``url`` that reads at most ``max_response_bytes``."""
        return openai.AsyncOpenAI(
            base_url=url,
            api_key=self.api_key,
            timeout=timeout_s,
            max_retries=0,
            http_client=_CappedHttpClient(self.max_response_bytes),
        )

    def _list_models(self, url: str) -> list[str]:
        """The model ids listed by ``url``'s ``/models``; one-line errors naming the fix."""
        timeout_s = min(self.timeout_s, 30.0)

        async def listed() -> list[str]:
            client = self._client(url, timeout_s)
            try:
                return await asyncio.wait_for(
                    _model_ids(client), timeout_s
                )  # the whole answer, however slowly it trickles
            finally:
                await client.close()

        try:
            return _run(listed())
        except TimeoutError:
            raise ConnectionError(
                f"{url}/models did not answer within {timeout_s:g} s; check that the server is "
                f"up and not overloaded, or raise timeout_s"
            ) from None
        except openai.APIConnectionError as error:
            raise ConnectionError(
                f"Cannot reach an OpenAI-compatible server at {url} ({error}); {_SERVER_HINT}"
            ) from None
        except openai.AuthenticationError as error:
            raise ConnectionError(
                f"{url} refused the API key (HTTP {error.status_code}); pass api_key or set "
                f"OPENAI_API_KEY"
            ) from None
        except openai.APIStatusError as error:
            raise ConnectionError(
                f"{url}/models answered HTTP {error.status_code}, not like an OpenAI-compatible "
                f"API; check base_url (it usually ends in /v1) or pass check=False"
            ) from None
        except RecursionError:
            raise ConnectionError(
                f"{url}/models answered JSON nested too deeply to read; check that base_url is "
                "an OpenAI-compatible server"
            ) from None
        except (openai.OpenAIError, ValueError, TypeError, AttributeError, KeyError) as error:
            # e.g. a body that is not a model list
            raise ConnectionError(
                f"{url}/models did not return a model list ({type(error).__name__}: "
                f"{str(error)[:200]}); check base_url (it usually ends in /v1) or pass check=False"
            ) from None

    def check(self) -> None:
        """Query every endpoint's ``/v1/models`` and make sure it serves :attr:`model`.

        Sets :attr:`model` to the first listed model when it is ``None``.

        Raises:
            ConnectionError: an endpoint is unreachable or not OpenAI-compatible.
            ValueError: an endpoint does not list the model.
        """
        for url in self.base_urls:
            served = self._list_models(url)
            if self.model is None:
                if not served:
                    raise ValueError(f"{url} lists no models; load one in the server or pass model")
                self.model = served[0]
            elif self.model not in served:
                raise ValueError(
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
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(messages) if native else [dict(m) for m in messages],
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
        """Turn a chat-completions response into a :class:`Completion`.

        Raises:
            InvalidResponseError: the response does not have the shape of a chat completion.
        """
        choices = _field(response, "choices")
        if not isinstance(choices, (list, tuple)) or not choices:
            raise InvalidResponseError(f"the response has no choices: {_preview(response)}")
        choice = choices[0]
        message = _field(choice, "message")
        if isinstance(choice, (str, bytes)) or message is None or isinstance(message, str):
            raise InvalidResponseError(
                f"the first choice has no message object: {_preview(choice)}"
            )
        content = _field(message, "content")
        if content is not None and not isinstance(content, str):
            raise InvalidResponseError(
                f"the message content is a {type(content).__name__}, not a string or null"
            )
        tool_calls = _field(message, "tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, (list, tuple)):
            raise InvalidResponseError(
                f"the message's tool_calls is a {type(tool_calls).__name__}, not a list"
            )
        text = content or ""
        calls = render_tool_calls(tool_calls)
        finish_reason = "length" if _field(choice, "finish_reason") == "length" else "stop"
        if calls:
            text = f"{text}\n{calls}" if text else calls
        elif finish_reason == "stop" and self.stop:
            text = restore_stop(text, self.stop)
        completion_tokens = _field(_field(response, "usage"), "completion_tokens")
        if isinstance(completion_tokens, int) and not isinstance(completion_tokens, bool):
            self.tokens_generated += completion_tokens
        return Completion(text=text, finish_reason=finish_reason)

    async def aact(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """Async :meth:`act`: the same requests, for callers that already run an event loop."""
        if len(conversations) != len(infos):
            raise ValueError(
                f"Expected one info per conversation, got {len(conversations)} conversations "
                f"and {len(infos)} infos"
            )
        if self.model is None:
            self.check()
        clients = {url: self._client(url, self.timeout_s) for url in self.base_urls}
        semaphore = asyncio.Semaphore(self.max_concurrency)
        attempts = self.max_retries + 1

        async def attempt(request: dict[str, Any], url: str) -> Completion:
            """One request, bounded as a whole by ``timeout_s``, parsed and validated."""
            try:
                response = await asyncio.wait_for(
                    clients[url].chat.completions.create(**request), self.timeout_s
                )
            except (json.JSONDecodeError, openai.APIResponseValidationError) as error:
                raise InvalidResponseError(
                    f"the body is not a chat completion ({error})"
                ) from error
            except UnicodeDecodeError as error:  # a 200 body that is not UTF-8 (nor -16/-32)
                raise InvalidResponseError(
                    f"the body is not UTF-8 text ({error.reason} at byte {error.start})"
                ) from None
            except RecursionError:  # JSON nested deeper than Python's parser recurses
                raise InvalidResponseError(
                    "the body is JSON nested too deeply to read (no chat completion is)"
                ) from None
            except (AttributeError, TypeError, KeyError) as error:  # the client choked on it
                raise InvalidResponseError(
                    f"the body is not a chat completion ({type(error).__name__}: {error})"
                ) from error
            return self.parse_response(response)

        async def one(request: dict[str, Any], url: str) -> Completion:
            async with semaphore:
                try:
                    return await with_retries(
                        lambda: attempt(request, url),
                        max_retries=self.max_retries,
                        backoff_s=self.backoff_s,
                        rng=self._rng,
                    )
                except TimeoutError:
                    raise TimeoutError(
                        f"Request to {url} failed after {attempts} attempt(s), the last one cut "
                        f"off at timeout_s={self.timeout_s:g} s; check that the server is up and "
                        f"not overloaded, or raise timeout_s"
                    ) from None
                except InvalidResponseError as error:
                    what = " ".join(str(error).split())[:300]  # one line, however it was built
                    raise InvalidResponseError(
                        f"{url} did not answer with a valid chat completion in {attempts} "
                        f"attempt(s): {what}; check that base_url is an OpenAI-compatible server"
                    ) from None
                except openai.APIConnectionError as error:
                    raise ConnectionError(
                        f"Request to {url} failed after {self.max_retries + 1} attempt(s) "
                        f"({error}); check that the server is up or raise timeout_s"
                    ) from error
                except openai.NotFoundError as error:
                    raise ValueError(
                        f"{url} answered 404 for model {self.model!r} ({error.message}); "
                        f"check base_url and model"
                    ) from error

        # Endpoints round-robin and request seeds count over the policy's lifetime, both in
        # conversation order, so a run is reproducible whatever order the answers come in.
        requests, urls = [], []
        for messages, info in zip(conversations, infos):
            requests.append(self.request_body(messages, info, self._requests_made))
            self._requests_made += 1
            urls.append(self.base_urls[self._next_endpoint % len(self.base_urls)])
            self._next_endpoint += 1
        tasks = [asyncio.ensure_future(one(r, u)) for r, u in zip(requests, urls)]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:  # after a failure, stop the requests still in flight
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in clients.values():
                await client.close()

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
        return _run(self.aact(conversations, infos))

    def __repr__(self) -> str:
        urls = self.base_urls[0] if len(self.base_urls) == 1 else self.base_urls
        return f"OpenAIPolicy(base_url={urls!r}, model={self.model!r})"


async def _model_ids(client: Any) -> list[str]:
    """Every model id of ``client.models.list()``, all pages."""
    ids = []
    async for model in client.models.list():
        model_id = _field(model, "id")
        if not isinstance(model_id, str):
            raise InvalidResponseError(f"a listed model has no string id: {_preview(model, 100)}")
        ids.append(model_id)
    return ids
