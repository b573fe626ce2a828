"""Random actions drawn from an action grammar: JSON values for a JSON schema, and tool calls.

:func:`random_tool_call` writes one ``<tool_call>`` block (the form textgym's tool envs read,
``docs/tool_envs.md``) calling a tool drawn uniformly from ``info["tools"]``, with arguments
drawn by :func:`random_json` from the tool's ``parameters`` schema, so they validate against it:
every required property, each optional one with probability 1/2, ``enum`` and ``const``
respected, numbers and strings within their bounds. It is what ``--policy random`` plays on a
tool env: a floor, not a strategy.

The sampler covers the JSON-schema keywords that tool schemas use (``type``, ``enum``,
``const``, ``properties``, ``required``, ``items``, ``minItems``/``maxItems``,
``minimum``/``maximum`` and their exclusive forms, ``minLength``/``maxLength``, ``anyOf`` and
``oneOf`` by their first branch it can draw); a schema outside them (``pattern``, ``format``,
``$ref``) gets a value of the right type that may not validate, which the env then reports as an
invalid action. It draws with a NumPy generator, seeded by the caller, so the same seed gives the
same calls; Hypothesis's ``hypothesis-jsonschema`` covers more keywords but draws through a
test-time search engine that is neither seedable per call nor meant for run time.

Example:
    >>> import numpy as np
    >>> schema = {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1,
    ...     "maximum": 3}, "box": {"enum": ["inbox", "outbox"]}}, "required": ["page", "box"]}
    >>> value = random_json(schema, np.random.default_rng(0))
    >>> sorted(value), 1 <= value["page"] <= 3, value["box"] in ("inbox", "outbox")
    (['box', 'page'], True, True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["random_json", "random_tool_call"]

#: Letters of random strings (lower-case ASCII and digits: readable in a transcript).
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
#: Default bounds of drawn values where the schema gives none.
_INT_RANGE = (0, 10)
_MAX_STRING = 12
_MAX_ITEMS = 3
#: Nesting depth after which objects get only their required properties and arrays their
#: fewest items (a recursive schema stays finite).
_MAX_DEPTH = 4

_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")


def _string(schema: Mapping[str, Any], rng: np.random.Generator) -> str:
    low = int(schema.get("minLength", 1))
    high = int(schema.get("maxLength", max(low, _MAX_STRING)))
    length = int(rng.integers(low, max(low, min(high, low + _MAX_STRING)) + 1))
    return "".join(_ALPHABET[i] for i in rng.integers(len(_ALPHABET), size=length))


def _integer(schema: Mapping[str, Any], rng: np.random.Generator) -> int:
    low, high = schema.get("minimum"), schema.get("maximum")
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if exclusive_low is not None and not isinstance(exclusive_low, bool):
        low = int(np.floor(exclusive_low)) + 1
    if exclusive_high is not None and not isinstance(exclusive_high, bool):
        high = int(np.ceil(exclusive_high)) - 1
    if low is None:
        low = _INT_RANGE[0] if high is None else min(_INT_RANGE[0], int(np.floor(high)))
    low = int(np.ceil(low))
    high = low + _INT_RANGE[1] - _INT_RANGE[0] if high is None else int(np.floor(high))
    return int(rng.integers(low, max(low, high) + 1))


def _number(schema: Mapping[str, Any], rng: np.random.Generator) -> float:
    low = float(schema.get("minimum", schema.get("exclusiveMinimum", _INT_RANGE[0])))
    high = float(schema.get("maximum", schema.get("exclusiveMaximum", low + 10.0)))
    value = float(rng.uniform(low, max(low, high)))
    if value == schema.get("exclusiveMinimum") or value == schema.get("exclusiveMaximum"):
        value = (low + high) / 2
    return value


def _object(schema: Mapping[str, Any], rng: np.random.Generator, depth: int) -> dict[str, Any]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out: dict[str, Any] = {}
    for name, sub in properties.items():
        if name in required or (depth < _MAX_DEPTH and rng.random() < 0.5):
            out[name] = random_json(sub, rng, depth + 1)
    for name in sorted(required - set(out)):  # required but not described: any string
        out[name] = _string({}, rng)
    return out


def _array(schema: Mapping[str, Any], rng: np.random.Generator, depth: int) -> list[Any]:
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", max(low, _MAX_ITEMS)))
    count = (
        low
        if depth >= _MAX_DEPTH
        else int(rng.integers(low, max(low, min(high, low + _MAX_ITEMS)) + 1))
    )
    items = schema.get("items", {"type": "string"})
    return [random_json(items, rng, depth + 1) for _ in range(count)]


def random_json(schema: Mapping[str, Any] | bool, rng: np.random.Generator, depth: int = 0) -> Any:
    """A JSON value drawn with ``rng`` that validates against ``schema`` (see the module).

    Args:
        schema: A JSON schema (a mapping, or ``True`` for any value).
        rng: The generator every choice is drawn from.
        depth: Nesting depth of ``schema`` in the schema being drawn (callers pass 0).

    Returns:
        A value of the JSON data model: ``dict``, ``list``, ``str``, ``int``, ``float``,
        ``bool`` or ``None``.
    """
    if not isinstance(schema, Mapping):  # True / {}: any value
        return _string({}, rng)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema and schema["enum"]:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return random_json(schema[key][0], rng, depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[int(rng.integers(len(kind)))] if kind else None
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "string":
        return _string(schema, rng)
    if kind == "integer":
        return _integer(schema, rng)
    if kind == "number":
        return _number(schema, rng)
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    if kind == "object":
        return _object(schema, rng, depth)
    if kind == "array":
        return _array(schema, rng, depth)
    raise ValueError(f"Expected a JSON-schema type in {_TYPES}, got {kind!r}")


def random_tool_call(tools: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> str:
    """One ``<tool_call>`` block calling a random tool of ``tools`` with random valid arguments.

    Args:
        tools: Tool schemas as tool envs give them in ``info["tools"]``: the flat form
            ``{"type": "function", "name", "description", "parameters"}`` or the Chat
            Completions form ``{"type": "function", "function": {...}}``.
        rng: The generator the tool and its arguments are drawn from.

    Returns:
        ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; ``</`` inside a value is
        written ``<\\/`` (a legal JSON escape), as :func:`textgym.toolcalls.
        format_tool_calls` writes it.

    Raises:
        ValueError: for an empty ``tools``.
    """
    if not tools:
        raise ValueError("Expected at least one tool schema in info['tools'], got none")
    tool = tools[int(rng.integers(len(tools)))]
    function = tool.get("function", tool)
    arguments = random_json(function.get("parameters", {"type": "object"}), rng)
    body = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
    return "<tool_call>" + body.replace("</", "<\\/") + "</tool_call>"
