"""What goes to and comes back from a chat-completions endpoint, checked: a server's answer
turned into a :class:`~textgym.types.Completion` (or an
:class:`~textgym.policies.openai_http.InvalidResponseError` naming what was wrong), structured
tool calls written in the env's text form ``<tool_call>{...}</tool_call>``, dropped stop strings
put back, and the model list of ``/models``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.checks import excerpt
from textgym.policies.openai_http import InvalidResponseError
from textgym.types import Completion

__all__ = ["completion_from_response", "model_ids", "render_tool_calls", "restore_stop"]

_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_CLOSING_TAG = re.compile(r"</([A-Za-z_][\w.-]*)>")


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
                f"a tool call has no function name (function={excerpt(function, 80)})"
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


def completion_from_response(response: Any, stop: Sequence[str]) -> tuple[Completion, int]:
    """Turn a chat-completions response into a :class:`Completion`: the first choice's text and
    its tool calls as ``<tool_call>`` blocks (:func:`render_tool_calls`), or its text with a
    dropped stop string put back (:func:`restore_stop`); ``finish_reason`` ``"length"`` when the
    server says so, else ``"stop"``.

    Returns:
        ``(completion, completion_tokens)``: the tokens the server reports in ``usage`` (0 when
        it reports none).

    Raises:
        InvalidResponseError: the response does not have the shape of a chat completion.
    """
    choices = _field(response, "choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise InvalidResponseError(f"the response has no choices: {excerpt(response)}")
    choice = choices[0]
    message = _field(choice, "message")
    if isinstance(choice, (str, bytes)) or message is None or isinstance(message, str):
        raise InvalidResponseError(f"the first choice has no message object: {excerpt(choice)}")
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
    elif finish_reason == "stop" and stop:
        text = restore_stop(text, stop)
    completion_tokens = _field(_field(response, "usage"), "completion_tokens")
    if not isinstance(completion_tokens, int) or isinstance(completion_tokens, bool):
        completion_tokens = 0
    return Completion(text=text, finish_reason=finish_reason), completion_tokens


async def model_ids(client: Any) -> list[str]:
    """Every model id of ``client.models.list()``, all pages."""
    ids = []
    async for model in client.models.list():
        model_id = _field(model, "id")
        if not isinstance(model_id, str):
            raise InvalidResponseError(f"a listed model has no string id: {excerpt(model, 100)}")
        ids.append(model_id)
    return ids
