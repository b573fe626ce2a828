"""Your own env on the command line: a ``module:EnvName-v0`` id, an id registered through the
``textgym.envs`` entry point, and what is refused."""

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from textgym.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.fixture
def mypkg(monkeypatch):
    """``tests/fixtures`` on the path; the ids it registers removed afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    yield
    for env_id in ("Capital-v0", "mypkg/Capital-v0", "Atlas-v0"):
        gym.registry.pop(env_id, None)
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]  # the next test imports (and registers) afresh


def one_error_line(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("textgym: error: ")
    return err


def test_eval_of_a_module_colon_id_walks_its_tasks(mypkg, tmp_path, capsys):
    argv = ["eval", "mypkg.capital:Capital-v0", "--policy", "gold", "--no-progress"]
    assert main([*argv, "--output-dir", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_id"] == "mypkg.capital:Capital-v0"
    assert summary["episodes"] == 4 and summary["mean_return"] == 1.0
    assert summary["tasks"]["played"] == 4 and summary["tasks"]["pass@1"] == 1.0
    rows = (tmp_path / "per_task.jsonl").read_text().splitlines()
    assert [json.loads(r)["task_id"] for r in rows] == ["France", "Japan", "Kenya", "Peru"]
    assert "component correct" in capsys.readouterr().out


def test_collect_and_play_take_the_same_ids(mypkg, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sft.jsonl"
    argv = ["collect", "mypkg.capital:Capital-v0", "--policy", "gold", "--no-progress"]
    assert main([*argv, "--output", str(out), "--limit", "2"]) == 0
    assert len(out.read_text().splitlines()) == 2
    monkeypatch.setattr("builtins.input", lambda prompt="": "<answer>Paris</answer>")
    assert main(["play", "mypkg.capital:Capital-v0", "--seed", "0"]) == 0
    assert "What is the capital of" in capsys.readouterr().out


def test_an_entry_point_registers_its_ids(mypkg, tmp_path, monkeypatch, capsys):
    # An installed distribution declaring [textgym.envs] capital = mypkg.capital:register_envs
    info = tmp_path / "mypkg_envs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg-envs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[textgym.envs]\ncapital = mypkg.capital:register_envs\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mypkg/Capital-v0" not in gym.registry
    argv = ["eval", "mypkg/Capital-v0", "--policy", "gold", "--no-progress", "--limit", "1"]
    assert main(argv) == 0
    assert main(["list"]) == 0
    assert "mypkg/Capital-v0" in capsys.readouterr().out


def test_unknown_ids_and_modules_are_one_line(mypkg, capsys):
    err = one_error_line(capsys, ["eval", "mypkg/Nope-v0"])
    assert "unknown env id 'mypkg/Nope-v0'" in err and "'textgym.envs' entry point" in err
    err = one_error_line(capsys, ["eval", "nopkg.nomodule:Nope-v0"])
    assert "cannot import module 'nopkg.nomodule'" in err
    assert "check that the module is importable" in err and "PYTHONPATH" in err
    err = one_error_line(capsys, ["eval", "mypkg.capital:Nope-v0"])
    assert "unknown env id 'mypkg.capital:Nope-v0'" in err


def test_an_env_whose_actions_are_not_text_is_refused(capsys):
    err = one_error_line(capsys, ["eval", "CartPole-v1", "--policy", "hf"])
    assert "CartPole-v1 builds CartPoleEnv, whose spaces are not text" in err


def test_an_env_brings_its_own_expert_through_the_contract(mypkg, tmp_path, capsys):
    from mypkg.capital import CAPITALS

    # Nothing in textgym names "atlas": collect finds it through the env class alone.
    # (By name, --policy takes textgym's own experts; "expert" takes any env's.)
    for policy in ([], ["--policy", "expert"]):
        out = tmp_path / f"sft{len(policy)}.jsonl"
        argv = ["collect", "mypkg.capital:Atlas-v0", *policy, "--no-progress"]
        assert main([*argv, "--output", str(out)]) == 0
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["task_id"] for r in records] == ["France", "Japan", "Kenya", "Peru"]
        for r in records:
            assert r["messages"][-1]["content"] == f"<answer>{CAPITALS[r['task_id']]}</answer>"
    err = one_error_line(capsys, ["eval", "mypkg.capital:Atlas-v0", "--policy", "minimax"])
    assert "expert of textgym/TicTacToe-v0 only" in err and "--policy expert (its atlas)" in err
    err = one_error_line(capsys, ["eval", "mypkg.capital:Capital-v0", "--policy", "expert"])
    assert "declares no expert policy" in err


def test_the_checker_holds_an_expert_to_its_class(mypkg):
    from mypkg.capital import AtlasCapitalEnv, NamedOnlyEnv

    from textgym.env_checker import TextEnvCheckError, check_text_env

    check_text_env(AtlasCapitalEnv(), ["<answer>Paris</answer>", "Paris"])
    with pytest.raises(TextEnvCheckError, match="does not override make_expert"):
        check_text_env(NamedOnlyEnv(), ["<answer>Paris</answer>"])
