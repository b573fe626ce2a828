"""Tool-use conversations in the two forms the ecosystem uses, and the conversion between them.

textgym's tool envs speak text: a reply calls tools with ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` blocks and the next observation answers with one ``<tool_response>`` block
per call, in order (the Hermes / Qwen form; see ``docs/tool_envs.md``). Chat-completions servers
(OpenAI, vLLM, SGLang, llama.cpp) and TRL's SFT trainer take the structured form instead: the
assistant message's ``tool_calls`` and one ``tool`` message per result, with the call's id.
:func:`to_chat_messages` turns the first into the second and :func:`from_chat_messages` back, so
one recorded episode serves both (``from_chat_messages(to_chat_messages(m)) == m`` for every
conversation the envs produce). :func:`chat_tools` turns the envs' tool schemas into the
chat-completions form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.toolcalls import parse_tool_calls
from textgym.types import Message

__all__ = ["chat_tools", "from_chat_messages", "to_chat_messages"]


def chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Convert tool schemas to the Chat Completions form ``{"type": "function", "function": ...}``.

    textgym's envs list tools in the flat form of the Responses API
    (``{"type": "function", "name": ..., "description": ..., "parameters": ...}``); schemas that
    already have a ``"function"`` member pass through unchanged.
    """
    converted = []
    for tool in tools:
        if "function" in tool:
            converted.append(dict(tool))
        else:
            function = {k: v for k, v in tool.items() if k != "type"}
            converted.append({"type": tool.get("type", "function"), "function": function})
    return converted


_CALL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)
_RESPONSE_BLOCK = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def to_chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A textgym conversation with structured tool calls, as chat-completions servers expect.

    textgym's tool envs read calls as ``<tool_call>{json}</tool_call>`` blocks in the assistant
    text and answer with one ``<tool_response>`` block per call, in order, in the next user
    message. Where an assistant message holds calls that all parse and the next message holds
    exactly one response block per call (the calls ran), the pair becomes an assistant message
    with ``tool_calls`` (ids ``call_<message index>_<k>``, arguments as a JSON string, the text
    outside the blocks as its content) and one
    ``tool`` message per result with its call's ``tool_call_id``. Anything else (a final answer,
    a reply the env rejected whole, plain text) is sent unchanged. The translation is
    deterministic, so the same conversation always gives the same request.

    Args:
        messages: The conversation as the rollout records it (system, user, assistant, ...).

    Returns:
        New message dicts; ``messages`` is not changed.
    """
    out: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        reply = messages[index + 1] if index + 1 < len(messages) else None
        calls = parse_tool_calls(message["content"]) if message["role"] == "assistant" else []
        results = (
            _RESPONSE_BLOCK.findall(reply["content"])
            if calls and reply is not None and reply["role"] == "user"
            else []
        )
        if not calls or len(results) != len(calls) or any(c.error for c in calls):
            out.append(dict(message))
            index += 1
            continue
        ids = [f"call_{index}_{k}" for k in range(len(calls))]
        text = _CALL_BLOCK.sub("", message["content"]).strip()
        out.append(
            {
                "role": "assistant",
                # "" rather than null: OpenAI takes either, llama.cpp's server only a string.
                "content": text,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                    for call_id, call in zip(ids, calls)
                ],
            }
        )
        out.extend(
            {"role": "tool", "tool_call_id": call_id, "content": result}
            for call_id, result in zip(ids, results)
        )
        index += 2
    return out


def from_chat_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The inverse of :func:`to_chat_messages`: structured tool calls back to the text form.

    An assistant message with ``tool_calls`` becomes its content followed by one
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block per call (on its own line,
    as the gold completions write them), and the ``tool`` messages after it become one user
    message of ``<tool_response>`` blocks in call order. Other messages pass through unchanged.

    Raises:
        ValueError: a ``tool`` message that does not follow the calls it answers, a call without
            a string ``function.name``, arguments that are not a JSON object (as a dict or a JSON
            string), or results whose ids do not match the calls' ids in order.
    """
    out: list[dict[str, str]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if message.get("role") == "tool":
            raise ValueError(f"message {index} is a tool result without the calls it answers")
        if not calls:
            out.append({"role": message["role"], "content": message.get("content") or ""})
            index += 1
            continue
        blocks, ids = [], []
        for call in calls:
            function = call.get("function") or {}
            name, arguments = function.get("name"), function.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except RecursionError:  # nested deeper than Python's parser goes: invalid
                    arguments = None
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise ValueError(f"message {index} has a tool call without a name or arguments")
            blocks.append(
                "<tool_call>"
                + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
                + "</tool_call>"
            )
            ids.append(call.get("id"))
        text = message.get("content") or ""
        out.append({"role": "assistant", "content": "\n".join([text, *blocks] if text else blocks)})
        results = []
        index += 1
        while index < len(messages) and messages[index].get("role") == "tool":
            results.append(messages[index])
            index += 1
        if [r.get("tool_call_id") for r in results] != ids:
            raise ValueError(
                f"the tool results before message {index} answer {len(results)} calls with ids "
                f"{[r.get('tool_call_id') for r in results]}, expected {ids}"
            )
        out.append(
            {
                "role": "user",
                "content": "\n".join(
                    f"<tool_response>\n{r.get('content') or ''}\n</tool_response>" for r in results
                ),
            }
        )
    return out
