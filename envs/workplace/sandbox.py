"""The per-episode sandbox: WorkBench's tables in an in-memory SQLite database.

A :class:`SandboxTemplate` holds the tables as loaded from the CSVs; :meth:`SandboxTemplate.new`
copies it into a fresh in-memory database with SQLite's backup API, so every episode starts
from the same state and no two episodes share one. Every value is stored as text (WorkBench
loads all CSV values as strings; an empty CSV field is the empty string). Rows keep insertion
order (``rowid``), which is the row order the verifier compares.

Both classes pickle (as their rows, rebuilt in order), so an env pickles mid-episode.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["COMPARED_TABLES", "TABLE_COLUMNS", "Sandbox", "SandboxTemplate"]

#: Every table and its columns, in CSV order.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "emails": ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body"),
    "calendar_events": ("event_id", "event_name", "participant_email", "event_start", "duration"),
    "analytics_data": (
        "date_of_visit",
        "visitor_id",
        "page_views",
        "session_duration_seconds",
        "traffic_source",
        "user_engaged",
    ),
    "plots": ("file_path",),
    "project_tasks": (
        "task_id",
        "task_name",
        "assigned_to_email",
        "list_name",
        "due_date",
        "board",
    ),
    "customer_relationship_manager": (
        "customer_id",
        "assigned_to_email",
        "customer_name",
        "customer_email",
        "customer_phone",
        "last_contact_date",
        "product_interest",
        "status",
        "follow_up_by",
        "notes",
    ),
}

#: The tables the verifier compares (TOOLS.md, section 4); ``analytics_data`` is read-only.
COMPARED_TABLES = (
    "calendar_events",
    "emails",
    "plots",
    "project_tasks",
    "customer_relationship_manager",
)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _dump(conn: sqlite3.Connection) -> dict[str, list[tuple[str, ...]]]:
    return {t: list(conn.execute(f"SELECT * FROM {_q(t)} ORDER BY rowid")) for t in TABLE_COLUMNS}


def _build(tables: Mapping[str, Iterable[Sequence[str]]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    for name, columns in TABLE_COLUMNS.items():
        conn.execute(
            f"CREATE TABLE {_q(name)} ({', '.join(_q(c) + ' TEXT NOT NULL' for c in columns)})"
        )
        rows = [tuple(row) for row in tables.get(name, ())]
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(
                    f"Table {name!r}: expected {len(columns)} values per row, got {row!r}"
                )
        conn.executemany(f"INSERT INTO {_q(name)} VALUES ({', '.join('?' * len(columns))})", rows)
    conn.commit()
    return conn


class SandboxTemplate:
    """The starting tables of every episode, ready to copy.

    Args:
        tables: Table name -> rows (each a sequence of strings in :data:`TABLE_COLUMNS` order).
            Tables not given start empty.
        directory: The company directory (email addresses), read-only.

    Raises:
        ValueError: for an unknown table or a row of the wrong width.
    """

    def __init__(self, tables: Mapping[str, Iterable[Sequence[str]]], directory: Sequence[str]):
        unknown = set(tables) - set(TABLE_COLUMNS)
        if unknown:
            raise ValueError(
                f"Unknown tables {sorted(unknown)}; expected some of {list(TABLE_COLUMNS)}"
            )
        self.directory = tuple(directory)
        self._conn = _build(tables)

    def new(self) -> Sandbox:
        """A fresh, independent copy of the starting tables (SQLite backup API)."""
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.backup(conn)
        return Sandbox(conn, self.directory)

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "tables": _dump(self._conn)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = state["directory"]
        self._conn = _build(state["tables"])


class Sandbox:
    """One episode's tables: small typed helpers over an in-memory SQLite database.

    Tools (:mod:`textgym.envs.workplace.tools`) read and write only through these methods.
    """

    def __init__(self, conn: sqlite3.Connection, directory: tuple[str, ...]):
        self._conn = conn
        self.directory = directory

    def rows(self, table: str, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, str]]:
        """Rows of ``table`` as dicts, in row order, optionally filtered by an SQL ``where``."""
        columns = TABLE_COLUMNS[table]
        sql = f"SELECT {', '.join(_q(c) for c in columns)} FROM {_q(table)}"
        if where:
            sql += f" WHERE {where}"
        sql += " ORDER BY rowid"
        return [dict(zip(columns, row)) for row in self._conn.execute(sql, tuple(params))]

    def find(self, table: str, column: str, value: str) -> dict[str, str] | None:
        """The first row whose ``column`` equals ``value``, or ``None``."""
        found = self.rows(table, f"{_q(column)} = ?", (value,))
        return found[0] if found else None

    def column(self, table: str, column: str) -> list[str]:
        """All values of one column, in row order."""
        return [
            r[0] for r in self._conn.execute(f"SELECT {_q(column)} FROM {_q(table)} ORDER BY rowid")
        ]

    def insert(self, table: str, row: Mapping[str, str]) -> None:
        """Append one row (every column of the table must be given, as a string)."""
        columns = TABLE_COLUMNS[table]
        values = tuple(row[c] for c in columns)
        self._conn.execute(
            f"INSERT INTO {_q(table)} VALUES ({', '.join('?' * len(columns))})", values
        )

    def delete(self, table: str, column: str, value: str) -> int:
        """Delete the rows whose ``column`` equals ``value``; return how many."""
        return self._conn.execute(
            f"DELETE FROM {_q(table)} WHERE {_q(column)} = ?", (value,)
        ).rowcount

    def update(self, table: str, key: str, key_value: str, column: str, value: str) -> int:
        """Set ``column`` to ``value`` where ``key`` equals ``key_value``; return how many rows."""
        if column not in TABLE_COLUMNS[table]:
            raise KeyError(f"Table {table!r} has no column {column!r}")
        return self._conn.execute(
            f"UPDATE {_q(table)} SET {_q(column)} = ? WHERE {_q(key)} = ?", (value, key_value)
        ).rowcount

    def snapshot(self, tables: Sequence[str] = COMPARED_TABLES) -> dict[str, list[tuple[str, ...]]]:
        """The raw contents of ``tables``: name -> rows as tuples, in row order."""
        out = {}
        for table in tables:
            columns = ", ".join(_q(c) for c in TABLE_COLUMNS[table])
            out[table] = list(
                self._conn.execute(f"SELECT {columns} FROM {_q(table)} ORDER BY rowid")
            )
        return out

    def close(self) -> None:
        self._conn.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "tables": _dump(self._conn)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = state["directory"]
        self._conn = _build(state["tables"])
