"""Recipes: a study as a file of named stages, each a ``textgym`` subcommand with its options,
run in order by ``textgym run`` (:mod:`textgym.cli.run`).

A recipe is a TOML file::

    description = "SFT on expert games, then GRPO, evaluated against both opponents"

    [[stage]]
    name = "expert-data"
    command = "collect"                  # collect, sft, train, eval, report, check, export, compare
    env_id = "textgym/TicTacToe-v0"      # every other key is an option of the subcommand
    episodes = 400
    output = "expert.jsonl"              # output and output_dir are relative to the work dir

    [[stage]]
    name = "sft"
    command = "sft"
    data = "{expert-data.output}"        # a value of an earlier stage, by name
    output_dir = "sft"

    [smoke]                              # what --smoke changes: an option in every stage that
    model = "tiny"                       # sets it (to a value, not a reference), or a table of
    sft = { epochs = 1 }                 # one stage's options

Option names are the subcommand's own (``textgym sft --help``), with ``_`` for ``-``; values
are typed strictly as in ``--config`` files (:mod:`textgym.cli.config_file`). In any string,
``{work_dir}``, ``{recipe_dir}`` (the folder of the recipe file) and ``{STAGE.OPTION}`` (a
value of that stage, its ``output``/``output_dir`` as an absolute path) are replaced. A stage
``command = "script"`` runs ``python SCRIPT ARGS`` (``script`` relative to the recipe's folder,
``args`` a list of strings) in its ``output_dir`` (else the work dir), for the data
preparation a study needs beyond the subcommands; a relative path in ``args`` is read from that
folder, so name inputs through ``{recipe_dir}`` or ``{work_dir}``.

A stage that finished writes ``WORK/.textgym-run/STAGE.json`` (its command, resolved options,
seconds) and is skipped on the next run with the same options; with other options it is
refused in one line until that file is removed. A ``train`` or ``sft`` stage that stopped
part-way resumes from its checkpoint (``--resume``); any other stage whose output exists
unfinished is run again over it (``--overwrite``, refused by the subcommand for a folder that
holds no textgym run).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from textgym.errors import SetupError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "OUTPUT_OPTIONS",
    "RECIPE_COMMANDS",
    "Recipe",
    "RecipeError",
    "Stage",
    "load_recipe",
    "script_argv",
    "stage_argv",
]

#: The subcommands a recipe stage may run, and ``script``.
RECIPE_COMMANDS = ("collect", "sft", "train", "eval", "report", "check", "export", "compare")
#: Options holding a stage's output, relative to the work dir.
OUTPUT_OPTIONS = ("output", "output_dir")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_REFERENCE = re.compile(r"\{([^{}]*)\}")
_STAGE_KEYS = ("name", "command")
_SCRIPT_KEYS = frozenset({"script", "args", *OUTPUT_OPTIONS})


class RecipeError(SetupError):
    """A recipe that cannot be run: unreadable TOML, an unknown command, option or stage
    reference, a stage that finished with other options. Exit status 2."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its name, its subcommand (or ``"script"``) and its resolved options."""

    name: str
    command: str
    options: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A loaded recipe: its file, description and stages with every reference resolved."""

    path: Path
    description: str
    stages: tuple[Stage, ...]

    def stage(self, name: str) -> Stage:
        """The stage named ``name``.

        Raises:
            RecipeError: no stage has that name.
        """
        for stage in self.stages:
            if stage.name == name:
                return stage
        names = ", ".join(s.name for s in self.stages)
        raise RecipeError(f"{self.path.name} has no stage {name!r}; its stages: {names}")


def _option_names(command: str) -> frozenset[str]:
    """The option names of ``textgym COMMAND`` (the fields of its config dataclass)."""
    from textgym.cli import SUBCOMMANDS

    module = importlib.import_module(f"textgym.cli.{SUBCOMMANDS[command].module}")
    return frozenset(f.name for f in dataclasses.fields(module.Config))


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise RecipeError(f"cannot read recipe {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"recipe {path} is not valid TOML: {exc}") from None


def _checked_stages(path: Path, raw: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, command, options)`` per stage, names, commands and option names checked."""
    unknown = sorted(set(raw) - {"description", "stage", "smoke"})
    if unknown:
        raise RecipeError(
            f"{path.name}: unknown top-level keys {unknown}; expected description, stage, smoke"
        )
    stages = raw.get("stage")
    if not isinstance(stages, list) or not stages:
        raise RecipeError(f"{path.name}: expected one or more [[stage]] tables")
    out, seen = [], set()
    for index, table in enumerate(stages):
        name, command = table.get("name"), table.get("command")
        where = f"{path.name}: stage {index + 1}"
        if not isinstance(name, str) or not _NAME.match(name) or name in seen:
            raise RecipeError(
                f"{where}: expected a unique name of lower-case letters, digits, - and _, "
                f"got {name!r}"
            )
        seen.add(name)
        if command not in (*RECIPE_COMMANDS, "script"):
            raise RecipeError(
                f"{where} ({name}): command {command!r} is not one of "
                f"{', '.join(RECIPE_COMMANDS)} or script"
            )
        options = {k: v for k, v in table.items() if k not in _STAGE_KEYS}
        allowed = _SCRIPT_KEYS if command == "script" else _option_names(command)
        bad = sorted(set(options) - allowed)
        if bad:
            raise RecipeError(f"{where} ({name}): {bad} not options of textgym {command}")
        if command == "script" and not isinstance(options.get("script"), str):
            raise RecipeError(f"{where} ({name}): a script stage needs script = 'FILE.py'")
        out.append((name, command, options))
    return out


def _apply_smoke(
    path: Path, stages: list[tuple[str, str, dict[str, Any]]], smoke: Mapping[str, Any]
) -> None:
    """Merge the ``[smoke]`` table into the stages' options (in place)."""
    names = {name for name, _, _ in stages}
    for key, value in smoke.items():
        if key in names:
            if not isinstance(value, Mapping):
                raise RecipeError(
                    f"{path.name}: smoke.{key} must be a table of that stage's options"
                )
            for name, command, options in stages:
                if name == key:
                    allowed = _SCRIPT_KEYS if command == "script" else _option_names(command)
                    bad = sorted(set(value) - allowed)
                    if bad:
                        raise RecipeError(f"{path.name}: smoke.{key} sets {bad}, not options of it")
                    options.update(value)
            continue
        hits = [
            options
            for _, command, options in stages
            if key in options and not (isinstance(options[key], str) and "{" in options[key])
        ]
        if not hits:
            raise RecipeError(
                f"{path.name}: smoke.{key} is neither a stage nor an option a stage sets"
            )
        for options in hits:
            options[key] = value


def _substitute(value: Any, known: Mapping[str, Any], where: str) -> Any:
    """``value`` with every ``{KEY}`` of its strings replaced from ``known``."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in known:
                raise RecipeError(
                    f"{where}: {{{key}}} names no earlier stage's option "
                    "(use {STAGE.OPTION}, {work_dir} or {recipe_dir})"
                )
            return str(known[key])

        return _REFERENCE.sub(one, value)
    if isinstance(value, list):
        return [_substitute(v, known, where) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, known, where) for k, v in value.items()}
    return value


def _apply_overrides(
    path: Path, stages: list[tuple[str, str, dict[str, Any]]], overrides: Sequence[str]
) -> None:
    """Apply ``STAGE.OPTION=VALUE`` overrides (VALUE read as JSON, else as a string)."""
    table: dict[str, dict[str, Any]] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        stage, dot, option = key.partition(".")
        if not (sep and dot and stage and option):
            raise RecipeError(f"--set {item!r}: expected STAGE.OPTION=VALUE")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        table.setdefault(stage, {})[option] = value
    names = {name for name, _, _ in stages}
    for stage in table:
        if stage not in names:
            raise RecipeError(f"--set: {path.name} has no stage {stage!r}")
    _apply_smoke(path, stages, table)


def load_recipe(
    path: str | Path,
    work_dir: str | Path,
    *,
    smoke: bool = False,
    overrides: Sequence[str] = (),
) -> Recipe:
    """Read, check and resolve a recipe for a work dir.

    Args:
        path: The TOML file.
        work_dir: Where the stages' outputs go (need not exist yet).
        smoke: Apply the recipe's ``[smoke]`` table.
        overrides: ``STAGE.OPTION=VALUE`` items applied last (``textgym run --set``).

    Raises:
        RecipeError: one line naming the file, the stage and what is wrong.
    """
    path = Path(path)
    work = Path(work_dir).absolute()
    raw = _read(path)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise RecipeError(f"{path.name}: description must be a string")
    stages = _checked_stages(path, raw)
    if smoke:
        table = raw.get("smoke", {})
        if not isinstance(table, Mapping):
            raise RecipeError(f"{path.name}: [smoke] must be a table")
        _apply_smoke(path, stages, table)
    _apply_overrides(path, stages, overrides)
    known: dict[str, Any] = {"work_dir": work, "recipe_dir": path.absolute().parent}
    resolved = []
    for name, command, options in stages:
        where = f"{path.name}: stage {name}"
        for key in OUTPUT_OPTIONS:
            if isinstance(options.get(key), str):
                options[key] = str(work / _substitute(options[key], known, where))
                known[f"{name}.{key}"] = options[key]
        options = {k: _substitute(v, known, where) for k, v in options.items()}
        known.update({f"{name}.{k}": v for k, v in options.items() if not isinstance(v, dict)})
        resolved.append(Stage(name, command, options))
    return Recipe(path, description, tuple(resolved))


def stage_argv(stage: Stage, config_file: Path) -> list[str]:
    """The command line a subcommand stage runs: ``[command, --config FILE]``."""
    return [stage.command, "--config", str(config_file)]


def script_argv(recipe: Recipe, stage: Stage) -> list[str]:
    """``python SCRIPT ARGS`` of a script stage (the script beside the recipe).

    Raises:
        RecipeError: ``args`` not a list of strings, or ``script`` not an existing ``.py``
            file in the recipe's folder (or a folder below it).
    """
    args: Sequence[Any] = stage.options.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise RecipeError(f"{recipe.path.name}: stage {stage.name}: args must be a list of strings")
    folder = recipe.path.absolute().parent
    script = (folder / stage.options["script"]).resolve()
    if script.suffix != ".py" or not script.is_relative_to(folder.resolve()):
        raise RecipeError(
            f"{recipe.path.name}: stage {stage.name}: script must be a .py file in the recipe's "
            f"folder {folder}, got {stage.options['script']!r}"
        )
    if not script.is_file():
        raise RecipeError(f"{recipe.path.name}: stage {stage.name}: no script {script}")
    return [sys.executable, str(script), *map(str, args)]
