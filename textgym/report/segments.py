"""What the report draws of a message: text, ``<think>`` blocks, tool calls and tool
responses (JSON pretty-printed), and tic-tac-toe boards parsed from the observation text.

Pure functions of the message text (no I/O): :func:`message_segments` splits a message into
segments, :func:`structured_segments` does the same for a chat-completions message with
``tool_calls``, and :func:`parse_boards` finds the boards the tic-tac-toe env prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_TEXT_CHARS",
    "message_segments",
    "parse_boards",
    "pretty_json",
    "structured_segments",
]

#: Longest text segment embedded in the page, in characters; longer ones are cut, with a note.
MAX_TEXT_CHARS = 20_000

#: One tic-tac-toe board as the env prints it (``textgym.envs.tictactoe.text``): in the full
#: prompt style three rows of `` a | b | c`` separated by ``---+---+---``, in the compact one
#: three rows of three characters (``X1O``); a cell is ``X``, ``O`` or its own number 0-8.
_ROW = r"[ \t]*([XO0-8])[ \t]*\|[ \t]*([XO0-8])[ \t]*\|[ \t]*([XO0-8])[ \t]*"
_RULE = r"[ \t]*-+\+-+\+-+[ \t]*"
_FULL = rf"^{_ROW}\n{_RULE}\n{_ROW}\n{_RULE}\n{_ROW}$"
_COMPACT = (
    r"^([XO0-8])([XO0-8])([XO0-8])\n([XO0-8])([XO0-8])([XO0-8])\n([XO0-8])([XO0-8])([XO0-8])$"
)
_BOARD = rf"(?m:{_FULL}|{_COMPACT})"

_PARTS = {
    "think": r"(?P<think><think>(?P<think_body>.*?)(?:</think>|\Z))",
    "call": r"(?P<call><tool_call>(?P<call_body>.*?)(?:</tool_call>|\Z))",
    "result": r"(?P<result><tool_response>(?P<result_body>.*?)(?:</tool_response>|\Z))",
    "board": rf"(?P<board>{_BOARD})",
}

#: What each speaker's text may hold, by role: the model thinks and calls tools; the env answers
#: calls and draws boards (its own words "<think>" in "moves inside <think> do not count" are
#: text); a system prompt's tags are examples of the format, so only its boards are drawn.
_ROLE_PARTS = {
    "assistant": ("think", "call", "board"),
    "system": ("board",),
    "user": ("result", "board"),
    "tool": ("result", "board"),
}
_PATTERNS = {
    role: re.compile("|".join(_PARTS[part] for part in parts), re.DOTALL)
    for role, parts in _ROLE_PARTS.items()
}
_BOARD_ONLY = _PATTERNS["system"]


def parse_boards(text: str) -> list[list[str]]:
    """The tic-tac-toe boards drawn in ``text``, each as 9 cells in row-major order.

    A cell is ``"X"``, ``"O"`` or ``""`` (empty: the env prints the cell's number there, so a
    number anywhere else means the text is not a board). Cells are numbered 0-8 row by row, as
    the env numbers them.

    Example:
        >>> parse_boards(" X | 1 | 2\\n---+---+---\\n 3 | O | 5\\n---+---+---\\n 6 | 7 | X")
        [['X', '', '', '', 'O', '', '', '', 'X']]
        >>> parse_boards("opp 4\\nX12\\n3O5\\n678\\nfree 1 2 3 5 6 7 8")
        [['X', '', '', '', 'O', '', '', '', '']]
    """
    return [cells for m in _BOARD_ONLY.finditer(text) if (cells := _cells(m)) is not None]


def _cells(match: re.Match[str]) -> list[str] | None:
    """The 9 cells of a board match (its last 9 groups), ``""`` for an empty cell; ``None``
    when a number stands in the wrong cell (not a board: e.g. the lines ``"123"``)."""
    cells = [g for g in match.groups() if g is not None][-9:]
    if any(c not in ("X", "O") and c != str(i) for i, c in enumerate(cells)):
        return None
    return [c if c in ("X", "O") else "" for c in cells]


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _cut(text: str) -> str:
    """``text`` cut at :data:`MAX_TEXT_CHARS`, lone surrogates (not Unicode text; JSON lets
    them through) replaced by U+FFFD."""
    text = _LONE_SURROGATE.sub("\ufffd", text)
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]}\n[... {len(text) - MAX_TEXT_CHARS:,} more characters cut]"


def pretty_json(text: str) -> tuple[str, bool]:
    """``(text, True)`` with JSON pretty-printed if ``text`` parses as JSON, else as it was.

    Text nested too deeply for Python's parser (``RecursionError``: model output such as
    ``"[" * 100_000``) is returned as it was, like any other text that is not JSON.
    """
    stripped = text.strip()
    try:
        return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False), True
    except (ValueError, RecursionError):
        return stripped, False


def _call_segment(body: str) -> dict[str, Any]:
    """A tool call: its name and its arguments pretty-printed, or the raw text if unparsable
    (not JSON, nested too deeply to parse, or not a ``{"name": ...}`` object)."""
    try:
        call = json.loads(body.strip())
    except (ValueError, RecursionError):
        call = None
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # the chat-completions form: a JSON string
            text, _ = pretty_json(arguments)
        else:
            try:
                text = json.dumps(arguments, indent=2, ensure_ascii=False)
            except (ValueError, RecursionError):  # nested too deeply for the encoder
                text = repr(arguments)
        return {"t": "call", "name": call["name"], "v": _cut(text), "ok": True}
    return {"t": "call", "name": "", "v": _cut(body.strip()), "ok": False}


def message_segments(content: str, role: str = "assistant") -> list[dict[str, Any]]:
    """Split a message's text into what the page draws, in order.

    Segments (``"t"`` is the kind): ``text`` (``v``: the text), ``think`` (the body of a
    ``<think>`` block), ``call`` (a ``<tool_call>`` block: ``name``, ``v`` its arguments as
    indented JSON, ``ok`` False when the block is not a JSON call, ``v`` then its raw text),
    ``result`` (a ``<tool_response>`` body, pretty-printed when it is JSON) and ``board``
    (``cells``: 9 of ``"X"``, ``"O"``, ``""``). An unclosed block runs to the end of the text
    (a completion cut at its token limit). Whitespace-only text between blocks is dropped.
    Each text is cut at :data:`MAX_TEXT_CHARS`. Which segments are read depends on who speaks
    (``role``): ``think`` and ``call`` only from the ``assistant``, ``result`` only from the
    env (``user``, ``tool``), boards from all; a ``system`` prompt's tags are examples of the
    format and stay text. Any other role is read as the env's.
    """
    segments: list[dict[str, Any]] = []

    def text(value: str) -> None:
        if value.strip():
            segments.append({"t": "text", "v": _cut(value.strip("\n"))})

    pos = 0
    for match in _PATTERNS.get(role, _PATTERNS["user"]).finditer(content):
        board = match.group("board") is not None
        cells = _cells(match) if board else None
        if board and cells is None:
            continue  # not a board after all: it stays in the text around it
        text(content[pos : match.start()])
        pos = match.end()
        if match.groupdict().get("think") is not None:
            segments.append({"t": "think", "v": _cut(match.group("think_body").strip())})
        elif match.groupdict().get("call") is not None:
            segments.append(_call_segment(match.group("call_body")))
        elif match.groupdict().get("result") is not None:
            body, _ = pretty_json(match.group("result_body"))
            segments.append({"t": "result", "v": _cut(body)})
        else:
            segments.append({"t": "board", "cells": cells})
    text(content[pos:])
    return segments


def structured_segments(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Segments of a chat-completions message: its text, then each of its ``tool_calls``."""
    content = message.get("content")
    role = str(message.get("role", ""))
    segments = message_segments(content if isinstance(content, str) else "", role)
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        segments.append(
            _call_segment(
                json.dumps({"name": function.get("name"), "arguments": function.get("arguments")})
            )
        )
    return segments
