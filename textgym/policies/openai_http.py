"""The HTTP side of :class:`~textgym.policies.openai_compat.OpenAIPolicy`: the ``openai``
client held to an untrusted server, retries with backoff, and the one-line errors of a failure.

A server is untrusted. :func:`make_client` builds an ``AsyncOpenAI`` client that reads at most
``max_bytes`` of a response body (:class:`InvalidResponseError` beyond); :func:`create_completion`
bounds one attempt as a whole and turns a body that is not a chat completion into an
:class:`InvalidResponseError`, which :func:`is_transient` retries like a rate limit or a dropped
connection (:func:`with_retries`). What still fails is reworded into one line naming the server
and the fix (:func:`reworded`, with the tables :data:`MODELS_ERRORS` and
:data:`REQUEST_ERRORS`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from textgym.errors import EndpointError, MissingExtraError

try:
    import openai
except ImportError as error:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        f'OpenAIPolicy needs the openai client ({error}); pip install "textgym[openai]"'
    ) from error

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "EndpointConnectionError",
    "EndpointTimeoutError",
    "MODELS_ERRORS",
    "REQUEST_ERRORS",
    "TRANSIENT_ERRORS",
    "InvalidResponseError",
    "create_completion",
    "endpoint_urls",
    "is_transient",
    "make_client",
    "reworded",
    "run_sync",
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

_SERVER_HINT = (
    "start an OpenAI-compatible server there (offline: python -m llama_cpp.server "
    "--model <file.gguf> --host 127.0.0.1 --port <port>) or fix base_url (--base-url)"
)


class EndpointTimeoutError(EndpointError, TimeoutError):
    """Every attempt of a request was cut off at the policy's ``timeout_s``."""


class EndpointConnectionError(EndpointError, ConnectionError):
    """Every attempt of a request failed to connect or lost its connection."""


class InvalidResponseError(EndpointError, openai.OpenAIError, ValueError):
    """A server answered 200 with something that is not a usable chat completion.

    Raised for a body that is not JSON or not a chat completion (no ``choices``, a choice or
    message that is not an object, content that is not a string, a tool call without a function
    name), and for a body over the policy's ``max_response_bytes``. It is an
    ``openai.OpenAIError`` (the client passes it through unwrapped), a ``ValueError`` and, once
    the retries are spent, the :class:`~textgym.errors.EndpointError` the command line reports.
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


def endpoint_urls(base_url: str | Sequence[str]) -> list[str]:
    """The endpoints of ``base_url`` (a URL, several separated by commas, or a list of them),
    each normalized: ``http://host:port`` -> ``http://host:port/v1``; URLs with a path are kept.

    Raises:
        ValueError: no URL, or one that is not an http(s) URL.
    """
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    urls = [part for url in urls for part in (url.split(",") if isinstance(url, str) else [url])]
    if not urls:
        raise ValueError("Expected at least one base_url, got none")
    return [_normalize_url(url) for url in urls]


def _normalize_url(url: Any) -> str:
    """``url`` checked and normalized (see :func:`endpoint_urls`)."""
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


def make_client(url: str, *, api_key: str, timeout_s: float, max_bytes: int) -> Any:
    """An ``AsyncOpenAI`` client for ``url`` that reads at most ``max_bytes`` of a body and
    leaves retries to :func:`with_retries`."""
    return openai.AsyncOpenAI(
        base_url=url,
        api_key=api_key,
        timeout=timeout_s,
        max_retries=0,
        http_client=_CappedHttpClient(max_bytes),
    )


async def create_completion(client: Any, request: dict[str, Any], timeout_s: float) -> Any:
    """One ``chat.completions.create`` call, bounded as a whole by ``timeout_s``.

    Raises:
        InvalidResponseError: the body is not JSON, not UTF-8, nested too deeply, or not a chat
            completion as far as the client can tell.
        TimeoutError: the attempt outlived ``timeout_s``.
    """
    try:
        return await asyncio.wait_for(client.chat.completions.create(**request), timeout_s)
    except (json.JSONDecodeError, openai.APIResponseValidationError) as error:
        raise InvalidResponseError(f"the body is not a chat completion ({error})") from error
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


def run_sync(coroutine: Awaitable[T]) -> T:
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


#: A row of an error table: the error types it matches, the type raised instead, its message
#: (a ``str.format`` template, see :func:`reworded`) and whether the original stays its cause.
ErrorRow = tuple[
    type[BaseException] | tuple[type[BaseException], ...], type[BaseException], str, bool
]

_SERVER_HINT = (
    "start an OpenAI-compatible server there (offline: python -m llama_cpp.server "
    "--model <file.gguf> --host 127.0.0.1 --port <port>) or fix base_url (--base-url)"
)

#: How a failed ``/models`` check of ``{url}`` is told (fields ``url``, ``timeout_s``).
MODELS_ERRORS: tuple[ErrorRow, ...] = (
    (
        TimeoutError,
        ConnectionError,
        "{url}/models did not answer within {timeout_s:g} s; check that the server is up and "
        "not overloaded, or raise timeout_s",
        False,
    ),
    (
        openai.APIConnectionError,
        ConnectionError,
        "Cannot reach an OpenAI-compatible server at {url} ({error}); " + _SERVER_HINT,
        False,
    ),
    (
        openai.AuthenticationError,
        ConnectionError,
        "{url} refused the API key (HTTP {error.status_code}); pass api_key or set OPENAI_API_KEY",
        False,
    ),
    (
        openai.APIStatusError,
        ConnectionError,
        "{url}/models answered HTTP {error.status_code}, not like an OpenAI-compatible API; "
        "check base_url (it usually ends in /v1) or pass check=False",
        False,
    ),
    (
        RecursionError,
        ConnectionError,
        "{url}/models answered JSON nested too deeply to read; check that base_url is an "
        "OpenAI-compatible server",
        False,
    ),
    (  # e.g. a body that is not a model list
        (openai.OpenAIError, ValueError, TypeError, AttributeError, KeyError),
        ConnectionError,
        "{url}/models did not return a model list ({kind}: {detail:.200}); check base_url (it "
        "usually ends in /v1) or pass check=False",
        False,
    ),
)

#: How a chat request to ``{url}`` that failed every attempt is told (fields ``url``,
#: ``attempts``, ``timeout_s``, ``model``).
REQUEST_ERRORS: tuple[ErrorRow, ...] = (
    (
        TimeoutError,
        EndpointTimeoutError,
        "Request to {url} failed after {attempts} attempt(s), the last one cut off at "
        "timeout_s={timeout_s:g} s; check that the server is up and not overloaded, or raise "
        "timeout_s",
        False,
    ),
    (
        InvalidResponseError,
        InvalidResponseError,
        "{url} did not answer with a valid chat completion in {attempts} attempt(s): "
        "{one_line:.300}; check that base_url is an OpenAI-compatible server",
        False,
    ),
    (
        openai.APIConnectionError,
        EndpointConnectionError,
        "Request to {url} failed after {attempts} attempt(s) ({error}); check that the server "
        "is up or raise timeout_s",
        True,
    ),
    (
        openai.NotFoundError,
        ValueError,
        "{url} answered 404 for model {model!r} ({error.message}); check base_url and model",
        True,
    ),
)


def reworded(
    error: BaseException, table: Sequence[ErrorRow], **fields: Any
) -> BaseException | None:
    """The error to raise in place of ``error``: that of the first row of ``table`` whose types
    ``error`` is, its message formatted with ``fields`` and ``error``, ``kind`` (its type's
    name), ``detail`` (its message) and ``one_line`` (its message on one line); ``None`` when no
    row matches (``error`` is raised as it is).

    The new error's ``__cause__`` is ``error`` where the row keeps it, else ``None``: raise it
    ``from new.__cause__``.
    """
    for kinds, new_type, message, keeps_cause in table:
        if isinstance(error, kinds):
            detail = str(error)
            new = new_type(
                message.format(
                    error=error,
                    kind=type(error).__name__,
                    detail=detail,
                    one_line=" ".join(detail.split()),
                    **fields,
                )
            )
            new.__cause__ = error if keeps_cause else None
            return new
    return None
