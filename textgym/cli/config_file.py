"""``--config FILE``: a subcommand's options replayed from a run's ``run.json`` (its
``config``) or from a JSON object of option names, read and typed strictly.

- Only a regular file of at most :data:`CONFIG_MAX_BYTES` (1 MiB; a run's ``run.json`` is a
  few KB) is read: a FIFO, a device (``/dev/zero``), a directory or a socket is refused
  without reading from it, and so is a larger file.
- Every value must have its option's JSON type exactly: ``true``/``false`` for a flag (never
  ``"false"``, ``0`` or ``"yes"``), an integer for an integer option (never ``1.5``, ``2.0``,
  ``"0"``, ``true`` or ``null``), a number for a number option (an integer is taken as a
  number; never ``"1e-5"``), a string of at most :data:`STRING_MAX` characters for a string
  option, an array for a list option (never ``{}``), an object for ``env_kwargs``, ``null``
  only where the option may be left unset, and one of the listed choices for a choice.
- An env id of the form ``module:EnvName-v0`` (``env_id``, ``eval_env``) imports ``module``;
  it is used only when the command line names it: a file cannot make textgym import a module.

Each refusal is one line naming the file, the option, what was expected and what was seen
(a bounded excerpt), raised as :class:`~textgym.errors.UsageError` (exit code 2).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any

from textgym.checks import excerpt, one_line
from textgym.errors import UsageError

__all__ = [
    "CONFIG_MAX_BYTES",
    "ENV_ID_FIELDS",
    "NOT_REPLAYED",
    "STRING_MAX",
    "check_replayed_env_ids",
    "read_config_file",
    "take_config_file",
]

#: The largest ``--config`` file read, in bytes (1 MiB).
CONFIG_MAX_BYTES = 1 << 20

#: The longest string a ``--config`` file may give a string option (paths, model ids, URLs,
#: titles): Linux's ``PATH_MAX``.
STRING_MAX = 4096

#: Options a ``--config`` file never sets: what happens to existing folders is decided on each
#: command line (a replayed ``overwrite`` would delete the recorded run's own output).
NOT_REPLAYED = frozenset({"overwrite", "resume"})

#: Options that hold an env id, which in the form ``module:EnvName-v0`` imports ``module``.
ENV_ID_FIELDS = frozenset({"env_id", "eval_env"})

_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(info: os.stat_result, path: str) -> None:
    """Refuse a file that is not regular or is over :data:`CONFIG_MAX_BYTES`."""
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), "not a file")
        raise UsageError(
            f"--config: {excerpt(path)} is {kind}, not a regular file; give a run's run.json "
            "or a JSON file of option names"
        )
    if info.st_size > CONFIG_MAX_BYTES:
        raise UsageError(
            f"--config: {excerpt(path)} has {info.st_size} bytes, more than a config file's "
            f"{CONFIG_MAX_BYTES} (1 MiB); give a run's run.json or a JSON file of option names"
        )


def read_config_file(path: str) -> Any:
    """The JSON value in the file ``path``, read only if it is a regular file of at most
    :data:`CONFIG_MAX_BYTES` (opened without blocking, checked again once open).

    Raises:
        UsageError: no such file, not a regular file, too large, unreadable, not UTF-8 JSON.
    """
    try:
        _check_regular(os.stat(path), path)  # before opening: a FIFO is never opened to wait
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"--config: no such file {excerpt(path)}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--config: cannot read {excerpt(path)} ({one_line(exc, 200)})") from None
    with os.fdopen(fd, "rb") as file:
        _check_regular(os.fstat(file.fileno()), path)  # the file opened is the one checked
        try:
            data = file.read(CONFIG_MAX_BYTES + 1)
        except OSError as exc:
            raise UsageError(
                f"--config: cannot read {excerpt(path)} ({one_line(exc, 200)})"
            ) from None
    if len(data) > CONFIG_MAX_BYTES:  # grew since the check
        raise UsageError(
            f"--config: {excerpt(path)} has more than a config file's {CONFIG_MAX_BYTES} bytes"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(
            f"--config: cannot read {excerpt(path)} as JSON ({one_line(exc, 200)})"
        ) from None


def take_config_file(
    config_class: type, argv: Sequence[str], prog: str
) -> tuple[list[str], dict[str, Any]]:
    """Take ``--config FILE`` out of ``argv``: the options' values from a run's ``run.json``
    (its ``config``, as :func:`textgym.algos.metrics.write_run_record` writes it) or from a JSON
    object of option names (``{"learning_rate": 1e-4}``, the field names), which then replace
    the defaults; options given on the command line still win. ``overwrite`` and ``resume``
    are never taken from the file (:data:`NOT_REPLAYED`). Each value is typed strictly (see
    the module docstring): JSON arrays become tuples, integers given to number options floats.

    Returns:
        ``(argv without --config FILE, the values)``; the values are empty without ``--config``.

    Raises:
        UsageError: the file is missing, not a regular file, too large or not a JSON object,
            the run it records was another subcommand's, it names a field that is not an
            option of ``prog``, or a value is not of its option's type.
    """
    rest, path = _split_argv(argv)
    if path is None:
        return rest, {}
    record = read_config_file(path)
    path = path if len(path) <= 160 else path[:157] + "..."  # as the messages below show it
    if not isinstance(record, dict):
        raise UsageError(f"--config: expected a JSON object in {path}, got {type(record).__name__}")
    values = record
    if isinstance(record.get("config"), dict) and "command" in record:  # a run.json
        command = record["command"]
        ran = " ".join(map(str, command[:2])) if isinstance(command, list) else ""
        if ran.startswith("textgym ") and ran != prog:
            ran = excerpt(ran, 60).strip("'\"")
            raise UsageError(
                f"--config: {path} records a `{ran}` run; replay it with `{ran} --config {path}`"
            )
        values = record["config"]
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    unknown = [name for name in values if name not in fields and name not in NOT_REPLAYED]
    if unknown:
        names = ", ".join(excerpt(name, 60) for name in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UsageError(f"--config: {path} sets {names}{more}, not an option of {prog}")
    hints = typing.get_type_hints(config_class, include_extras=True)
    return rest, {
        name: _typed(path, name, value, hints[name])
        for name, value in values.items()
        if name not in NOT_REPLAYED and fields[name].init
    }


def _split_argv(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``(argv without --config FILE, FILE)``; ``FILE`` is ``None`` without ``--config``."""
    argv = list(argv)
    spots = [i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not spots:
        return argv, None
    if len(spots) > 1:
        raise UsageError("--config was given more than once; give one file")
    i = spots[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise UsageError("--config expects a file, e.g. --config runs/grpo/run.json")
        return argv[:i] + argv[i + 2 :], argv[i + 1]
    return argv[:i] + argv[i + 1 :], argv[i].split("=", 1)[1]


def check_replayed_env_ids(
    replayed: dict[str, Any], parsed: dict[str, Any], argv: Sequence[str]
) -> None:
    """Refuse a ``module:EnvName-v0`` env id that only a ``--config`` file gives.

    Args:
        replayed: The values :func:`take_config_file` took from the file.
        parsed: The options as parsed (the command line's, or else the file's).
        argv: The command line without ``--config FILE``.

    Raises:
        UsageError: an env id option holds a ``module:`` id from the file that the command
            line does not name (it would import ``module``, perhaps from the current folder).
    """
    for name in sorted(ENV_ID_FIELDS & replayed.keys()):
        value = parsed.get(name)
        if not isinstance(value, str) or ":" not in value or value != replayed[name]:
            continue
        flag = "ENV_ID" if name == "env_id" else "--" + name.replace("_", "-")
        if _named(argv, None if name == "env_id" else flag, value):
            continue  # the command line names it too
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise UsageError(
            f"--config: the file sets {name} to {shown}, an id that imports the module "
            f"{shown.split(':', 1)[0]}; a module is imported only when the command line names "
            f"it: give {flag} {shown} on the command line"
        )


def _named(argv: Sequence[str], flag: str | None, value: str) -> bool:
    """Whether ``argv`` gives ``value`` as a positional argument (``flag`` ``None``) or as
    ``flag value`` / ``flag=value``."""
    if flag is None:
        return value in argv
    pairs = zip(argv, [*argv[1:], None])
    return any(a == f"{flag}={value}" or (a == flag and b == value) for a, b in pairs)


# ----------------------------------------------------------------------------- strict types


class _Mistyped(Exception):
    """A value that is not of the type wanted.

    Attributes:
        expected: What was wanted (``an integer``).
        where: Where in the option's value (``""``, ``[2]``, ``["data_path"]``).
        seen: The value seen there.
    """

    def __init__(self, expected: str, seen: Any, where: str = "") -> None:
        super().__init__(expected)
        self.expected, self.seen, self.where = expected, seen, where


def _inside(where: str, convert: typing.Callable[[], Any]) -> Any:
    """``convert()``, its :class:`_Mistyped` placed at ``where`` inside the option's value."""
    try:
        return convert()
    except _Mistyped as exc:
        raise _Mistyped(exc.expected, exc.seen, where + exc.where) from None


def _json_excerpt(value: Any, limit: int = 80) -> str:
    """``value`` as the file writes it (JSON), cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return excerpt(value, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_JSON_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    type(None): "null",
    list: "an array",
    tuple: "an array",
    dict: "an object",
}


def _typed(path: str, name: str, value: Any, kind: Any) -> Any:
    """``value`` from the file as option ``name`` of type ``kind`` takes it.

    Raises:
        UsageError: naming the option, the type expected and the value (an excerpt).
    """
    try:
        return _as_kind(value, kind)
    except _Mistyped as exc:
        seen = _JSON_NAMES.get(type(exc.seen), type(exc.seen).__name__)
        raise UsageError(
            f"--config: {path} sets {name}{exc.where} to {_json_excerpt(exc.seen)} ({seen}); "
            f"expected {exc.expected}; fix the value in the file (or leave {name} out of it)"
        ) from None


def _as_kind(value: Any, kind: Any) -> Any:
    """``value`` converted to ``kind`` without coercion: only JSON arrays to tuples and
    integers to floats.

    Raises:
        _Mistyped: ``value`` is not of ``kind``; the message says what was expected.
    """
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        return _as_kind(value, members[0])
    if kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        deeper: list[_Mistyped] = []
        for member in members:
            try:
                return _as_kind(value, member)
            except _Mistyped as exc:
                deeper += [exc] if exc.where else []
        if len(deeper) == 1:  # the right container, a wrong member: say which
            raise deeper[0]
        raise _Mistyped(" or ".join(_expected(member) for member in members), value)
    if origin is typing.Literal:
        for choice in members:
            if type(value) is type(choice) and value == choice:
                return value
        raise _Mistyped(_expected(kind), value)
    if origin is tuple:
        return _as_tuple(value, kind)
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mistyped(_expected(kind), value)
        key_kind, value_kind = members or (Any, Any)
        return {
            _as_kind(k, key_kind): _inside(
                f"[{_json_excerpt(k, 40)}]", lambda v=v: _as_kind(v, value_kind)
            )
            for k, v in value.items()
        }
    return _as_scalar(value, kind)


def _as_tuple(value: Any, kind: Any) -> tuple[Any, ...]:
    """A JSON array as the tuple ``kind`` (``tuple[X, ...]`` or fixed length)."""
    members = typing.get_args(kind)
    if not isinstance(value, (list, tuple)):
        raise _Mistyped(_expected(kind), value)
    if len(members) == 2 and members[1] is Ellipsis:
        members = (members[0],) * len(value)
    elif len(value) != len(members):
        raise _Mistyped(_expected(kind), value)
    return tuple(
        _inside(f"[{i}]", lambda v=v, m=m: _as_kind(v, m))
        for i, (v, m) in enumerate(zip(value, members))
    )


def _as_scalar(value: Any, kind: Any) -> Any:
    """``value`` as ``bool``, ``int``, ``float``, ``str`` or ``None`` (exact JSON types)."""
    if kind is float and type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise _Mistyped("a number within a float's range", value) from None
    if kind is str and type(value) is str and len(value) > STRING_MAX:
        raise _Mistyped(f"a string of at most {STRING_MAX} characters, not {len(value)}", value)
    if kind is type(None) or kind is None:
        if value is None:
            return None
        raise _Mistyped("null", value)
    if isinstance(kind, type) and kind in _JSON_NAMES:
        if type(value) is kind:
            return value
        raise _Mistyped(_expected(kind), value)
    if isinstance(kind, type) and not isinstance(value, kind):
        raise _Mistyped(_expected(kind), value)
    return value


def _expected(kind: Any) -> str:
    """What ``kind`` reads as in a JSON file: ``an integer``, ``an array of strings``, ...

    Example:
        >>> _expected(tuple[str, ...]), _expected(int | None)
        ('an array of strings', 'an integer or null')
        >>> _expected(typing.Literal["grpo", "dapo"])
        'one of "grpo", "dapo"'
    """
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        return _expected(members[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(member) for member in members)
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(choice) for choice in members)
    if origin is tuple:
        if len(members) == 2 and members[1] is Ellipsis:
            each = _expected(members[0])
            each = {"a string": "strings", "an integer": "integers", "a number": "numbers"}.get(
                each, f"({each})"
            )
            return f"an array of {each}"
        return f"an array of {len(members)} values ({', '.join(map(_expected, members))})"
    if origin is dict:
        return "an object"
    if kind is None:
        return "null"
    return _JSON_NAMES.get(kind, getattr(kind, "__name__", str(kind)))
