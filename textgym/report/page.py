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
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from typing import Any

from textgym.checks import is_number
from textgym.report.runs import Interner, Run

__all__ = ["chart_specs", "render_page", "script_json", "summary_rows"]

_MISSING = "–"


# --- the summary table -------------------------------------------------------------------------


def _finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def _num(value: Any, digits: int = 3) -> str:
    if not _finite(value):
        return _MISSING
    return f"{value:.{digits}f}"


def _pct(value: Any) -> str:
    if not _finite(value):
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
    final = run.final_eval
    if final is None:  # no final_eval.json yet: the last evaluation logged
        evals = [r for r in run.metrics if r.get("stage") == "eval"]
        final = {k: v for k, v in (evals[-1] if evals else {}).items() if "/" in k}
    for setting in dict.fromkeys(k.split("/", 1)[0] for k in final if "/" in k):
        get = lambda metric, s=setting: final.get(f"{s}/{metric}")  # noqa: E731
        yield 5, f"final eval {setting}: return", _num(get("return_mean"))
        if get("win_rate") is not None:
            yield (
                5,
                f"final eval {setting}: win / draw / loss",
                _wdl(get("win_rate"), get("draw_rate"), get("loss_rate")),
            )
        yield 5, f"final eval {setting}: invalid actions", _pct(get("invalid_rate"))


def summary_rows(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """The summary table: one row per statistic, one cell per run (``"–"`` where a run has
    none); rows grouped (what ran, return and components, outcomes, rates, tasks, training),
    first seen first within a group. Eval and collect runs give the statistics of
    ``textgym eval`` (:func:`textgym.evaluation.summarize`); train and SFT runs their config,
    last step and final evaluation."""
    table: dict[str, list[str]] = {"kind": [run.kind for run in runs]}
    section = {"kind": -1}
    for i, run in enumerate(runs):
        rows = _eval_rows(run.summary, run) if run.summary is not None else _train_rows(run)
        for part, label, text in rows:
            table.setdefault(label, [_MISSING] * len(runs))[i] = text
            section.setdefault(label, part)
    return sorted(table.items(), key=lambda item: section[item[0]])  # stable: first seen


def _summary_html(runs: Sequence[Run]) -> str:
    esc = html.escape
    head = "".join(f"<th scope=col>{esc(run.name)}</th>" for run in runs)
    body = []
    for label, cells in summary_rows(runs):
        indent = " class=sub" if label.startswith("  ") else ""
        tds = "".join(
            f"<td>{esc(c)}</td>"
            if len(c) <= 40
            else f'<td><span class=long title="{esc(c)}">{esc(c)}</span></td>'
            for c in cells
        )
        body.append(f"<tr><th scope=row{indent}>{esc(label.strip())}</th>{tds}</tr>")
    return (
        f'<table class="summary"><thead><tr><th scope=col>statistic</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


# --- curves ------------------------------------------------------------------------------------

_Select = Callable[[list[dict[str, Any]]], list[tuple[str, str, str]]]  # (stage, key, label)


def _keys(rows: Iterable[dict[str, Any]], stage: str, keep: Callable[[str], bool]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        if row.get("stage") == stage:
            seen.update((k, None) for k in row if k not in ("step", "stage") and keep(k))
    return list(seen)


def _settings(rows: list[dict[str, Any]]) -> list[str]:
    """Evaluation settings (``random``, ``optimal``, ``eval``) of the eval rows, in order."""
    keys = _keys(rows, "eval", lambda k: "/" in k)
    return list(dict.fromkeys(k.split("/", 1)[0] for k in keys))


def _train(*keys: str) -> _Select:
    return lambda rows: [("train", k, k) for k in keys]


#: (title, y-axis label, rates in [0, 1], which series) of each chart, in page order.
_CHARTS: list[tuple[str, str, bool, _Select]] = [
    (
        "Reward (train) and its components",
        "reward",
        False,
        lambda rows: [
            ("train", k, k)
            for k in _keys(rows, "train", lambda k: k == "reward_mean" or k.startswith("reward/"))
        ],
    ),
    (
        "Invalid-action rate",
        "rate",
        True,
        lambda rows: (
            [("train", "invalid_rate", "train")]
            + [
                ("eval", k, f"eval {k}")
                for k in _keys(rows, "eval", lambda k: k.endswith("/invalid_rate"))
            ]
        ),
    ),
    (
        "Evaluation return",
        "return",
        False,
        lambda rows: [
            ("eval", k, k.split("/", 1)[0])
            for k in _keys(rows, "eval", lambda k: k.endswith("/return_mean"))
        ],
    ),
    ("KL to the reference policy (train)", "nats", False, _train("kl")),
    ("Policy entropy (train)", "nats", False, _train("entropy")),
    ("Loss", "loss", False, _train("loss")),
    ("Clipped fraction (train)", "fraction", True, _train("clip_fraction")),
]


def _points(rows: Iterable[dict[str, Any]], stage: str, key: str) -> list[list[float]]:
    points = []
    for row in rows:
        value, step = row.get(key), row.get("step")
        if row.get("stage") == stage and isinstance(step, int) and _finite(value):
            points.append([step, float(value)])
    return sorted(points)


def chart_specs(runs: Sequence[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """The curves of the train and SFT runs, overlaid run by run.

    Returns:
        ``(charts, not_logged)``: each chart ``{"title", "ylabel", "rate", "series": [{"run":
        run index, "label", "points": [[step, value], ...]}]}`` with at least one point (steps
        are optimizer updates; ``rate`` charts span [0, 1]); one ``Evaluation vs <setting>:
        win / draw / loss`` chart per evaluation setting that logs outcome rates; and the
        titles of the charts no run logged a finite value for (e.g. KL with ``--beta 0``).
    """
    trained = [(i, run) for i, run in enumerate(runs) if run.metrics]
    charts: list[tuple[str, str, bool, _Select]] = list(_CHARTS)
    settings = dict.fromkeys(s for _, run in trained for s in _settings(run.metrics))
    for setting in settings:
        charts.insert(
            3,
            (
                f"Evaluation vs {setting}: win / draw / loss",
                "rate",
                True,
                lambda rows, s=setting: [
                    ("eval", f"{s}/{o}_rate", o) for o in ("win", "draw", "loss")
                ],
            ),
        )
    specs, not_logged = [], []
    for title, ylabel, rate, select in charts:
        series = []
        for index, run in trained:
            for stage, key, label in select(run.metrics):
                points = _points(run.metrics, stage, key)
                if points:
                    series.append({"run": index, "label": label, "points": points})
        if series:
            specs.append({"title": title, "ylabel": ylabel, "rate": rate, "series": series})
        elif trained:
            not_logged.append(title)
    return specs, not_logged


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

    charts, not_logged = chart_specs(runs)
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
            }
            for run in runs
        ],
        "max_episodes": max_episodes,
        "shared": shared.values,
        "episodes": episodes,
        "charts": charts,
        "not_logged": not_logged,
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
