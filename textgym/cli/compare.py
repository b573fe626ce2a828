"""``textgym compare``: compare any mix of eval, train and SFT runs side by side.

Each run is read as ``textgym report`` reads it (:func:`textgym.report.runs.load_run`): an eval
directory (``summary.json``, or ``trajectories.jsonl`` when the summary is missing), a train
directory (``metrics.jsonl``, ``final_eval.json``) or an SFT directory. The table holds one row
per metric and one column per run, named alike across kinds: an eval run's numbers are
``eval/return_mean``, ``eval/win_rate``, ``eval/invalid_rate`` ..., the names a train run's
last evaluation has for an env without named settings. Where the train runs' evaluation names
settings (tic-tac-toe's ``eval/random/win_rate``, ``eval/optimal/...``), an eval run's return,
outcome and invalid rates go on the rows of the setting its env played
(:func:`textgym.report.alignment.eval_setting`: made with no arguments, tic-tac-toe plays
``optimal``), so both kinds of run share those rows. Train and SFT runs add
``train/<metric>``, the last value logged. With ``--plots DIR`` the curves of the train and SFT runs are overlaid
(:func:`textgym.algos.metric_plots.plot_runs`; an eval run has none).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import tyro

from textgym.checks import is_number
from textgym.cli.usage import fail
from textgym.errors import UsageError

__all__ = ["CompareConfig", "eval_rows", "run"]


@dataclasses.dataclass(kw_only=True)
class CompareConfig:
    """Compare eval, train and SFT runs: a table of their numbers side by side, and overlaid
    plots of the training curves."""

    runs: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="RUN")]
    """Two or more run directories, space-separated: eval (--output-dir of textgym eval),
    train or sft runs, in any mix."""
    plots: str | None = None
    """Directory for the overlaid PNG plots of the train and sft runs' curves (default: no
    plots)."""


Config = CompareConfig


def eval_rows(summary: Mapping[str, Any]) -> dict[str, float]:
    """An eval run's summary (``summary.json``) as ``metric -> value``, named as a trainer's
    evaluation is in :func:`textgym.algos.metric_summaries.compare_rows`
    (``eval/return_mean``, ...).

    Example:
        >>> eval_rows({"episodes": 4, "mean_return": 0.5, "stderr_return": 0.1,
        ...            "invalid_action_rate": 0.0, "outcomes": {"win": 0.5, "draw": 0.0}})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'eval/episodes': 4.0, 'eval/return_mean': 0.5, 'eval/return_stderr': 0.1,
         'eval/win_rate': 0.5, 'eval/draw_rate': 0.0, 'eval/invalid_rate': 0.0}
    """
    names = {
        "episodes": "episodes",
        "mean_return": "return_mean",
        "stderr_return": "return_stderr",
    }
    rows = {f"eval/{name}": summary[key] for key, name in names.items() if key in summary}
    outcomes = summary.get("outcomes") or {}
    if any(isinstance(v, (int, float)) and v > 0 for v in outcomes.values()):
        rows.update({f"eval/{o}_rate": rate for o, rate in outcomes.items()})
    later = {
        "invalid_action_rate": "invalid_rate",
        "invalid_episode_rate": "invalid_episode_rate",
        "truncated_rate": "truncated_rate",
        "length_truncated_rate": "length_truncated_rate",
        "mean_turns": "mean_turns",
    }
    rows.update({f"eval/{name}": summary[key] for key, name in later.items() if key in summary})
    for component, value in (summary.get("reward_components") or {}).items():
        rows[f"eval/reward/{component}"] = value
    tasks = summary.get("tasks") or {}
    for key, value in tasks.items():
        if key.startswith(("pass@", "mean@")):
            rows[f"eval/{key}"] = value
    if "episodes_per_s" in summary:
        rows["eval/episodes_per_s"] = summary["episodes_per_s"]
    return {key: float(value) for key, value in rows.items() if is_number(value)}


def _aligned(run: Any, runs: list[Any], notes: list[str]) -> dict[str, float]:
    """An eval run's rows (:func:`eval_rows`), its return, outcome and invalid rates moved to
    the rows of the train runs' evaluation setting it played (``eval/optimal/return_mean`` for
    tic-tac-toe against minimax; :func:`textgym.report.alignment.eval_setting`), so the two
    kinds of run share rows. Where the train runs logged named settings and the eval run played
    none of them, a note for ``notes`` says so and its rows stay ``eval/<metric>``."""
    from textgym.report.alignment import SHARED_METRICS, eval_setting, shared_eval

    rows = eval_rows(run.summary)
    _note_reward_scales(run, runs, notes)
    logged = dict.fromkeys(
        s for other in runs if other.kind == "train" for s in shared_eval(other) if s != "eval"
    )
    if not logged:
        return rows
    setting = eval_setting(run.summary)
    if setting in logged:
        return {
            f"eval/{setting}/{key[5:]}" if key[5:] in SHARED_METRICS else key: value
            for key, value in rows.items()
        }
    kwargs = run.summary.get("env_kwargs") or {}
    notes.append(
        f"{run.name}: its env (env_kwargs {kwargs}) plays none of the evaluation settings the "
        f"train runs logged ({', '.join(logged)}); its numbers are on the eval/<metric> rows"
    )
    return rows


def _note_reward_scales(run: Any, runs: list[Any], notes: list[str]) -> None:
    """A note for ``notes`` when the eval run's returns and a train run's evaluation returns
    include different reward wrappers (``train`` adds ``invalid_action_penalty`` by default,
    ``eval`` none), so their returns are not on one scale."""
    ours = list(run.summary.get("wrappers") or [])
    for other in runs:
        config = (other.info.get("run") or {}).get("config") or {}
        if other.kind != "train" or "wrappers" not in config:
            continue
        theirs = list(config["wrappers"] or [])
        if theirs != ours:
            notes.append(
                f"{run.name} and {other.name}: returns on different reward scales ("
                f"{run.name}'s include wrappers {ours or 'none'}, {other.name}'s evaluations "
                f"{theirs or 'none'}); pass the same --wrappers to eval to compare returns"
            )


def _load(paths: tuple[str, ...]) -> list[Any]:
    """The runs, read as ``textgym report`` reads them (no episodes kept).

    Raises:
        UsageError: fewer than two runs, two with the same name, or a path that holds no run.
    """
    from textgym.report.runs import NotARunError, load_run

    names = [Path(p).name or p for p in paths]
    if len(paths) < 2 or len(set(names)) != len(names):
        raise UsageError(
            f"compare: expected two or more run directories with distinct names, got {names}"
        )
    runs = []
    for path in paths:
        try:
            run = load_run(path, max_episodes=0)
        except NotARunError as exc:
            raise UsageError(f"compare: {exc}") from None
        if run.kind == "collect":
            raise UsageError(
                f"compare: {path} is a file (textgym collect's output); compare takes eval, "
                "train and sft run directories (textgym report shows collect files)"
            )
        runs.append(run)
    return runs


def run(config: CompareConfig) -> int:
    """Print the runs' numbers side by side; write the overlaid plots of their curves."""
    from textgym.algos.metric_summaries import compare_rows

    runs = _load(config.runs)
    curves = {r.name: r.metrics for r in runs if r.kind in ("train", "sft")}
    table: dict[str, dict[str, Any]] = {}
    for row in compare_rows(curves):
        table[row["metric"]] = row
    notes: list[str] = []
    for r in runs:
        if r.kind == "eval" and r.summary is not None:
            rows = _aligned(r, runs, notes)
            for metric, value in rows.items():
                table.setdefault(metric, {"metric": metric})[r.name] = value
    paths: list[Path] = []
    if config.plots is not None and curves:
        try:
            from textgym.algos.metric_plots import plot_runs

            paths = plot_runs(curves, config.plots)
        except ImportError as exc:
            fail(f'textgym compare --plots needs matplotlib ({exc}); pip install "textgym[train]"')
    rows = sorted(table.values(), key=lambda row: not row["metric"].startswith("eval/"))
    _print_table(runs, rows)
    for r in runs:
        for note in r.notes:
            print(f"{r.name}: {note}")
    for note in notes:
        print(note)
    if config.plots is not None and not curves:
        print("no plots: none of the runs is a train or sft run with curves")
    for path in paths:
        print(f"wrote {path}")
    return 0


def _print_table(runs: list[Any], rows: list[dict[str, Any]]) -> None:
    """One column per run (its kind under its name), one row per metric."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="runs side by side (train: last value logged; eval: the run's summary)")
    table.add_column("metric")
    for r in runs:
        table.add_column(f"{r.name}\n({r.kind})", justify="right")

    def cell(value: Any) -> str:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return "-"
        return f"{value:.4g}"

    for row in rows:
        table.add_row(row["metric"], *(cell(row.get(r.name)) for r in runs))
    Console(width=max(120, 24 + 16 * len(runs))).print(table)
