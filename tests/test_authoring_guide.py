"""docs/authoring.md runs: its Python blocks in order, its ``textgym`` lines through the CLI.

The guide's ``python`` blocks are executed in order, in one fresh module namespace registered
as ``my_envs`` (the module the guide tells the reader to save), so ``gymnasium.make(
"my_envs:mytasks/Antonym-v0")`` and the ``entry_point="my_envs:..."`` strings resolve to the
guide's own classes. Running code with ``exec`` is deliberate here: the code is this project's
own documentation, checked in beside this test, not model output or any other untrusted text.

Of the ``bash`` blocks, the ``textgym eval``, ``collect``, ``list`` and ``check`` lines are
run through :func:`textgym.cli.main` (a leading ``PYTHONPATH=.`` is honoured by putting the
working folder on ``sys.path``); ``pip``, ``textgym play`` (it waits for a person) and
``textgym train`` (it trains a model) are not. They run in a temporary folder that holds the
guide's ``my_envs.py`` (its blocks that start ``# my_envs.py``) and an installed-package record
whose ``textgym.envs`` entry points come from the guide's ``pyproject.toml`` snippet, and each
line starts with neither guide id registered nor ``my_envs`` imported, so each line loads the
env the way it says: through the ``module:`` prefix or through the entry point.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from textgym.builder import ENTRY_POINT_GROUP
from textgym.cli import main
from textgym.core import TextEnv

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "authoring.md"
MODULE = "my_envs"
IDS = ("mytasks/Antonym-v0", "mytasks/GuessNumber-v0")
RUN = ("eval", "collect", "list", "check")  # the subcommands whose lines run
SKIP = ("play", "train")  # need a person or a model
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", flags=re.M | re.S)


def blocks(language: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of each fenced block of ``language``, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(2)) + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == language
    ]


def forget_guide_envs() -> None:
    """Unregister the guide's ids and drop ``my_envs``, so the next load starts afresh."""
    for env_id in IDS:
        gym.registry.pop(env_id, None)
    sys.modules.pop(MODULE, None)


@pytest.fixture(scope="module")
def guide() -> Iterator[types.ModuleType]:
    """The guide's Python blocks, run in order in one module namespace named ``my_envs``."""
    forget_guide_envs()
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    python = blocks("python")
    assert len(python) >= 5, f"expected the guide's five Python examples, found {len(python)}"
    for line, code in python:
        # Blank lines in front keep the guide's own line numbers in a traceback. The code is
        # our own documentation (see the module docstring), not untrusted text.
        exec(compile("\n" * (line - 1) + code, str(GUIDE), "exec"), module.__dict__)  # noqa: S102
    yield module
    forget_guide_envs()


def test_the_examples_register_textenv_ids(guide):
    for env_id, cls in zip(IDS, ("AntonymEnv", "GuessNumberEnv")):
        spec = gym.spec(env_id)
        assert spec.entry_point == f"{MODULE}:{cls}"
        assert isinstance(gym.make(env_id).unwrapped, getattr(guide, cls))
        assert issubclass(getattr(guide, cls), TextEnv)
    assert gym.spec("mytasks/GuessNumber-v0").max_episode_steps == 12


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(guide, env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


def test_the_single_turn_task_is_about_fifteen_lines(guide):
    code = blocks("python")[0][1]
    body = code.split("class AntonymEnv", 1)[1].split("\ngym.register", 1)[0]
    lines = [line for line in body.splitlines() if line.strip() and '"""' not in line]
    assert len(lines) <= 18, f"the guide's single-turn class has {len(lines)} lines"


def test_the_guide_check_catches_a_broken_env(guide):
    """The checker the guide calls (``textgym.env_checker.check_text_env``) can fail: here for
    reward components off the reward."""

    class Broken(guide.AntonymEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward + 1.0, terminated, truncated, info

    gym.register(id="mytasks/Broken-v0", entry_point=Broken)
    try:
        with pytest.raises(AssertionError, match="do not sum to the reward"):
            guide.check_text_env("mytasks/Broken-v0", ["<answer>cold</answer>"])
    finally:
        gym.registry.pop("mytasks/Broken-v0", None)


def entry_points() -> dict[str, str]:
    """The ``textgym.envs`` table of the guide's ``pyproject.toml`` snippet."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    (_, snippet), *_ = blocks("toml")
    project = tomllib.loads(snippet)["project"]
    return project["entry-points"][ENTRY_POINT_GROUP]


def command_lines() -> list[tuple[list[str], bool]]:
    """``(argv after textgym, PYTHONPATH=. given)`` of every guide line that runs."""
    lines = []
    for _, code in blocks("bash"):
        for line in code.splitlines():
            words = shlex.split(line)
            env = [w for w in words if re.fullmatch(r"[A-Z_]+=.*", w)]
            words = words[len(env) :]
            assert set(env) <= {"PYTHONPATH=."}, f"unexpected environment in {line!r}"
            if words[:1] != ["textgym"] or words[1] in SKIP:
                assert words[:1] in (["pip"], ["textgym"]), f"unexpected command {line!r}"
                continue
            assert words[1] in RUN, f"{words[1]!r} is neither run nor skipped: {line!r}"
            lines.append((words[1:], bool(env)))
    return lines


@pytest.fixture
def package_folder(guide, tmp_path, monkeypatch):
    """A folder with ``my_envs.py`` and an installed-package record of the guide's entry
    points, as the working folder; the guide's module and ids restored afterwards."""
    module_code = [code for _, code in blocks("python") if code.startswith(f"# {MODULE}.py")]
    assert len(module_code) == 2, "expected the single-turn and the multi-turn module blocks"
    (tmp_path / f"{MODULE}.py").write_text("\n\n".join(module_code), encoding="utf-8")
    record = tmp_path / "mytasks-0.1.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: mytasks\nVersion: 0.1.0\n")
    table = "".join(f"{name} = {value}\n" for name, value in entry_points().items())
    (record / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{table}")
    saved = {env_id: gym.registry[env_id] for env_id in IDS}
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=., or site-packages once installed
    yield tmp_path
    forget_guide_envs()
    sys.modules[MODULE] = guide  # the other tests' namespace and specs
    gym.registry.update(saved)


def test_the_command_lines_run(package_folder, capsys):
    assert entry_points() == {"mytasks": MODULE}  # the module registers its ids on import
    lines = command_lines()
    subcommands = [argv[0] for argv, _ in lines]
    assert subcommands.count("eval") >= 4 and "collect" in subcommands and "list" in subcommands
    for argv, pythonpath in lines:
        forget_guide_envs()  # each line loads the env itself
        module_form = argv[0] != "list" and ":" in argv[1]
        assert pythonpath == module_form, f"PYTHONPATH=. belongs to module: ids only: {argv}"
        capsys.readouterr()
        assert main(argv if argv[0] == "list" else [*argv, "--no-progress"]) == 0, argv
        out = capsys.readouterr().out
        if argv[0] == "list":
            assert all(env_id in out for env_id in IDS), out
        if "--output-dir" in argv:
            summary = json.loads(
                (Path(argv[argv.index("--output-dir") + 1]) / "summary.json").read_text()
            )
            components = summary["reward_components"]
            grade = "correct" if "correct" in components else "outcome"
            assert summary["policy"] == "gold" and components[grade] == 1.0, summary
            assert summary["invalid_action_rate"] == 0.0 and summary["episodes"] >= 4
    collected = (package_folder / "antonym_sft.jsonl").read_text().splitlines()
    assert len(collected) == 4 and json.loads(collected[0])["messages"]
