"""``--config FILE`` read and typed strictly (issue 52 item 4): only a regular file of bounded
size is read, every value must have its option's JSON type (no string-to-bool, float-to-int
or string-to-number coercion), each refusal is one ``textgym: error:`` line naming the option
with exit code 2 and no library warning, and an env id ``module:Env`` from the file imports
nothing unless the command line names it.

The hostile values are generated from each subcommand's own config types, so a new option is
covered when it is added.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import threading
import types
import typing
from typing import Annotated, Any

import pytest

from textgym.cli import SUBCOMMANDS, main
from textgym.cli.config_file import (
    CONFIG_MAX_BYTES,
    NOT_REPLAYED,
    STRING_MAX,
    check_replayed_env_ids,
)
from textgym.cli.usage import parse_config
from textgym.errors import UsageError

TTT = "textgym/TicTacToe-v0"


def _strip(kind: Any) -> tuple[Any, bool]:
    """``(kind without Annotated and None, whether None is allowed)``."""
    if typing.get_origin(kind) is Annotated:
        kind = typing.get_args(kind)[0]
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        (rest,) = [a for a in args if a is not type(None)]  # X | None: one X in every config
        return rest, True
    return kind, False


def hostile(kind: Any) -> list[Any]:
    """JSON values an option of type ``kind`` must refuse (each of another JSON type or shape)."""
    kind, optional = _strip(kind)
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        values = ["false", "true", "yes", "no", 0, 1, 0.0, [], {}]
    elif kind is int:
        values = [1.5, 2.0, -0.5, "0", "3", True, False, [1], {}]
    elif kind is float:
        values = ["x", "1e-5", "0.1", True, [0.1], {}]
    elif kind is str:
        values = [5, 1.5, True, ["a"], {}, "m" * (STRING_MAX + 1)]
    elif origin is typing.Literal:
        values = ["no-such-choice", 1, True, [members[0]], {}]
    elif origin is tuple:
        values = [{}, 3, True, {"a": 1}]
        if len(members) == 2 and members[1] is Ellipsis:
            values += [members[0] is str and [1] or ["x"], [{}], [[]], "a b"]
        else:
            values += [[0] * (len(members) + 1), [0] * (len(members) - 1), [0, "x"][: len(members)]]
    elif origin is dict:
        values = [[], "x", 1, True]
        if members and members[1] is not Any:
            values += [{"k": [1]}, {"k": None}, {"k": {}}]
    else:
        raise AssertionError(f"no hostile values for {kind!r}: add them")
    return values if optional else [*values, None]


def _subcommand_fields():
    """``(subcommand, field, kind)`` for every option a --config file may set."""
    for name, sub in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(f"textgym.cli.{sub.module}")
        except ImportError:  # an extra not installed
            continue
        hints = typing.get_type_hints(module.Config, include_extras=True)
        for f in dataclasses.fields(module.Config):
            if f.init and f.name not in NOT_REPLAYED and hints[f.name] is not Any:
                kind = hints[f.name]
                if typing.get_origin(_strip(kind)[0]) is dict and not typing.get_args(kind):
                    continue
                yield name, f.name, kind


CASES = [
    pytest.param(sub, field, value, id=f"{sub}-{field}-{json.dumps(value)[:20]}")
    for sub, field, kind in _subcommand_fields()
    for value in hostile(kind)
]


def run_main(argv: list[str], timeout_s: float = 30.0) -> int:
    """``main(argv)`` in a daemon thread: its exit code, failing the test instead of hanging."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["code"] = main(argv)
        except SystemExit as exc:
            result["code"] = exc.code
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"textgym {' '.join(argv)} still running after {timeout_s} s"
    if "error" in result:
        raise result["error"]
    return result["code"]


def one_line(capsys, code: int, *words: str) -> str:
    """Assert exit code 2, nothing on stdout, and one ``textgym: error:`` line on stderr (no
    warning) holding each of ``words``; return it."""
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    assert "warn" not in err.lower()
    assert len(lines[0]) < 700, f"{len(lines[0])} characters"
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("sub", "field", "value"), CASES)
def test_a_value_of_the_wrong_type_is_one_line_naming_the_option(
    tmp_path, capsys, sub, field, value
):
    file = tmp_path / "c.json"
    file.write_text(json.dumps({field: value}))
    code = run_main([sub, "--config", str(file)])
    line = one_line(capsys, code, f"sets {field}", "expected ")
    assert str(file) in line


def test_every_subcommand_and_type_is_covered():
    subs = {sub for sub, _, _ in _subcommand_fields()}
    assert {"eval", "collect", "train", "sft", "report"} <= subs
    assert len(CASES) > 500


@pytest.mark.parametrize(
    ("config", "words"),
    [  # the audit's cases, as the issue names them
        ({"dry_run": "false"}, ["dry_run", '"false"', "a string", "expected a boolean"]),
        ({"tensorboard": "false"}, ["tensorboard", "expected a boolean"]),
        ({"progress": "yes"}, ["progress", '"yes"']),
        ({"wrappers": {}}, ["wrappers", "{}", "an array of strings"]),
        ({"learning_rate": "x"}, ["learning_rate", '"x"', "expected a number"]),
        ({"learning_rate": "1e-5"}, ["learning_rate", '"1e-5"']),
        ({"learning_rate": None}, ["learning_rate", "null", "expected a number"]),
        ({"seed": "0"}, ["seed", '"0"', "expected an integer"]),
        ({"seed": 1.5}, ["seed", "1.5", "expected an integer"]),
        ({"group_size": 2.0}, ["group_size", "2.0", "expected an integer"]),
        ({"lora_rank": 4.5}, ["lora_rank", "4.5"]),
        ({"model": "m" * 10_000}, ["model", f"at most {STRING_MAX} characters, not 10000"]),
        ({"wrappers": ["format_reward", 3]}, ["wrappers[1]", "expected a string"]),
        ({"env_kwargs": [1]}, ["env_kwargs", "[1]"]),  # any JSON value inside the object
        ({"opponent_random_move_prob": [0, "x"]}, ["opponent_random_move_prob[1]", '"x"']),
        ({"loss_type": "nope"}, ["loss_type", '"nope"', 'one of "grpo"']),
    ],
)
def test_the_audits_cases_are_one_line(tmp_path, capsys, config, words):
    file = tmp_path / "c.json"
    file.write_text(json.dumps(config))
    one_line(capsys, run_main(["train", TTT, "--config", str(file)]), *words)


def test_a_run_json_is_typed_as_strictly(tmp_path, capsys):
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"command": ["textgym", "train"], "config": {"dry_run": "false"}}))
    one_line(capsys, run_main(["train", TTT, "--config", str(file)]), "dry_run", "boolean")


def test_well_typed_values_replay_as_the_command_line_gives_them(tmp_path, capsys):
    """Integers for numbers become floats, arrays tuples; tyro warns of nothing."""
    from textgym.cli import train

    file = tmp_path / "c.json"
    values = {
        "learning_rate": 1,
        "wrappers": ["format_reward"],
        "opponent_random_move_prob": [0, 0.5],
        "dry_run": True,
        "seed": 3,
        "env_kwargs": {"random_move_prob": 0},
        "report_to": ["none"],
    }
    file.write_text(json.dumps(values))
    replayed = parse_config(train.Config, [TTT, "--config", str(file)], "textgym train", "")
    given = parse_config(
        train.Config,
        [TTT, "--learning-rate", "1", "--wrappers", "format_reward"]
        + ["--opponent-random-move-prob", "0", "0.5", "--dry-run", "--seed", "3"]
        + ["--env-kwargs", '{"random_move_prob": 0}', "--report-to", "none"],
        "textgym train",
        "",
    )
    assert replayed == given
    assert type(replayed.learning_rate) is float and replayed.wrappers == ("format_reward",)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "link_to_dev_zero", "directory", "large"])
def test_only_a_regular_file_of_bounded_size_is_read(tmp_path, capsys, kind):
    path = tmp_path / "c.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = "/dev/zero"
    elif kind == "link_to_dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:  # sparse: its size alone refuses it
        with open(path, "wb") as file:
            file.truncate(CONFIG_MAX_BYTES + 1)
    words = {
        "fifo": "a FIFO",
        "dev_zero": "a character device",
        "link_to_dev_zero": "a character device",
        "directory": "a directory",
        "large": f"more than a config file's {CONFIG_MAX_BYTES}",
    }[kind]
    code = run_main(["eval", TTT, "--config", str(path)], timeout_s=10)
    one_line(capsys, code, "--config", words, "not a regular file" if kind != "large" else "")


def test_a_file_of_exactly_the_limit_is_read(tmp_path):
    from textgym.cli.config_file import read_config_file

    path = tmp_path / "c.json"
    text = json.dumps({"seed": 1})
    path.write_text(text + " " * (CONFIG_MAX_BYTES - len(text)))
    assert read_config_file(str(path)) == {"seed": 1}


EVIL = "import pathlib\npathlib.Path('imported.txt').write_text('ran')\n"


@pytest.mark.parametrize(
    ("sub", "config", "flag"),
    [
        ("eval", {"env_id": "evil_mod:Evil-v0"}, "ENV_ID evil_mod:Evil-v0"),
        ("train", {"env_id": "evil_mod:Evil-v0"}, "ENV_ID evil_mod:Evil-v0"),
        ("sft", {"data": "d.jsonl", "eval_env": "evil_mod:Evil-v0"}, "--eval-env"),
    ],
)
def test_a_module_env_id_from_the_file_imports_nothing(
    tmp_path, capsys, monkeypatch, sub, config, flag
):
    (tmp_path / "evil_mod.py").write_text(EVIL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m textgym` puts the current folder
    (tmp_path / "c.json").write_text(json.dumps(config))
    one_line(capsys, run_main([sub, "--config", "c.json"]), "evil_mod", flag, "command line")
    assert not (tmp_path / "imported.txt").exists() and "evil_mod" not in sys.modules


def test_an_env_id_on_the_command_line_wins_or_is_named_there():
    replayed = {"env_id": "mod:Env-v0", "eval_env": "mod:Env-v0"}
    check_replayed_env_ids(replayed, {"env_id": TTT, "eval_env": None}, [TTT])
    check_replayed_env_ids(replayed, dict(replayed), ["mod:Env-v0", "--eval-env=mod:Env-v0"])
    check_replayed_env_ids(replayed, dict(replayed), ["mod:Env-v0", "--eval-env", "mod:Env-v0"])
    check_replayed_env_ids({"env_id": TTT}, {"env_id": TTT}, [])  # a registered id: no import
    with pytest.raises(UsageError, match="eval_env"):
        check_replayed_env_ids(replayed, dict(replayed), ["mod:Env-v0"])


@pytest.mark.subprocess
def test_python_m_textgym_replays_no_module_from_the_current_folder(tmp_path):
    (tmp_path / "evil_mod.py").write_text(EVIL)
    (tmp_path / "c.json").write_text(json.dumps({"env_id": "evil_mod:Evil-v0"}))
    done = subprocess.run(
        [sys.executable, "-m", "textgym", "eval", "--config", "c.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "evil_mod" in done.stderr
    assert not (tmp_path / "imported.txt").exists()
