"""The report's curves, as data for ``report.js``: charts, their series, x axes and error bars.

Each train or SFT run keeps one colour (:data:`RUN_COLORS`, the colour of its card); the
series of one run in one chart differ by dash and marker (``dash``, ``marker``: indices into
the page's lists), so a colour always means a run. GRPO and SFT runs never share a chart (their
steps count different things): with both kinds in a report each chart is drawn once per kind.
A chart whose every logged value is 0 (KL with ``--beta 0``, the clipped fraction of an
on-policy run) is not drawn; its title is listed in ``all_zero``. Evaluation points carry a
standard error where it can be known: ``<setting>/return_stderr`` when logged, and for win /
draw / loss rates the binomial one, ``sqrt(p (1 - p) / n)`` with ``n`` the run's
``eval_episodes`` (``run.json``). Besides the step, a run's x axes (:func:`step_axes`) are wall
time and tokens, where its rows hold them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from textgym.checks import is_finite_number
from textgym.report.runs import Run

__all__ = ["RUN_COLORS", "chart_specs", "skipped_updates", "step_axes", "task_tables"]

#: One colour per run, in column order (cycled).
RUN_COLORS = (
    "#2f6fde",
    "#e8590c",
    "#2b8a3e",
    "#ae3ec9",
    "#c92a2a",
    "#0c8599",
    "#b08900",
    "#5f3dc4",
    "#d6336c",
    "#495057",
)

#: Stage names shown when a report holds both kinds of training run.
_KIND_NAMES = {"train": "GRPO", "sft": "SFT"}


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
    return list(dict.fromkeys(k.rsplit("/", 1)[0] for k in keys))  # a member's: NAME/SETTING


def _train(*keys: str) -> _Select:
    return lambda rows: [("train", k, k) for k in keys]


def _is_member_reward(key: str) -> bool:
    return key.endswith("/reward_mean") and not key.startswith("reward/")


#: The training reward of each member env of a ``textgym/Mixture-v0`` run.
_MEMBER_REWARD: tuple[str, str, bool, _Select] = (
    "Reward per env of the mixture (train)",
    "reward",
    False,
    lambda rows: [
        ("train", k, k.split("/", 1)[0]) for k in _keys(rows, "train", _is_member_reward)
    ],
)

#: (title, y-axis label, rates in [0, 1], which series) of each chart, in page order.
_CHARTS: list[tuple[str, str, bool, _Select]] = [
    ("Reward (train, mean over the step's episodes)", "reward", False, _train("reward_mean")),
    (
        "Reward components (train)",
        "reward",
        False,
        lambda rows: [
            ("train", k, k) for k in _keys(rows, "train", lambda k: k.startswith("reward/"))
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
            ("eval", k, k.rsplit("/", 1)[0])
            for k in _keys(rows, "eval", lambda k: k.endswith("/return_mean"))
        ],
    ),
    ("KL to the reference policy (train)", "nats", False, _train("kl")),
    ("Policy entropy (train)", "nats", False, _train("entropy")),
    ("Loss", "loss", False, _train("loss")),
    ("Clipped fraction (train)", "fraction", True, _train("clip_fraction")),
]


def _eval_episodes(run: Run) -> int | None:
    config = (run.info.get("run") or {}).get("config") or {}
    n = config.get("eval_episodes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _stderr(row: dict[str, Any], key: str, value: float, episodes: int | None) -> float | None:
    """The standard error of an evaluation value: logged beside it, or binomial for an outcome
    rate of ``episodes`` games; ``None`` when neither is known."""
    for name in (
        key[: -len("_mean")] + "_stderr" if key.endswith("_mean") else "",
        key + "_stderr",
    ):
        if name and is_finite_number(row.get(name)):
            return float(row[name])
    outcome = key.rsplit("/", 1)[-1]
    if episodes and outcome in ("win_rate", "draw_rate", "loss_rate") and 0 <= value <= 1:
        return math.sqrt(value * (1 - value) / episodes)
    return None


def _points(run: Run, stage: str, key: str) -> list[list[Any]]:
    """``[step, value, stderr or None]`` of each finite value of ``key`` in ``stage``."""
    episodes = _eval_episodes(run) if stage == "eval" else None
    points = []
    for row in run.metrics:
        value, step = row.get(key), row.get("step")
        if row.get("stage") == stage and isinstance(step, int) and is_finite_number(value):
            se = _stderr(row, key, float(value), episodes) if stage == "eval" else None
            points.append([step, float(value), se])
    return sorted(points, key=lambda p: p[0])


def step_axes(run: Run) -> dict[str, dict[int, float]]:
    """Each step's place on the other x axes: ``"wall"`` (seconds since training began) and
    ``"tokens"``, for the steps of every row (an evaluation at step ``s`` sits where step ``s``
    ended; step 0 at 0). An axis is left out when the rows do not hold it.

    GRPO rows: wall time is the running sum of ``step_time_s``; tokens the running sum of
    ``completion_tokens_mean`` x the episodes per step (``batch_size`` of ``run.json``),
    the completion tokens sampled. SFT rows: wall time is ``elapsed_s``; tokens the running sum
    of ``tokens`` (the step's trained tokens) x the steps since the last row logged, an
    estimate when ``log_every`` > 1.
    """
    train: dict[int, dict[str, Any]] = {}
    for row in run.metrics:
        if row.get("stage") == "train" and isinstance(row.get("step"), int):
            train[row["step"]] = row  # a step logged twice (a resumed run): the last row
    config = (run.info.get("run") or {}).get("config") or {}
    batch = config.get("batch_size")
    wall, tokens = {0: 0.0}, {0: 0.0}
    clock = count = 0.0
    have_wall = have_tokens = True
    previous = 0
    for step in sorted(train):
        row = train[step]
        if is_finite_number(row.get("elapsed_s")):
            clock = float(row["elapsed_s"])
        elif is_finite_number(row.get("step_time_s")):
            clock += float(row["step_time_s"])
        else:
            have_wall = False
        if is_finite_number(row.get("completion_tokens_mean")) and is_finite_number(batch):
            count += float(row["completion_tokens_mean"]) * float(batch)
        elif is_finite_number(row.get("tokens")):
            count += float(row["tokens"]) * (step - previous)
        else:
            have_tokens = False
        wall[step], tokens[step] = clock, count
        previous = step
    axes = {}
    for name, values, have in (("wall", wall, have_wall), ("tokens", tokens, have_tokens)):
        if not have or len(values) < 2:
            continue
        known = sorted(values)
        for row in run.metrics:
            step = row.get("step")
            if isinstance(step, int) and step not in values:
                before = [s for s in known if s <= step]
                values[step] = values[before[-1]] if before else 0.0
        axes[name] = values
    return axes


def skipped_updates(run: Run) -> tuple[int, int]:
    """``(skipped, steps)``: the GRPO steps that made no optimizer update (``skipped_update``),
    and the steps logged."""
    train = [r for r in run.metrics if r.get("stage") == "train" and isinstance(r.get("step"), int)]
    return sum(1 for r in train if r.get("skipped_update")), len({r["step"] for r in train})


def chart_specs(runs: Sequence[Run]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The curves of the train and SFT runs, overlaid run by run.

    Returns:
        ``(charts, not_logged, all_zero)``. Each chart is ``{"title", "ylabel", "rate",
        "kind", "series"}``; ``kind`` is ``"train"`` (GRPO) or ``"sft"`` (a chart never mixes
        them; the title names the kind when the report has both); each series ``{"run": run
        index, "label", "color" (the run's), "dash", "marker" (indices, distinct within a
        run), "points": [[step, value, stderr or None], ...]}``; ``rate`` charts span [0, 1].
        One ``Evaluation vs <setting>: win / draw / loss`` chart per setting that logs outcome
        rates. ``not_logged``: the titles no run logged a finite value for; ``all_zero``: the
        titles whose every value is 0 (not drawn).
    """
    trained = [(i, run) for i, run in enumerate(runs) if run.metrics]
    charts: list[tuple[str, str, bool, _Select]] = list(_CHARTS)
    settings = dict.fromkeys(s for _, run in trained for s in _settings(run.metrics))
    for setting in settings:
        charts.insert(
            4,
            (
                f"Evaluation vs {setting}: win / draw / loss",
                "rate",
                True,
                lambda rows, s=setting: [
                    ("eval", f"{s}/{o}_rate", o) for o in ("win", "draw", "loss")
                ],
            ),
        )
    if any(_keys(run.metrics, "train", _is_member_reward) for _, run in trained):
        charts.insert(1, _MEMBER_REWARD)  # a mixture's runs: one curve per member env
    kinds = list(dict.fromkeys(run.kind for _, run in trained))
    specs: list[dict[str, Any]] = []
    not_logged: list[str] = []
    all_zero: list[str] = []
    for title, ylabel, rate, select in charts:
        for kind in kinds:
            named = f"{title} — {_KIND_NAMES.get(kind, kind)}" if len(kinds) > 1 else title
            series = []
            for index, run in trained:
                if run.kind != kind:
                    continue
                for number, (stage, key, label) in enumerate(select(run.metrics)):
                    points = _points(run, stage, key)
                    if points:
                        series.append(
                            {
                                "run": index,
                                "label": label,
                                "color": RUN_COLORS[index % len(RUN_COLORS)],
                                "dash": number,
                                "marker": number,
                                "points": points,
                            }
                        )
            if not series:
                not_logged.append(named)
            elif all(p[1] == 0 for s in series for p in s["points"]):
                all_zero.append(named)
            else:
                specs.append(
                    {"title": named, "ylabel": ylabel, "rate": rate, "kind": kind, "series": series}
                )
    return specs, not_logged, all_zero


def task_tables(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per task, each eval run's successes and pass@k (``per_task.jsonl``, written by a walk
    over the tasks): ``{"run": index, "k": rollouts per task, "rows": [{"task", "rollouts",
    "successes", "pass@1", "pass@k"}]}`` per run that has them; pass@k by the unbiased
    estimator (:func:`textgym.evaluation.pass_at_k`), ``None`` for a task with fewer than
    ``k`` rollouts."""
    from textgym.evaluation import pass_at_k

    tables = []
    for index, run in enumerate(runs):
        if not run.tasks:
            continue
        tasks = (run.summary or {}).get("tasks") or {}
        k = tasks.get("rollouts_per_task")
        k = k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else 1
        rows = []
        for row in run.tasks:
            n, c = row.get("rollouts"), row.get("successes")
            if not (isinstance(n, int) and isinstance(c, int) and 0 <= c <= n and n >= 1):
                continue
            rows.append(
                {
                    "task": str(row.get("task_id")),
                    "rollouts": n,
                    "successes": c,
                    "pass@1": c / n,
                    "pass@k": pass_at_k(n, c, k) if n >= k else None,
                }
            )
        if rows:
            tables.append({"run": index, "k": k, "rows": rows})
    return tables
