"""Tool calls in completion text: parse, validate against JSON schemas, render the responses.

The format is the Hermes / Qwen chat-template convention: each call is a JSON object
``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and ``</tool_call>``; ``arguments``
may also be a JSON string holding that object (OpenAI style). Each result goes back in its own
``<tool_response>`` block, in call order. Everything here is pure: text in, values out; model text
is parsed with :func:`json.loads`, never evaluated.

A reply is checked as a whole (:func:`validate_reply`) before any of its calls runs: one call that
cannot run (malformed, unknown tool, arguments against the schema), or more calls than the limit,
rejects the whole reply (:func:`rejection_message` explains which call was wrong). The tool envs'
contract is in ``docs/tool_envs.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "TOO_MANY_CALLS",
    "ToolCall",
    "build_validators",
    "format_tool_calls",
    "has_tool_call",
    "parse_tool_calls",
    "rejection_message",
    "render_responses",
    "validate_call",
    "validate_reply",
]

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
#: A closed block, or an unclosed one running to the end of the completion.
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
#: Longest response text per call; longer results are cut with a note.
MAX_RESPONSE_CHARS = 16_000
#: ``invalid_reason`` of a reply with more calls than the per-reply limit.
TOO_MANY_CALLS = "too_many_calls"


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: ``name`` and ``arguments``, or ``error`` (then it must not run)."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    reason: str | None = None  # "malformed_tool_call", "unknown_tool" or "invalid_arguments"


def has_tool_call(text: str) -> bool:
    """Whether ``text`` contains a ``<tool_call>`` tag (then it is not a final answer)."""
    return CALL_OPEN in text


def _parse_block(body: str) -> ToolCall:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        msg = getattr(exc, "msg", None) or type(exc).__name__
        return ToolCall(
            None,
            error=f"Malformed tool call: invalid JSON ({msg}). Expected "
            '{"name": "<tool name>", "arguments": {...}}.',
            reason="malformed_tool_call",
        )
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall(
            None,
            error='Malformed tool call: expected a JSON object with a string "name" '
            'and an object "arguments".',
            reason="malformed_tool_call",
        )
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        return ToolCall(
            value["name"],
            error='Malformed tool call: "arguments" must be a JSON object.',
            reason="malformed_tool_call",
        )
    return ToolCall(value["name"], arguments)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text``, in order (empty list: a final answer).

    A block that is not valid JSON, not an object with a string ``name``, or whose
    ``arguments`` is not an object comes back with ``error`` set. An unclosed last block runs
    to the end of the text.
    """
    return [_parse_block(m.group(1).strip()) for m in _BLOCK.finditer(text)]


_VALIDATOR_CACHE: dict[str, dict[str, Any]] = {}


def build_validators(schemas: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Tool name -> a JSON-schema validator of its ``parameters``.

    Each schema is checked once per process (validators are cached by the schemas' content).
    The validators hold their own copy of the schemas, so changing ``schemas`` afterwards (or
    a copy handed to an agent) changes no validator.

    Raises:
        jsonschema.SchemaError: if a schema is not a valid JSON schema.
    """
    key = json.dumps(list(schemas), sort_keys=True)
    if key not in _VALIDATOR_CACHE:
        out = {}
        for schema in json.loads(
            key
        ):  # a private deep copy: the cache must not share caller's dicts
            params = schema["parameters"]
            cls = jsonschema.validators.validator_for(params)
            cls.check_schema(params)
            out[schema["name"]] = cls(params)
        _VALIDATOR_CACHE[key] = out
    return dict(_VALIDATOR_CACHE[key])


def validate_call(call: ToolCall, validators: Mapping[str, Any]) -> ToolCall:
    """Return ``call`` unchanged if it may run, else a copy with ``error`` and ``reason`` set."""
    if call.error is not None:
        return call
    if call.name not in validators:
        known = ", ".join(sorted(validators))
        return ToolCall(
            call.name,
            call.arguments,
            f"Unknown tool {call.name[:80]!r}; expected one of: {known}.",
            "unknown_tool",
        )
    error = next(iter(validators[call.name].iter_errors(call.arguments)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return ToolCall(
            call.name,
            call.arguments,
            f"Invalid arguments for {call.name} at {where}: {error.message[:300]}",
            "invalid_arguments",
        )
    if not _encodable(call.arguments):
        return ToolCall(
            call.name,
            call.arguments,
            f"Invalid arguments for {call.name}: text must be valid "
            "Unicode (a JSON \\u escape gave a lone surrogate).",
            "invalid_arguments",
        )
    return call


def validate_reply(
    calls: Sequence[ToolCall], validators: Mapping[str, Any], max_calls: int
) -> tuple[list[ToolCall], str | None]:
    """Check a reply's calls as a whole: ``(calls, reason)``; the reply may run only if ``reason`` is None.

    More than ``max_calls`` calls: ``reason`` is :data:`TOO_MANY_CALLS` and the calls come back
    as parsed (not validated: nothing of such a reply runs, so the check stops there). Otherwise
    every call is validated (:func:`validate_call`) and ``reason`` is that of the first call that
    may not run (``"malformed_tool_call"``, ``"unknown_tool"`` or ``"invalid_arguments"``).
    """
    if len(calls) > max_calls:
        return list(calls), TOO_MANY_CALLS
    checked = [validate_call(c, validators) for c in calls]
    return checked, next((c.reason for c in checked if c.error is not None), None)


def rejection_message(calls: Sequence[ToolCall], reason: str, max_calls: int) -> str:
    """What the agent reads after a rejected reply (``reason`` from :func:`validate_reply`).

    Over the limit: one sentence (no ``<tool_response>`` block, so its length stays bounded
    whatever the number of calls). Otherwise one ``<tool_response>`` block per call, in order:
    ``Error: ...`` for each invalid call, ``Not run: ...`` (naming the first invalid call) for
    the others, then one line saying that nothing ran.
    """
    if reason == TOO_MANY_CALLS:
        return (
            f"Your reply has {len(calls)} tool calls, more than the {max_calls} allowed per reply, so "
            f"none was run and nothing changed. Reply again with at most {max_calls} calls."
        )
    bad = [i for i, c in enumerate(calls, 1) if c.error is not None]
    results = [
        f"Error: {c.error}"
        if c.error is not None
        else f"Not run: call {bad[0]} of this reply is invalid, so none of its calls was run."
        for c in calls
    ]
    which = ("call " if len(bad) == 1 else "calls ") + ", ".join(map(str, bad))
    return (
        render_responses(results)
        + f"\nNo call of this reply was run and nothing changed (invalid: {which}). "
        "Send the calls again with the invalid ones corrected."
    )


def _encodable(value: Any) -> bool:
    """Whether every string in ``value`` encodes as UTF-8 (JSON allows lone surrogates; SQLite does not)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_encodable(v) for v in value)
    return True


def _text(result: Any) -> str:
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    if len(text) > MAX_RESPONSE_CHARS:
        text = (
            text[:MAX_RESPONSE_CHARS]
            + f"... [{len(text) - MAX_RESPONSE_CHARS} more characters cut]"
        )
    return text


def render_responses(results: Sequence[Any]) -> str:
    """One ``<tool_response>`` block per result, in order; strings as-is, other values as JSON."""
    return "\n".join(f"<tool_response>\n{_text(r)}\n</tool_response>" for r in results)


def format_tool_calls(calls: Sequence[Mapping[str, Any]]) -> str:
    """Write calls ``{"name": str, "arguments": dict}`` as ``<tool_call>`` blocks, one per line.

    ``</`` inside a JSON string is written ``<\\/`` (a legal JSON escape), so a value holding
    ``</tool_call>`` cannot end its block early.
    """
    blocks = []
    for c in calls:
        body = json.dumps({"name": c["name"], "arguments": c["arguments"]}, ensure_ascii=False)
        blocks.append(f"{CALL_OPEN}{body.replace('</', '<' + chr(92) + '/')}{CALL_CLOSE}")
    return "\n".join(blocks)
