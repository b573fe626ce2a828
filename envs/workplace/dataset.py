"""Loading WorkBench-format workplace data: five tables, the directory, tasks and tool schemas.

A data folder holds (directly, or under a ``workbench/`` sub-folder as in ``../shared/data/
workplace``): ``tasks.jsonl``, ``processed/{emails, calendar_events, analytics_data,
project_tasks, customer_relationship_manager_data}.csv`` and ``raw/email_addresses.csv`` (one
address per line, no header). Tool schemas come from ``schemas/tool_schemas.json`` beside them
when present, else the project-written :data:`~.tools.TOOL_SCHEMAS`. The bundled ``sample/``
folder is a tiny workplace written for textgym in this format (not WorkBench data).
"""

from __future__ import annotations

import csv
import functools
import inspect
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textgym.data import read_jsonl
from textgym.envs.workplace.sandbox import TABLE_COLUMNS, SandboxTemplate
from textgym.envs.workplace.tools import TOOL_SCHEMAS, TOOLS
from textgym.errors import SetupError

__all__ = [
    "DOMAINS",
    "PATH_ENV_VAR",
    "SAMPLE_DIR",
    "WorkplaceData",
    "WorkplaceTask",
    "load_workplace",
]

#: Environment variable naming a WorkBench-format data folder.
PATH_ENV_VAR = "TEXTGYM_WORKPLACE_DIR"
#: The bundled sample workplace (project-written, a few rows per table).
SAMPLE_DIR = Path(__file__).with_name("sample")
#: Task domains: WorkBench's five single-domain query files and the multi-domain one.
DOMAINS = (
    "email",
    "calendar",
    "analytics",
    "project_management",
    "customer_relationship_manager",
    "multi_domain",
)

_CSV = {
    "emails": "emails.csv",
    "calendar_events": "calendar_events.csv",
    "analytics_data": "analytics_data.csv",
    "project_tasks": "project_tasks.csv",
    "customer_relationship_manager": "customer_relationship_manager_data.csv",
}


@dataclass(frozen=True)
class WorkplaceTask:
    """One task: the user's request and the gold calls ``({"name", "arguments": dict}, ...)``."""

    task_id: str
    domain: str
    system_prompt: str
    query: str
    gold_calls: tuple[dict[str, Any], ...]


@dataclass
class WorkplaceData:
    """Everything an episode needs; ``gold_states`` caches each task's gold outcome.

    ``gold_states`` maps a task's index to ``(digest, noop)``: the SHA-256 of its normalised
    gold tables (:func:`~.verify.state_digest`) and whether the gold calls change nothing. It
    fills as tasks are first reset and holds at most one entry per task, about 100 bytes each
    (690 WorkBench tasks: under 100 KiB; the whole tables took about 750 KiB per task).
    """

    root: str
    template: SandboxTemplate
    tasks: tuple[WorkplaceTask, ...]
    schemas: tuple[dict[str, Any], ...]
    gold_states: dict[int, tuple[bytes, bool]] = field(default_factory=dict)


def _read_table(path: Path, table: str) -> list[tuple[str, ...]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = tuple(next(reader))
        if header != TABLE_COLUMNS[table]:
            raise SetupError(f"{path}: expected the columns {TABLE_COLUMNS[table]}, got {header}")
        return [tuple(row) for row in reader if row]


def _task(row: dict[str, Any], where: str) -> WorkplaceTask:
    try:
        calls = []
        for call in row["ground_truth"]:
            args = call["arguments"]
            args = json.loads(args) if isinstance(args, str) else dict(args)
            if call["name"] not in TOOLS or not isinstance(args, dict):
                raise SetupError(f"unknown tool {call['name']!r} or arguments not an object")
            calls.append({"name": call["name"], "arguments": args})
        domain = row["category"].removeprefix("workplace_assistant_")
        if domain not in DOMAINS:
            raise SetupError(
                f"category {row['category']!r} is not workplace_assistant_<one of {DOMAINS}>"
            )
        return WorkplaceTask(row["id"], domain, row["system_prompt"], row["query"], tuple(calls))
    except (KeyError, TypeError, ValueError) as exc:
        raise SetupError(
            f"{where}: expected a WorkBench task row (id, category, system_prompt, query, "
            f"ground_truth of {{name, arguments}}), got an error: {exc}"
        ) from None


def _fingerprint(root: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple(
        (str(p), p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    )


@functools.lru_cache(maxsize=4)
def _load(root: str, _fingerprint: Any) -> WorkplaceData:
    base = Path(root)
    data = base / "workbench" if (base / "workbench" / "tasks.jsonl").is_file() else base
    tables = {name: _read_table(data / "processed" / file, name) for name, file in _CSV.items()}
    with open(data / "raw" / "email_addresses.csv", encoding="utf-8") as fh:
        directory = [line.strip() for line in fh if line.strip()]
    tasks_path = data / "tasks.jsonl"
    tasks = tuple(
        _task(row, f"{tasks_path}, row {i}") for i, row in enumerate(read_jsonl(tasks_path))
    )
    schema_path = base / "schemas" / "tool_schemas.json"
    schemas: Sequence[dict[str, Any]] = TOOL_SCHEMAS
    if schema_path.is_file():
        schemas = json.loads(schema_path.read_text(encoding="utf-8"))
        names = sorted(s.get("name", "?") for s in schemas)
        if names != sorted(TOOLS):
            raise SetupError(
                f"{schema_path}: expected schemas for the 27 tools {sorted(TOOLS)}, got {names}"
            )
        for s in schemas:
            accepted = set(inspect.signature(TOOLS[s["name"]][0]).parameters) - {"sb"}
            extra = set(s["parameters"].get("properties", {})) - accepted
            if extra or s["parameters"].get("additionalProperties", True) is not False:
                raise SetupError(
                    f"{schema_path}: the schema of {s['name']} must declare only {sorted(accepted)} "
                    "with additionalProperties false"
                )
    if not tasks:
        raise SetupError(f"{tasks_path} holds no tasks")
    return WorkplaceData(str(base), SandboxTemplate(tables, directory), tasks, tuple(schemas))


def load_workplace(data_dir: str | os.PathLike[str] | None = None) -> WorkplaceData:
    """Load a workplace folder: ``data_dir``, else ``$TEXTGYM_WORKPLACE_DIR``, else the sample.

    Loads are cached per process (a folder is re-read when any file in it changes).

    Raises:
        FileNotFoundError: if the folder or one of its files does not exist.
        SetupError: for a malformed table, task row or schema file.
    """
    if data_dir is None:
        data_dir = os.environ.get(PATH_ENV_VAR) or SAMPLE_DIR
    root = Path(data_dir).expanduser().resolve()
    if not root.is_dir():
        raise FileNotFoundError(
            f"Expected a workplace data folder at {str(data_dir)!r} ({root}), but there is none"
        )
    return _load(str(root), _fingerprint(root))
