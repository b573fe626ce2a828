"""Outcome verification by final state, as WorkBench and NeMo Gym's ``workplace_assistant`` do it.

The agent's final tables are compared with the tables that replaying the gold calls on a fresh
sandbox produces (TOOLS.md, section 4): the five mutable tables, row order included, with every
text lowercased except the enum columns ``status``, ``list_name`` and ``board``. One addition,
recommended by the data's NOTICE.md: the two characters backslash-n count as a newline, since ten
WorkBench queries spell the newlines of an email body that way while the gold calls hold real
ones. Only the values are compared; all values are text, so WorkBench's dtype check always holds.

Envs keep a task's gold outcome as :func:`state_digest` (32 bytes) rather than as tables: equal
digests mean equal normalised tables, up to a SHA-256 collision (odds about 2**-128), and a
cache of all 690 WorkBench outcomes costs kilobytes instead of about 500 MiB.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.envs.workplace.sandbox import COMPARED_TABLES, TABLE_COLUMNS, Sandbox
from textgym.envs.workplace.tools import WRITE_TOOLS, call_tool

__all__ = ["CASE_SENSITIVE_COLUMNS", "normalized_state", "replay", "state_digest", "state_matches"]

#: Columns compared as written (WorkBench's evaluation lowercases every other text column).
CASE_SENSITIVE_COLUMNS = frozenset({"status", "list_name", "board"})

State = dict[str, list[tuple[str, ...]]]


def _norm(value: str) -> str:
    return value.replace("\\n", "\n").lower()


def normalized_state(sandbox: Sandbox) -> State:
    """The compared tables of ``sandbox``, normalised: table -> rows as tuples, in row order."""
    out: State = {}
    for table, rows in sandbox.snapshot(COMPARED_TABLES).items():
        keep = [c in CASE_SENSITIVE_COLUMNS for c in TABLE_COLUMNS[table]]
        out[table] = [
            tuple(v.replace("\\n", "\n") if k else _norm(v) for v, k in zip(row, keep))
            for row in rows
        ]
    return out


def replay(sandbox: Sandbox, calls: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """Run already-validated calls ``{"name", "arguments"}`` in order; return (writes done, errors)."""
    writes = errors = 0
    for call in calls:
        _, ok = call_tool(sandbox, call["name"], dict(call["arguments"]))
        errors += not ok
        writes += ok and call["name"] in WRITE_TOOLS
    return writes, errors


def state_matches(a: State, b: State) -> bool:
    """WorkBench's verdict: every compared table equal after normalisation."""
    return all(a[t] == b[t] for t in COMPARED_TABLES)


def state_digest(state: State) -> bytes:
    """SHA-256 (32 bytes) of the compared tables of a normalised ``state``, in table order.

    ``state_digest(a) == state_digest(b)`` exactly when :func:`state_matches` ``(a, b)``, barring
    a SHA-256 collision: each table is hashed as the JSON array ``[name, rows]``, which is
    self-delimiting, so distinct states give distinct byte strings.
    """
    h = hashlib.sha256()
    for table in COMPARED_TABLES:
        # surrogatepass: JSON escapes let a lone surrogate reach a value; it still hashes, distinctly.
        h.update(
            json.dumps([table, state[table]], ensure_ascii=False).encode("utf-8", "surrogatepass")
        )
    return h.digest()
