"""The report page: one self-contained HTML file from runs read by :mod:`textgym.report.runs`.

The page needs nothing outside itself: its CSS and JavaScript (``report.css``, ``report.js``
beside this module) are inlined, curves are drawn as inline SVG by the page's own script, and
a Content-Security-Policy forbids every fetch (``default-src 'none'``). The summary table is
HTML written here with every value escaped. Everything else the page shows (episodes, curves)
is data: one JSON document inside ``<script type="application/json">`` with ``<``, ``>`` and
``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026`` (so no text, however hostile, can close
the script element or open another), which the script reads with ``JSON.parse`` and turns into
DOM nodes with ``textContent`` only.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from textgym.checks import is_finite_number
from textgym.report.alignment import shared_eval
from textgym.report.curves import (
    RUN_COLORS,
    chart_specs,
    skipped_updates,
    step_axes,
    task_tables,
)
from textgym.report.runs import Interner, Run

__all__ = ["render_page", "script_json", "summary_rows"]

_MISSING = "–"


# --- the summary table -------------------------------------------------------------------------


def _num(value: Any, digits: int = 3) -> str:
    if not is_finite_number(value):
        return _MISSING
    return f"{value:.{digits}f}"


def _pct(value: Any) -> str:
    if not is_finite_number(value):
        return _MISSING
    return f"{100 * value:.1f}%"


def _wdl(win: Any, draw: Any, loss: Any) -> str:
    return " / ".join(_pct(v) for v in (win, draw, loss))


def _short_path(model: Any) -> Any:
    """A model given as a long path, as its last two parts (``…/adapters/mastery``)."""
    if not isinstance(model, str) or "/" not in model or len(model) <= 32:
        return model
    parts = [p for p in model.split("/") if p]
    return "…/" + "/".join(parts[-2:]) if len(parts) > 2 else model


def _eval_rows(summary: dict[str, Any], run: Run) -> Iterable[tuple[int, str, str]]:
    """(section, label, text) rows of an eval or collect summary, in the order ``textgym eval`` prints."""
    env = summary.get("env_id") or next((e["env"] for e in run.episodes if e.get("env")), None)
    yield 0, "env", str(env or _MISSING)
    if summary.get("policy"):
        model = _short_path(summary.get("model"))
        yield 0, "policy", f"{summary['policy']}" + (f" ({model})" if model else "")
    episodes = f"{summary.get('episodes', run.episodes_total)}"
    if summary.get("complete") is False:
        episodes += f" of {summary.get('episodes_requested', '?')} (interrupted)"
    yield 0, "episodes", episodes
    mean, stderr = summary.get("mean_return"), summary.get("stderr_return")
    yield 1, "mean return ± stderr", f"{_num(mean)} ± {_num(stderr)}"
    for name, value in (summary.get("reward_components") or {}).items():
        yield 1, f"  component {name}", _num(value)
    outcomes = summary.get("outcomes") or {}
    if any(isinstance(v, (int, float)) and v > 0 for v in outcomes.values()):
        yield (
            2,
            "win / draw / loss",
            _wdl(outcomes.get("win"), outcomes.get("draw"), outcomes.get("loss")),
        )
    yield 3, "invalid actions (of turns)", _pct(summary.get("invalid_action_rate"))
    yield 3, "episodes with an invalid action", _pct(summary.get("invalid_episode_rate"))
    if "truncated_rate" in summary:
        yield 3, "time limit (truncated episodes)", _pct(summary["truncated_rate"])
    if "length_truncated_rate" in summary:
        yield 3, "completions cut at the token limit", _pct(summary["length_truncated_rate"])
    yield 3, "mean turns", _num(summary.get("mean_turns"), 2)
    tasks = summary.get("tasks")
    if isinstance(tasks, dict):
        k = tasks.get("rollouts_per_task", 1)
        yield 4, "tasks played", str(tasks.get("played", _MISSING))
        yield 4, "pass@1", _pct(tasks.get("pass@1"))
        if isinstance(k, int) and k > 1:
            yield 4, f"pass@{k}", _pct(tasks.get(f"pass@{k}"))


def _last(rows: Sequence[dict[str, Any]], key: str) -> Any:
    for row in reversed(rows):
        if row.get(key) is not None:
            return row[key]
    return None


def _train_rows(run: Run) -> Iterable[tuple[int, str, str]]:
    """(section, label, text) rows of a train or SFT run: its config, last step and final evaluation."""
    config = (run.info.get("run") or {}).get("config") or {}
    train = [r for r in run.metrics if r.get("stage") == "train"]
    if config.get("env_id"):
        yield 0, "env", str(config["env_id"])
    if config.get("model"):
        yield 0, "policy", f"hf ({_short_path(config['model'])})"
    steps = max((r.get("step", 0) for r in train if isinstance(r.get("step"), int)), default=0)
    yield 0, "training steps", str(steps)
    if run.kind == "sft":
        sft = run.info.get("sft") or {}
        yield 1, "final loss", _num(sft.get("final_loss", _last(train, "loss")), 4)
        if "conversations" in sft:
            yield 0, "conversations", str(sft["conversations"])
        return
    yield 1, "train reward (last step)", _num(_last(train, "reward_mean"))
    if any("skipped_update" in r for r in train):
        skipped = sum(1 for r in train if r.get("skipped_update"))
        yield 5, "updates skipped (equal rewards in every group)", f"{skipped} of {len(train)}"


def _shared_rows(
    evaluation: dict[str, dict[str, float]], settings: Iterable[str]
) -> Iterable[tuple[int, str, str]]:
    """(section, label, text) rows of the evaluation settings both eval and train runs hold
    (:func:`textgym.report.alignment.shared_eval`): the same labels for both kinds of run."""
    for setting in settings:
        get = (evaluation.get(setting) or {}).get
        if not evaluation.get(setting):
            continue
        text = _num(get("return_mean"))
        if get("return_stderr") is not None:
            text += f" ± {_num(get('return_stderr'))}"
        yield 5, f"eval vs {setting}: return", text
        if get("win_rate") is not None:
            yield (
                5,
                f"eval vs {setting}: win / draw / loss",
                _wdl(get("win_rate"), get("draw_rate"), get("loss_rate")),
            )
        yield 5, f"eval vs {setting}: invalid actions", _pct(get("invalid_rate"))


def summary_rows(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """The summary table: one row per statistic, one cell per run (``"–"`` where a run has
    none); rows grouped (what ran, return and components, outcomes, rates, tasks, training),
    first seen first within a group. Eval and collect runs give the statistics of
    ``textgym eval`` (:func:`textgym.evaluation.summarize`); train and SFT runs their config,
    last step and final evaluation, as ``eval vs <setting>: ...`` rows, which an eval run that
    played a setting the train runs logged shares (:mod:`textgym.report.alignment`)."""
    table: dict[str, list[str]] = {"kind": [run.kind for run in runs]}
    section = {"kind": -1}
    evaluations = [shared_eval(run) for run in runs]
    trained = [s for run, e in zip(runs, evaluations) if run.kind == "train" for s in e]
    settings = list(dict.fromkeys(trained))
    for i, run in enumerate(runs):
        rows = _eval_rows(run.summary, run) if run.summary is not None else _train_rows(run)
        if run.kind == "train" or run.summary is not None:  # eval runs: beside a train run's
            rows = [*rows, *_shared_rows(evaluations[i], settings)]
        for part, label, text in rows:
            table.setdefault(label, [_MISSING] * len(runs))[i] = text
            section.setdefault(label, part)
    return sorted(table.items(), key=lambda item: section[item[0]])  # stable: first seen


def _summary_html(runs: Sequence[Run]) -> str:
    esc = html.escape
    head = "".join(
        f'<th scope=col class=run-name title="{esc(run.name)}">{esc(run.name)}</th>' for run in runs
    )
    body = []
    for label, cells in summary_rows(runs):
        indent = " class=sub" if label.startswith("  ") else ""
        tds = "".join(
            f"<td>{esc(c)}</td>"
            if len(c) <= 40
            else f'<td><span class=long title="{esc(c)}">{esc(c)}</span></td>'  # wraps, not cut
            for c in cells
        )
        body.append(f"<tr><th scope=row{indent}>{esc(label.strip())}</th>{tds}</tr>")
    return (
        f'<table class="summary"><thead><tr><th scope=col>statistic</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


# --- the page ----------------------------------------------------------------------------------


def _finite_json(value: Any) -> Any:
    """``value`` with NaN and ±inf as ``None`` (JSON has neither), through dicts and lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """``value`` as JSON text safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e``, ``\\u0026``, and every
    non-ASCII character (lone surrogates, U+2028 included) as a ``\\u`` escape, so the text
    can neither end the element (``</script>``) nor start a comment (``<!--``), and
    ``JSON.parse`` reads back exactly ``value``. NaN and ±inf become ``null``.
    """
    text = json.dumps(
        _finite_json(value), ensure_ascii=True, allow_nan=False, separators=(",", ":")
    )
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("textgym.report").joinpath(name).read_text(encoding="utf-8")


_MARKER = re.compile(r"<!--textgym:(\w+)-->")


def render_page(
    runs: Sequence[Run], shared: Interner, *, max_episodes: int, title: str | None = None
) -> str:
    """The whole HTML page for ``runs`` (read with one ``shared`` store of texts).

    Args:
        runs: The runs, in column order.
        shared: The store the runs' episodes index their system prompts and tools into.
        max_episodes: The cap the runs were read with (the page says when it cut a run).
        title: The page title (default: the run names).
    """
    import textgym

    charts, not_logged, all_zero = chart_specs(runs)
    axes = [step_axes(run) for run in runs]
    episodes = [dict(episode, run=i) for i, run in enumerate(runs) for episode in run.episodes]
    data = {
        "runs": [
            {
                "name": run.name,
                "path": run.path,
                "kind": run.kind,
                "episodes_total": run.episodes_total,
                "episodes_shown": len(run.episodes),
                "notes": run.notes,
                "color": RUN_COLORS[i % len(RUN_COLORS)],
                "axes": {name: sorted(values.items()) for name, values in axes[i].items()},
                "skipped": skipped_updates(run) if run.kind == "train" else None,
            }
            for i, run in enumerate(runs)
        ],
        "max_episodes": max_episodes,
        "shared": shared.values,
        "episodes": episodes,
        "charts": charts,
        "not_logged": not_logged,
        "all_zero": all_zero,
        "x_axes": ["step", *(a for a in ("wall", "tokens") if any(a in x for x in axes))],
        "tasks": task_tables(runs),
    }
    title = title or "textgym report: " + ", ".join(run.name for run in runs)
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = {
        "title": html.escape(title),
        "generated": html.escape(f"textgym {textgym.__version__} · {generated}"),
        "css": _asset("report.css"),
        "js": _asset("report.js"),
        "summary": _summary_html(runs),
        "data": script_json(data),
    }
    return _MARKER.sub(lambda m: parts[m.group(1)], _asset("template.html"))
