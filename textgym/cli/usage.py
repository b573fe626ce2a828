"""How every ``textgym`` subcommand is used, and how a bad use is reported: the command-line
grammar (a config dataclass per subcommand, parsed with ``tyro``) and the one-line usage error.

The grammar: each field of a subcommand's config dataclass is an option ``--field-name``, with
the field's docstring (reST markup removed) as its help and its default shown; booleans are
``--flag/--no-flag``; sequences take space-separated values (``--wrappers a b``); a field named
``env_id`` is the first positional argument; a field named ``env_kwargs`` (or ending in it, as
``eval_env_kwargs``) is read as a JSON
object (``--env-kwargs '{"data_path": "x.jsonl"}'``). The config's own validation
(``__post_init__`` raising ``ValueError``) and every parse error become one
``textgym: error:`` line and exit code 2.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import inspect
import io
import json
import re
import sys
import textwrap
import types
import typing
import warnings
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn

from textgym.checks import one_line
from textgym.errors import UsageError
from textgym.wrappers import REWARD_WRAPPERS

__all__ = [
    "INT_LIMIT",
    "fail",
    "parse_config",
    "parse_env_kwargs",
    "plain_text",
    "script_config",
]


def fail(message: str) -> NoReturn:
    """Print ``textgym: error: message`` (one line) and exit with code 2."""
    print(f"textgym: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(2)


# ----------------------------------------------------------------------------- the grammar


_ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def plain_text(text: str | None) -> str:
    """A docstring as plain one-paragraph help text: reST roles and literals unwrapped.

    ``:func:`~textgym.wrappers.OpponentSkill``` becomes ``OpponentSkill``, a ``literal``
    loses its backquotes, and the whitespace is collapsed.
    """
    if not text:
        return ""
    text = _ROLE.sub(
        lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1), text
    )
    text = text.replace("``", "")
    return " ".join(text.split())


def _field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass: the string literal under each annotated field,
    the most derived class first (PEP 257's attribute docstrings, as ``tyro`` reads them)."""
    docs: dict[str, str] = {}
    for klass in cls.__mro__:
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # built at run time: no source
            continue
        (node,) = ast.parse(source).body
        assert isinstance(node, ast.ClassDef)
        for stmt, after in zip(node.body, node.body[1:]):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs.setdefault(stmt.target.id, after.value.value)
    return docs


def _cli_view(config_class: type, description: str, replayed: dict[str, Any] | None = None) -> type:
    """A dataclass that ``tyro`` parses into the fields of ``config_class``, without running its
    validation (``tyro`` would print a validation error as a multi-line box; :func:`parse_config`
    builds the config itself and reports its ``ValueError`` in one line). ``replayed`` (the
    values of a ``--config`` file) replace the fields' defaults."""
    import tyro

    replayed = replayed or {}

    hints = typing.get_type_hints(config_class, include_extras=True)
    docs = _field_docs(config_class)
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(config_class):
        if not f.init:
            continue
        kind: Any = hints[f.name]
        help_text = plain_text(docs.get(f.name)) or f.name.replace("_", " ")
        if f.name == "wrappers":  # the names from the one table, not a hand-kept list
            help_text += " One of: " + ", ".join(REWARD_WRAPPERS) + "."
        arg: dict[str, Any] = {"help": help_text}
        if f.default is not dataclasses.MISSING:
            default = dataclasses.field(default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = dataclasses.field(default_factory=f.default_factory)
        else:
            default = dataclasses.field()
        if f.name in replayed:  # typed strictly by config_file.take_config_file
            default = dataclasses.field(default_factory=lambda v=replayed[f.name]: copy.deepcopy(v))
        if f.name == "env_id":  # the first positional argument of every subcommand with an env
            kind, arg["metavar"] = tyro.conf.Positional[str], "ENV_ID"
        elif f.name == "runs":  # compare's run directories
            arg["metavar"] = "RUN"
        elif f.name.endswith("env_kwargs"):  # JSON everywhere, so list and nested values work
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else {}
            kind, arg["metavar"] = str, "JSON"
            default = dataclasses.field(default=json.dumps(replayed.get(f.name, value)))
        elif (metavar := _optional_metavar(f.name, kind)) is not None:
            arg["metavar"] = metavar  # tyro's own reads {None}|INT
        fields.append((f.name, Annotated[kind, tyro.conf.arg(**arg)], default))
    return dataclasses.make_dataclass(
        config_class.__name__,
        fields,
        kw_only=True,
        namespace={"__doc__": description, "__module__": config_class.__module__},
    )


_METAVARS = {int: "INT", float: "FLOAT", str: "STR"}


def _optional_metavar(name: str, kind: Any) -> str | None:
    """The metavar of an optional option (``X | None``) as the value it takes, or ``None`` for
    any other type (tyro's own metavar then).

    tyro writes the ``None`` member into the metavar (``{None}|INT``, ``{None}|{[STR [STR
    ...]]}``); the help text already says what leaving the option out means, and its default
    shows ``None``. Directories read ``DIR``.

    Example:
        >>> _optional_metavar("limit", int | None), _optional_metavar("output_dir", str | None)
        ('INT', 'DIR')
        >>> _optional_metavar("task_ids", tuple[str, ...] | None)
        'STR [STR ...]'
        >>> _optional_metavar("tool_format", typing.Literal["native", "text"] | None)
        '{native,text}'
        >>> _optional_metavar("seed", int) is None
        True
    """
    inner = _strip_none(kind)
    if inner is kind:
        return None
    if inner is str and (name.endswith("_dir") or name == "plots"):
        return "DIR"
    if inner in _METAVARS:
        return _METAVARS[inner]
    if typing.get_origin(inner) is typing.Literal:
        return "{" + ",".join(str(v) for v in typing.get_args(inner)) + "}"
    if typing.get_origin(inner) is tuple:
        members = typing.get_args(inner)
        if len(members) == 2 and members[1] is Ellipsis and members[0] in _METAVARS:
            each = _METAVARS[members[0]]
            return f"{each} [{each} ...]"
        if members and all(m in _METAVARS for m in members):
            return " ".join(_METAVARS[m] for m in members)
    return None


def parse_config(config_class: type, argv: Sequence[str], prog: str, description: str) -> Any:
    """Parse ``argv`` into an instance of the dataclass ``config_class``.

    ``--help`` prints the options and exits 0.

    Raises:
        UsageError: an unknown option, a value of the wrong type, a missing required option,
            ``--env-kwargs`` that is not a JSON object, an integer beyond 64 bits
            (:data:`INT_LIMIT`), the config's own validation error (a ``ValueError`` from
            its ``__post_init__``), or a bad ``--config`` file
            (:func:`textgym.cli.config_file.take_config_file`); one line each.
    """
    import tyro

    from textgym.cli.config_file import check_replayed_env_ids, take_config_file

    argv, replayed = take_config_file(config_class, argv, prog)
    if replayed:
        description += "\n\nDefaults replayed from --config."
    view = _cli_view(config_class, description, replayed)
    # tyro's own error text is a box meant for a terminal; with its console output off it only
    # exits, and the one line comes from reading argv against the grammar (_parse_error).
    # Some of tyro's errors print their box whatever console_outputs says: stderr is held
    # back and dropped on an error, and passed on otherwise. tyro's warnings (a default not
    # of its field's type) are about this view, whose replayed defaults are typed already.
    helping = any(arg in ("-h", "--help") for arg in argv)
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module="tyro")
            parsed = tyro.cli(view, args=list(argv), prog=prog, console_outputs=helping)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise UsageError(_parse_error(view, argv, prog)) from None
        raise
    sys.stderr.write(held.getvalue())
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(view)}
    check_replayed_env_ids(replayed, values, argv)  # before anything can import the module
    for name in [n for n in values if n.endswith("env_kwargs")]:
        values[name] = parse_env_kwargs(values[name], "--" + name.replace("_", "-"))
    try:
        config = config_class(**values)
    except ValueError as exc:  # __post_init__ validation: one line, exit 2
        raise UsageError(one_line(exc)) from None
    except OverflowError:
        _check_int_range(values)
        raise
    _check_int_range(values)  # after the config's own checks, which say more where they apply
    return config


def script_config(
    config_class: type, argv: Sequence[str] | None, prog: str, doc: str | None
) -> Any:
    """:func:`parse_config` for a script's ``main`` (the benchmarks, the recipes' scripts): the
    command line of ``textgym`` for a script of its own.

    Args:
        config_class: The script's options, a dataclass.
        argv: The arguments; ``None`` reads ``sys.argv[1:]``.
        prog: The script's name in the messages, e.g. ``"llm_decode.py"``.
        doc: The script's module docstring; its first paragraph is the ``--help`` description.

    Raises:
        SystemExit: code 2 after one ``textgym: error:`` line for a :class:`UsageError`;
            code 0 after ``--help``.
    """
    argv = sys.argv[1:] if argv is None else argv
    try:
        return parse_config(config_class, argv, prog, (doc or "").split("\n\n")[0])
    except UsageError as exc:
        fail(str(exc))


#: The largest magnitude of an integer option: a signed 64-bit integer, what torch, NumPy and
#: the seeds of Gymnasium hold (a larger one would overflow, or run for ever, after the checks).
INT_LIMIT = 2**63 - 1


def _check_int_range(values: dict[str, Any]) -> None:
    """Refuse an integer option (or a member of a list of them) beyond :data:`INT_LIMIT`.

    Raises:
        UsageError: naming the option, e.g. ``--epochs 99999999999999999999``.
    """
    for name, value in values.items():
        members = value if isinstance(value, tuple) else (value,)
        for member in members:
            if type(member) is int and not -INT_LIMIT - 1 <= member <= INT_LIMIT:
                raise UsageError(
                    f"--{name.replace('_', '-')} must be an integer that fits in 64 bits "
                    f"(at most {INT_LIMIT} in magnitude), got {member}; use a smaller value"
                )


def _parse_error(view: type, argv: Sequence[str], prog: str) -> str:
    """What is wrong with ``argv`` as the command line of ``view`` (a :func:`_cli_view`), in
    one line: unknown options or extra arguments (with the nearest known options), a value
    that does not read as its option's type, or a missing argument; else a pointer to
    ``--help``.

    Example:
        >>> @dataclasses.dataclass
        ... class View:
        ...     episodes: int = 1
        ...     seed: int | None = None
        >>> _parse_error(View, ["--episode", "3"], "textgym eval")
        'Unrecognized options: --episode 3 (perhaps you meant --episodes)'
        >>> _parse_error(View, ["--seed", "x"], "textgym eval")
        "--seed: expected INT, got 'x'"
    """
    import difflib

    import tyro

    options, positional_kinds, required = _grammar(view, tyro.conf.Positional)
    positionals = list(positional_kinds)  # those not given yet, in order
    unknown: list[str] = []
    problems: list[str] = []
    given: set[str] = set()
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-") or _is_number(token):
            after = argv[i - 2] if i >= 2 else ""
            if not positionals and options.get(after) is bool:
                problems.append(f"{after} takes no value, got {token!r}")
            elif not positionals:
                unknown.append(token)
            elif typing.get_origin(positional_kinds[positionals[0]]) is not tuple:
                positionals.pop(0)
            else:  # a sequence takes the rest; it is given now
                required.discard(positionals[0])
            continue
        flag, has_value, inline = token.partition("=")
        if flag not in options:
            unknown.append(token)
            continue
        given.add(flag)
        kind = options[flag]
        values = [inline] if has_value else []
        if not has_value and kind is not bool:
            many = typing.get_origin(_strip_none(kind)) is tuple
            while i < len(argv) and (not argv[i].startswith("-") or _is_number(argv[i])):
                values.append(argv[i])
                i += 1
                if not many:
                    break
        problem = _value_problem(kind, values)
        if problem:
            problems.append(f"{flag}: {problem}")
    if unknown:
        near = difflib.get_close_matches(unknown[0].partition("=")[0], list(options), n=1)
        hint = f" (perhaps you meant {near[0]})" if near else ""
        return "Unrecognized options: " + " ".join(unknown) + hint
    if problems:
        return problems[0]
    missing = [name for name in required if name not in given and name.startswith("--")]
    missing += [name.upper() for name in positionals if name in required]
    if missing:
        return f"Missing from {prog}: " + ", ".join(missing)
    return f"could not read the command line; see {prog} --help"


def _grammar(view: type, positional: Any) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """``view``'s options (``{--flag: type}``, ``--no-flag`` for booleans), its positional
    fields in order (``{name: type}``), and the names of the required ones (flags, or
    positional field names)."""
    hints = typing.get_type_hints(view, include_extras=True)
    options: dict[str, Any] = {}
    positionals: dict[str, Any] = {}
    required: set[str] = set()
    for f in dataclasses.fields(view):
        hint = hints[f.name]
        kind, marks = hint, ()
        if typing.get_origin(hint) is Annotated:
            kind, *marks = typing.get_args(hint)
        flag = "--" + f.name.replace("_", "-")
        name = f.name if positional in marks else flag
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.add(name)
        if positional in marks:
            positionals[f.name] = kind
            continue
        options[flag] = kind
        if kind is bool:
            options["--no-" + flag[2:]] = bool
    return options, positionals, required


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _strip_none(kind: Any) -> Any:
    """``X`` of ``X | None``; any other type unchanged."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else kind
    return kind


def _value_problem(kind: Any, values: list[str]) -> str | None:
    """Why ``values`` do not read as ``kind`` (``expected INT, got 'x'``), or ``None``."""
    optional = _strip_none(kind) is not kind
    kind = _strip_none(kind)
    if kind is bool:
        return f"takes no value, got {values[0]!r}" if values else None
    members: tuple[Any, ...] = (kind,)
    if typing.get_origin(kind) is tuple:
        members = typing.get_args(kind)
        if len(members) == 2 and members[1] is Ellipsis:
            members = members[:1]
        elif values and len(values) != len(members):
            return f"expected {len(members)} values, got {len(values)}"
    if not values:
        return "expected a value"
    for index, value in enumerate(values):
        if optional and value == "None":
            continue
        member = members[index % len(members)]
        if typing.get_origin(member) is typing.Literal:
            choices = [str(c) for c in typing.get_args(member)]
            if value not in choices:
                return f"expected one of {{{','.join(choices)}}}, got {value!r}"
        elif member in (int, float):
            try:
                member(value)
            except ValueError:
                return f"expected {_METAVARS[member]}, got {value!r}"
    return None


# ----------------------------------------------------------------------------- --env-kwargs


def parse_env_kwargs(text: str, flag: str = "--env-kwargs") -> dict[str, Any]:
    """The text of ``flag`` (``--env-kwargs``, ``--eval-env-kwargs``) as a dict.

    Raises:
        UsageError: not JSON, nested too deeply to read, or not a JSON object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} is not valid JSON ({exc.msg} at char {exc.pos}): {text!r}"
        ) from None
    except RecursionError:
        raise UsageError(
            f"{flag} is nested too deeply to read ({len(text)} characters); "
            "expected a JSON object of the env's keyword arguments"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object, got {type(value).__name__}: {text!r}")
    return value
