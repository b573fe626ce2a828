"""``textgym run RECIPE.toml``: stages in order, references resolved, finished stages skipped,
a stage run with other options refused, trainers resumed, bad recipes one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.recipes import RecipeError, load_recipe

COLLECT_EVAL = """
description = "collect expert games, then evaluate a random player"

[[stage]]
name = "expert"
command = "collect"
env_id = "textgym/TicTacToe-v0"
episodes = 6
output = "data/expert.jsonl"

[[stage]]
name = "eval-random"
command = "eval"
env_id = "textgym/TicTacToe-v0"
policy = "random"
episodes = 5
seed = 3
output_dir = "eval/{expert.episodes}"

[smoke]
episodes = 2
"""


def _recipe(tmp_path: Path, text: str = COLLECT_EVAL) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(textwrap.dedent(text))
    return path


def _one_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), lines
    return lines[0]


def test_references_and_outputs_resolve_against_the_work_dir(tmp_path):
    recipe = load_recipe(_recipe(tmp_path), tmp_path / "work")
    expert, evaluation = recipe.stages
    assert expert.options["output"] == str(tmp_path / "work" / "data" / "expert.jsonl")
    assert evaluation.options["output_dir"] == str(tmp_path / "work" / "eval" / "6")
    smoke = load_recipe(_recipe(tmp_path), tmp_path / "work", smoke=True)
    assert [s.options["episodes"] for s in smoke.stages] == [2, 2]


def test_a_run_plays_every_stage_then_skips_them_and_tabulates(tmp_path, capsys):
    recipe, work = _recipe(tmp_path), tmp_path / "work"
    assert main(["run", str(recipe), "--work-dir", str(work)]) == 0
    out = capsys.readouterr().out
    assert len((work / "data" / "expert.jsonl").read_text().splitlines()) == 6
    summary = json.loads((work / "eval" / "6" / "summary.json").read_text())
    assert summary["episodes"] == 5 and summary["policy"] == "random"
    results = json.loads((work / "results.json").read_text())
    (row,) = results["rows"]
    assert row["stage"] == "eval-random" and row["return_mean"] == summary["mean_return"]
    assert results["recipes"] == [str(recipe)]
    assert "evaluations" in out
    before = (work / "eval" / "6" / "summary.json").stat().st_mtime_ns
    assert main(["run", str(recipe), "--work-dir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "expert: done" in out and "eval-random: done" in out
    assert (work / "eval" / "6" / "summary.json").stat().st_mtime_ns == before


def test_a_finished_stage_whose_output_was_removed_runs_again(tmp_path, capsys):
    recipe, work = _recipe(tmp_path), tmp_path / "work"
    assert main(["run", str(recipe), "--work-dir", str(work)]) == 0
    (work / "data" / "expert.jsonl").unlink()
    capsys.readouterr()
    assert main(["run", str(recipe), "--work-dir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "expert: finished before, but" in out and "eval-random: done" in out
    assert len((work / "data" / "expert.jsonl").read_text().splitlines()) == 6


def test_a_stage_that_finished_with_other_options_is_refused(tmp_path, capsys):
    recipe, work = _recipe(tmp_path), tmp_path / "work"
    assert main(["run", str(recipe), "--work-dir", str(work), "--until", "expert"]) == 0
    capsys.readouterr()
    changed = _recipe(tmp_path, COLLECT_EVAL.replace("episodes = 6", "episodes = 7"))
    line = _one_error(capsys, ["run", str(changed), "--work-dir", str(work)])
    assert "stage expert finished with other options (episodes differ)" in line
    assert "expert.json" in line


def test_only_one_stage_and_a_dry_run(tmp_path, capsys):
    recipe, work = _recipe(tmp_path), tmp_path / "work"
    assert main(["run", str(recipe), "--work-dir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("$ textgym ") == 2 and not work.exists()
    assert main(["run", str(recipe), "--work-dir", str(work), "--stage", "eval-random"]) == 0
    assert not (work / "data").exists() and (work / "eval" / "6" / "summary.json").exists()


def test_an_unfinished_trainer_stage_resumes_and_an_unfinished_eval_is_overwritten(tmp_path):
    from textgym.cli.run import resume_flags

    recipe = load_recipe(
        _recipe(
            tmp_path,
            COLLECT_EVAL + '\n[[stage]]\nname = "sft"\ncommand = "sft"\ndata = "{expert.output}"\n'
            'output_dir = "sft"\n',
        ),
        tmp_path / "work",
    )
    _, evaluation, sft = recipe.stages
    assert resume_flags(sft) == [] and resume_flags(evaluation) == []
    (tmp_path / "work" / "sft" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "work" / "eval" / "6").mkdir(parents=True)
    assert resume_flags(evaluation) == []  # empty: nothing to replace
    (tmp_path / "work" / "eval" / "6" / "trajectories.jsonl").write_text("")
    assert resume_flags(sft) == ["--resume"] and resume_flags(evaluation) == ["--overwrite"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[stage]]\nname = 'a'\ncommand = 'fly'\n", "command 'fly' is not one of"),
        ("[[stage]]\nname = 'a'\ncommand = 'eval'\nlr = 1\n", "['lr'] not options of textgym eval"),
        ("[[stage]]\nname = 'A b'\ncommand = 'eval'\n", "expected a unique name"),
        ("[[stage]]\nname = 'a'\ncommand = 'eval'\nmodel = '{b.output_dir}'\n", "{b.output_dir}"),
        ("stage = 3\n", "expected one or more [[stage]] tables"),
        ("[[stage]\n", "is not valid TOML"),
        ("extra = 1\n[[stage]]\nname = 'a'\ncommand = 'eval'\n", "unknown top-level keys"),
        ("[[stage]]\nname = 'a'\ncommand = 'script'\n", "needs script = 'FILE.py'"),
        ("[[stage]]\nname = 'a'\ncommand = 'eval'\n[smoke]\nmodel = 'tiny'\n", "smoke.model"),
    ],
)
def test_a_bad_recipe_is_one_line_before_anything_runs(tmp_path, capsys, text, words):
    recipe = str(_recipe(tmp_path, text))
    line = _one_error(capsys, ["run", recipe, "--work-dir", str(tmp_path), "--smoke"])
    assert words in line
    assert not (tmp_path / ".textgym-run").exists()
    with pytest.raises(RecipeError):
        load_recipe(tmp_path / "recipe.toml", tmp_path, smoke=True)


def test_a_script_stage_runs_beside_the_recipe_in_its_output_dir(tmp_path):
    (tmp_path / "prepare.py").write_text(
        "import sys, pathlib\npathlib.Path('made.txt').write_text(sys.argv[1])\n"
    )
    text = (
        "[[stage]]\nname = 'data'\ncommand = 'script'\nscript = 'prepare.py'\n"
        "output_dir = 'data'\nargs = ['{data.output_dir}']\n"
    )
    assert main(["run", str(_recipe(tmp_path, text)), "--work-dir", str(tmp_path / "w")]) == 0
    assert (tmp_path / "w" / "data" / "made.txt").read_text() == str(tmp_path / "w" / "data")


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("../outside.py", "must be a .py file in the recipe's folder"),
        ("notes.txt", "must be a .py file in the recipe's folder"),
        ("missing.py", "no script"),
    ],
)
def test_a_script_outside_the_recipes_folder_or_missing_is_one_line(
    tmp_path, capsys, script, words
):
    folder = tmp_path / "recipes"
    folder.mkdir()
    (tmp_path / "outside.py").write_text("raise SystemExit(0)\n")
    (folder / "notes.txt").write_text("not python\n")
    text = f"[[stage]]\nname = 'data'\ncommand = 'script'\nscript = '{script}'\n"
    recipe = str(_recipe(folder, text))
    assert words in _one_error(capsys, ["run", recipe, "--work-dir", str(tmp_path / "w")])
    assert not (tmp_path / "w" / ".textgym-run" / "data.json").exists()


def test_a_failing_stage_stops_the_run_without_a_mark(tmp_path, capsys):
    (tmp_path / "fail.py").write_text("raise SystemExit(3)\n")
    text = "[[stage]]\nname = 'data'\ncommand = 'script'\nscript = 'fail.py'\n"
    assert main(["run", str(_recipe(tmp_path, text)), "--work-dir", str(tmp_path / "w")]) == 3
    assert "stage data exited with 3" in capsys.readouterr().out
    assert not (tmp_path / "w" / ".textgym-run" / "data.json").exists()


@pytest.mark.llm
def test_a_train_stage_stopped_by_its_time_limit_is_not_marked_done(tmp_path, capsys):
    pytest.importorskip("torch")
    text = COLLECT_EVAL + (
        '\n[[stage]]\nname = "grpo"\ncommand = "train"\nenv_id = "textgym/TicTacToe-v0"\n'
        'model = "tiny"\nsteps = 3\ngroups_per_step = 1\ngroup_size = 2\nmax_new_tokens = 4\n'
        'eval_every = 0\nsave_every = 1\noutput_dir = "grpo"\n'
    )
    recipe, work = _recipe(tmp_path, text), tmp_path / "work"
    (work / "grpo" / "checkpoint-1").mkdir(parents=True)
    from textgym.cli.run import unfinished_reason

    stage = load_recipe(recipe, work).stage("grpo")
    assert unfinished_reason(stage) == "it has no checkpoint-3 yet"
    (work / "grpo" / "checkpoint-3").mkdir()
    assert unfinished_reason(stage) is None


def test_a_work_dir_in_use_by_another_run_is_refused(tmp_path, capsys):
    import filelock

    recipe, work = _recipe(tmp_path), tmp_path / "work"
    (work / ".textgym-run").mkdir(parents=True)
    with filelock.FileLock(work / ".textgym-run" / ".lock"):
        line = _one_error(capsys, ["run", str(recipe), "--work-dir", str(work)])
    assert "is in use by another textgym run" in line
    assert not (work / "data").exists()
