"""``textgym run``: run a recipe file's stages in order (``textgym run RECIPE.toml --work-dir
DIR``), each a textgym subcommand (:mod:`textgym.recipes`), skipping those already done, then
print one table of every evaluation stage and write it to ``DIR/results.json``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import filelock
import tyro

from textgym.cli.training_tables import number_cell
from textgym.recipes import Recipe, RecipeError, Stage, load_recipe, script_argv, stage_argv
from textgym.results import write_atomic

__all__ = ["Config", "RunConfig", "eval_table", "resume_flags", "run", "unfinished_reason"]

_MARKS = ".textgym-run"


@dataclasses.dataclass(kw_only=True)
class RunConfig:
    """Run a recipe: its stages in order, each skipped when it already finished."""

    recipe: Annotated[tyro.conf.Positional[str], tyro.conf.arg(metavar="RECIPE")]
    """The recipe, a TOML file of stages (recipes/ holds the committed studies)."""
    work_dir: str
    """Folder of every stage's outputs and of the run's marks (.textgym-run/)."""
    stage: str | None = None
    """Run only this stage (None: every stage)."""
    until: str | None = None
    """Stop after this stage (None: run to the end)."""
    set: tuple[str, ...] = ()
    """Options changed for this run, space-separated STAGE.OPTION=VALUE (VALUE as JSON, else a
    string), e.g. 'sft.epochs=3' 'data.args=["--corpus", "c.jsonl"]'."""
    smoke: bool = False
    """Apply the recipe's [smoke] table: the tiny model and small sizes, for a quick check."""
    dry_run: bool = False
    """Print each stage's command and options; run nothing."""


Config = RunConfig


def _selected(recipe: Recipe, config: RunConfig) -> list[Stage]:
    stages = list(recipe.stages)
    if config.until is not None:
        stages = stages[: stages.index(recipe.stage(config.until)) + 1]
    if config.stage is not None:
        stages = [recipe.stage(config.stage)]
    return stages


def _finished(mark: Path, stage: Stage) -> bool:
    """Whether ``stage`` already finished with these options (its mark) and its output is still
    there (a removed output runs the stage again, with a note).

    Raises:
        RecipeError: it finished with other options.
    """
    if not mark.exists():
        return False
    try:
        done = json.loads(mark.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RecipeError(f"stage {stage.name}: its mark {mark} is unreadable; remove it") from None
    if done.get("command") == stage.command and done.get("options") == stage.options:
        output = stage.options.get("output_dir") or stage.options.get("output")
        if output is None or Path(output).exists():
            return True
        print(f"{stage.name}: finished before, but {output} is gone; running it again", flush=True)
        return False
    before = done.get("options") if isinstance(done.get("options"), dict) else {}
    keys = sorted(k for k in {*before, *stage.options} if before.get(k) != stage.options.get(k))
    raise RecipeError(
        f"stage {stage.name} finished with other options ({', '.join(keys) or 'command'} "
        f"differ); remove {mark} (and its outputs) to run it again"
    )


def resume_flags(stage: Stage) -> list[str]:
    """``--resume`` for a trainer stage that stopped after a checkpoint, ``--overwrite`` for a
    stage whose output exists unfinished (no mark), else nothing."""
    output = stage.options.get("output_dir") or stage.options.get("output")
    if output is None or not Path(output).exists():
        return []
    if stage.command in ("train", "sft") and any(Path(output).glob("checkpoint-*")):
        return ["--resume"]
    if Path(output).is_dir() and not any(Path(output).iterdir()):
        return []
    return ["--overwrite"]


def unfinished_reason(stage: Stage) -> str | None:
    """Why a trainer stage that exited with 0 is not done (a time limit stopped it), or None."""
    out = Path(stage.options.get("output_dir", ""))
    if stage.command == "sft" and not (out / "sft_summary.json").is_file():
        return "its run has no sft_summary.json yet"
    steps = stage.options.get("steps")
    done = isinstance(steps, int) and (out / f"checkpoint-{steps}").is_dir()
    if stage.command == "train" and isinstance(steps, int) and not done:
        return f"it has no checkpoint-{steps} yet"
    return None


def _run_stage(recipe: Recipe, stage: Stage, marks: Path, dry_run: bool) -> int:
    """Run one stage; its exit code."""
    from textgym.cli import main

    if stage.command == "script":
        argv = script_argv(recipe, stage)
        print(f"$ {' '.join(argv)}", flush=True)
        if dry_run:
            return 0
        cwd = Path(stage.options.get("output_dir") or marks.parent)
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run(argv, cwd=cwd, check=False).returncode
    config_file = marks / f"{stage.name}.config.json"
    argv = [*stage_argv(stage, config_file), *resume_flags(stage)]
    print(f"$ textgym {' '.join(argv)}  # {json.dumps(stage.options)}", flush=True)
    if dry_run:
        return 0
    write_atomic(config_file, json.dumps(stage.options, indent=2) + "\n")
    try:
        return main(argv)
    except SystemExit as exc:  # a usage error: its line is printed already
        return exc.code if isinstance(exc.code, int) else 1


def eval_table(recipe: Recipe) -> list[dict[str, Any]]:
    """One row per evaluation stage whose ``summary.json`` exists: env, policy or model,
    temperature, episodes, mean return and its standard error, outcome and invalid rates."""
    rows = []
    for stage in recipe.stages:
        summary_path = Path(stage.options.get("output_dir", "")) / "summary.json"
        if stage.command != "eval" or not summary_path.is_file():
            continue
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        rows.append(
            {
                "stage": stage.name,
                "env_id": summary.get("env_id"),
                "policy": summary.get("model") or summary.get("policy"),
                "temperature": stage.options.get("temperature"),
                "episodes": summary.get("episodes"),
                "return_mean": summary.get("mean_return"),
                "return_stderr": summary.get("stderr_return"),
                "outcomes": summary.get("outcomes") or {},
                "invalid_action_rate": summary.get("invalid_action_rate"),
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    outcomes = sorted({o for row in rows for o, rate in row["outcomes"].items() if rate})
    table = Table(title="evaluations")
    for column in ("stage", "episodes", "return", *outcomes, "invalid"):
        table.add_column(column, justify="left" if column == "stage" else "right", overflow="fold")
    for row in rows:
        ret = f"{number_cell(row['return_mean'], 3)} ± {number_cell(row['return_stderr'], 3)}"
        rates = [number_cell(row["outcomes"].get(o), 3) for o in outcomes]
        invalid = number_cell(row["invalid_action_rate"], 3)
        table.add_row(row["stage"], str(row["episodes"]), ret, *rates, invalid)
    Console(width=max(Console().width, 120)).print(table)


def _write_results(path: Path, recipe: Recipe, rows: list[dict[str, Any]]) -> None:
    """``rows`` into ``path``, beside the rows other recipes run in the same work dir wrote
    (a row is replaced by the stage of the same name)."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
        kept = [r for r in earlier["rows"] if r["stage"] not in {row["stage"] for row in rows}]
        recipes = [p for p in earlier["recipes"] if p != str(recipe.path)]
    except (OSError, ValueError, KeyError, TypeError):
        kept, recipes = [], []
    record = {"recipes": [*recipes, str(recipe.path)], "rows": [*kept, *rows]}
    write_atomic(path, json.dumps(record, indent=2) + "\n")


def run(config: RunConfig) -> int:
    """Run the selected stages; 0, or the exit code of the first stage that failed."""
    recipe = load_recipe(config.recipe, config.work_dir, smoke=config.smoke, overrides=config.set)
    work = Path(config.work_dir).absolute()
    marks = work / _MARKS
    selected = _selected(recipe, config)
    if config.dry_run:
        return _run_stages(recipe, selected, marks, dry_run=True)
    marks.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(marks / ".lock")
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise RecipeError(f"{work} is in use by another textgym run; wait for it to end") from None
    try:
        code = _run_stages(recipe, selected, marks, dry_run=False)
    finally:
        lock.release()
    rows = eval_table(recipe)
    if rows and code == 0:
        _print_table(rows)
        _write_results(work / "results.json", recipe, rows)
    return code


def _run_stages(recipe: Recipe, selected: list[Stage], marks: Path, *, dry_run: bool) -> int:
    """Run ``selected`` in order, each skipped when its mark says it finished; 0, or the exit
    code of the first stage that failed."""
    for stage in selected:
        mark = marks / f"{stage.name}.json"
        if _finished(mark, stage):
            print(f"{stage.name}: done ({mark})", flush=True)
            continue
        began = time.perf_counter()
        code = _run_stage(recipe, stage, marks, dry_run)
        if code != 0:
            print(f"textgym run: stage {stage.name} exited with {code}; run again to go on")
            return code
        if dry_run:
            continue
        why = unfinished_reason(stage)
        if why is not None:  # e.g. --time-limit-minutes: the next run resumes it
            print(f"textgym run: stage {stage.name} stopped before its end ({why}); run again")
            return 0
        seconds = time.perf_counter() - began
        record = {"command": stage.command, "options": stage.options, "seconds": seconds}
        write_atomic(mark, json.dumps(record, indent=2) + "\n")
        print(f"{stage.name}: {seconds:.1f} s", flush=True)
    return 0
