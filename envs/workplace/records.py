"""The generic machinery of the workplace tools: checks, pagination, schemas, record tools.

WorkBench (Styles et al. 2024; NeMo Gym's ``workplace_assistant`` port) gives email, calendar,
project management and CRM the same tools over records kept by id: get one field, delete,
update one field, create. They differ only in their table, names and value checks, so each
domain is one :class:`Record` row (the rows are in :mod:`~.domains`) and :func:`get_tool`,
:func:`delete_tool`, :func:`update_tool` and :func:`create_tool` build the tool and its schema
from it. Every tool is a :class:`Tool`: the function, whether it writes, its OpenAI schema.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from textgym.envs.workplace.sandbox import TABLE_COLUMNS, Sandbox

__all__ = [
    "Record",
    "Tool",
    "ToolError",
    "choice",
    "create_tool",
    "delete_tool",
    "get_tool",
    "is_email",
    "next_id",
    "paginate",
    "require",
    "string",
    "update_tool",
]


class ToolError(Exception):
    """An error result defined by the tool's semantics; the call changed nothing."""


def require(what: str, *values: Any) -> None:
    """Raise ``ToolError("<what> not provided.")`` if any value is ``None`` or empty."""
    if any(v is None or v == "" for v in values):
        raise ToolError(f"{what} not provided.")


def choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    """Raise :class:`ToolError` unless ``value`` is one of ``allowed`` (case-sensitive)."""
    if value not in allowed:
        raise ToolError(f"Invalid {what} {value!r}: expected one of {', '.join(allowed)}.")


def is_email(value: str) -> bool:
    """WorkBench's email test: an ``@`` and a ``.`` anywhere."""
    return "@" in value and "." in value


def next_id(sb: Sandbox, table: str, column: str) -> int:
    """One more than the largest decimal id in ``column`` (0 for none)."""
    ids = [
        int(v) for v in sb.column(table, column) if v.isdecimal() and len(v) < 1000
    ]  # int() caps digits
    return max(ids, default=-1) + 1


def paginate(items: list[Any], key: str, page: Any, page_size: Any) -> dict[str, Any]:
    """One page of ``items`` under ``key``, with the reference's ``pagination`` block.

    The total is named after the items (``total_emails``, ``total_events``,
    ``total_customers``), as NeMo Gym's tools name it. A ``page_size`` below 1 counts as 1 and
    ``page`` is clamped to the pages there are (the reference divides by zero, or returns an
    empty page, instead).
    """
    size = max(1, int(page_size))
    total_pages = max(1, math.ceil(len(items) / size))
    page = min(max(1, int(page)), total_pages)
    chunk = items[(page - 1) * size : page * size]
    return {
        key: chunk,
        "pagination": {
            f"total_{key}": len(items),
            "page": page,
            "page_size": size,
            "total_pages": total_pages,
        },
    }


# ---------------------------------------------------------------- schemas and the tool table


def string(description: str) -> dict[str, str]:
    """A string parameter's JSON schema."""
    return {"type": "string", "description": description}


class Tool(NamedTuple):
    """One tool: its function ``(sb, **arguments) -> result``, whether it writes, its schema."""

    function: Callable[..., Any]
    writes: bool
    schema: dict[str, Any]

    @classmethod
    def of(
        cls,
        function: Callable[..., Any],
        writes: bool,
        description: str,
        properties: dict[str, Any],
        required: Sequence[str] = (),
    ) -> Tool:
        """A tool with a project-written OpenAI (Responses API) function schema."""
        parameters = {
            "type": "object",
            "properties": properties,
            "required": list(required),
            "additionalProperties": False,
        }
        schema = {
            "type": "function",
            "name": function.__name__,
            "description": description,
            "parameters": parameters,
            "strict": False,
        }
        return cls(function, writes, schema)


# ---------------------------------------------------------------- records kept by id


@dataclass(frozen=True)
class Record:
    """One domain's records, and what its get/delete/update/create tools need to know.

    Tool names are ``<domain>_get_<noun>_information_by_id``, ``<domain>_delete_<noun>``,
    ``<domain>_update_<noun>`` and ``<domain>_create_<noun>``; the id is the table's first
    column. Results and errors name the record by ``label`` ("Event not found.").
    """

    domain: str  #: tool-name prefix, e.g. "calendar"
    table: str  #: the sandbox table, e.g. "calendar_events"
    noun: str  #: in tool names and the id's description, e.g. "event"
    label: str  #: in results and errors, e.g. "Event"
    article: str  #: in tool descriptions, e.g. "a calendar event"
    updatable: tuple[str, ...] = ()  #: fields ``update`` may set
    field_error: str = "Field not found"  #: first words of the unknown-field error of update
    check_id: Callable[[str], None] | None = None  #: raises ToolError for a malformed id
    #: field -> check of a new value (raises ToolError), run by update and create
    checks: Mapping[str, Callable[[Sandbox, str], None]] = field(default_factory=dict)
    lowercase: tuple[str, ...] = ()  #: fields stored lowercased (email addresses)
    create_what: str = ""  #: names the required arguments of create, in its error
    create_params: Mapping[str, str] = field(default_factory=dict)  #: create's descriptions

    @property
    def fields(self) -> tuple[str, ...]:
        return TABLE_COLUMNS[self.table]

    @property
    def id_field(self) -> str:
        return self.fields[0]

    def find(self, sb: Sandbox, record_id: str) -> dict[str, str]:
        """The record with this id; :class:`ToolError` "<label> not found." if there is none."""
        if self.check_id is not None:
            self.check_id(record_id)
        row = sb.find(self.table, self.id_field, record_id)
        if row is None:
            raise ToolError(f"{self.label} not found.")
        return row

    def check(self, sb: Sandbox, name: str, value: str) -> None:
        """Raise :class:`ToolError` if ``value`` may not be stored in field ``name``."""
        if name in self.checks:
            self.checks[name](sb, value)

    def stored(self, name: str, value: str) -> str:
        """``value`` as field ``name`` stores it."""
        return value.lower() if name in self.lowercase else value

    def id_schema(self) -> dict[str, dict[str, str]]:
        return {self.id_field: string(f"8-digit {self.noun} id")}


def _generated(name: str, params: Sequence[str], body: Callable[..., Any], doc: str) -> Any:
    """A function ``name(sb, <params>=None)`` calling ``body(sb, *params)``.

    It carries a real signature (``inspect.signature``, which the data loader checks schemas
    against) and raises ``TypeError`` for an unknown argument as a ``def`` would.
    """
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    signature = inspect.Signature(
        [inspect.Parameter("sb", kind, annotation="Sandbox")]
        + [inspect.Parameter(p, kind, default=None, annotation="str | None") for p in params],
        return_annotation="Any",
    )

    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}() {exc}") from None
        bound.apply_defaults()
        return body(*bound.arguments.values())

    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__doc__ = doc
    return tool


def _get(r: Record, sb: Sandbox, record_id: str, name: str) -> Any:
    require(f"{r.label} ID or field", record_id, name)
    row = r.find(sb, record_id)
    if name not in r.fields:
        raise ToolError(f"Field not found: expected one of {', '.join(r.fields)}.")
    return {name: row[name]}


def _delete(r: Record, sb: Sandbox, record_id: str) -> Any:
    require(f"{r.label} ID", record_id)
    r.find(sb, record_id)
    sb.delete(r.table, r.id_field, record_id)
    return f"{r.label} deleted successfully."


def _update(r: Record, sb: Sandbox, record_id: str, name: str, new_value: str) -> Any:
    require(f"{r.label} ID, field or new value", record_id, name, new_value)
    r.find(sb, record_id)
    if name not in r.updatable:
        raise ToolError(f"{r.field_error}: expected one of {', '.join(r.updatable)}.")
    r.check(sb, name, new_value)
    sb.update(r.table, r.id_field, record_id, name, r.stored(name, new_value))
    return f"{r.label} updated successfully."


def _create(r: Record, sb: Sandbox, *values: str) -> Any:
    require(r.create_what, *values)
    given = dict(zip(r.fields[1:], values))
    for name, value in given.items():  # every check before any write
        r.check(sb, name, value)
    record_id = f"{next_id(sb, r.table, r.id_field):08d}"
    sb.insert(r.table, {r.id_field: record_id, **{k: r.stored(k, v) for k, v in given.items()}})
    return record_id


def _tool(r: Record, name: str, params: Sequence[str], body: Callable[..., Any], doc: str) -> Any:
    doc += f"\n\nWorkBench's ``{name}``, built from the record row of ``{r.table}``."
    return _generated(name, params, functools.partial(body, r), doc)


def get_tool(r: Record) -> Tool:
    """``<domain>_get_<noun>_information_by_id(<id>, field)``: ``{field: value}`` of one record."""
    params = (r.id_field, "field")
    doc = (
        f"Get one field of {r.article}: ``{{field: value}}``.\n\nErrors: an argument missing, "
        f"'{r.label} not found.', a field not among {', '.join(r.fields)}."
    )
    fn = _tool(r, f"{r.domain}_get_{r.noun}_information_by_id", params, _get, doc)
    properties = {**r.id_schema(), "field": string("One of: " + ", ".join(r.fields))}
    return Tool.of(fn, False, f"Get one field of {r.article}.", properties, params)


def delete_tool(r: Record) -> Tool:
    """``<domain>_delete_<noun>(<id>)``: delete one record."""
    doc = f"Delete {r.article}.\n\nErrors: the id missing, '{r.label} not found.'."
    fn = _tool(r, f"{r.domain}_delete_{r.noun}", (r.id_field,), _delete, doc)
    return Tool.of(fn, True, f"Delete {r.article}.", r.id_schema(), (r.id_field,))


def update_tool(r: Record) -> Tool:
    """``<domain>_update_<noun>(<id>, field, new_value)``: set one of ``r.updatable``."""
    params = (r.id_field, "field", "new_value")
    doc = (
        f"Update one field of {r.article}.\n\nErrors: an argument missing, '{r.label} not "
        f"found.', a field not among {', '.join(r.updatable)}, a value its check refuses "
        f"(checked: {', '.join(r.checks) or 'none'}). Stored lowercased: "
        f"{', '.join(r.lowercase) or 'none'}."
    )
    fn = _tool(r, f"{r.domain}_update_{r.noun}", params, _update, doc)
    properties = {
        **r.id_schema(),
        "field": string("One of: " + ", ".join(r.updatable)),
        "new_value": string("New value"),
    }
    return Tool.of(fn, True, f"Update one field of {r.article}.", properties, params)


def create_tool(r: Record) -> Tool:
    """``<domain>_create_<noun>(<every field but the id>)``: returns the new 8-digit id."""
    params = r.fields[1:]
    doc = (
        f"Create {r.article}; returns its new 8-digit id.\n\nErrors: an argument missing, a "
        "value its check refuses (all checked, in field order, before anything is written)."
    )
    fn = _tool(r, f"{r.domain}_create_{r.noun}", params, _create, doc)
    properties = {p: string(r.create_params[p]) for p in params}
    return Tool.of(fn, True, f"Create {r.article}; returns its id.", properties, params)
