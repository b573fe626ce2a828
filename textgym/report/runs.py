"""Reading run directories for ``textgym report``: eval, collect, train and SFT runs.

A run is what one textgym command wrote:

- ``textgym eval --output-dir DIR``: ``summary.json`` (written last), ``trajectories.jsonl``
  (one :meth:`~textgym.rollout.Trajectory.to_dict` record per episode) and, on a walk over the
  tasks, ``per_task.jsonl``.
- ``textgym collect --output FILE``: one JSONL file of chat records
  (:func:`textgym.collect.sft_record`); the file itself is the run. ``textgym collect
  --output-dir DIR``: the same records in ``sft_data.jsonl`` (the summary is computed from
  them, as for a file).
- ``textgym train --output-dir DIR``: ``metrics.jsonl`` (rows ``{"step", "stage", ...}`` of
  :class:`textgym.algos.metrics.MetricsLogger`, stage ``train`` and ``eval``), ``run.json``,
  ``final_eval.json`` and ``train_episodes.jsonl`` (a sample of each step's rollouts, read as
  the run's episodes); ``textgym sft``: ``metrics.jsonl`` and ``sft_summary.json``.

Reading is forgiving where the page can say what went wrong: a broken JSONL line, a record of
the wrong shape or an unreadable summary becomes a note shown in the report, and the rest is
read. Only a path that holds no run at all raises (:class:`NotARunError`). Episodes are turned
into what the page draws (:mod:`textgym.report.segments`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from textgym.collect import RECORDS_FILE
from textgym.data import iter_jsonl
from textgym.evaluation import OUTCOMES, TASK_COMPONENTS, RunningSummary
from textgym.report.segments import message_segments, pretty_json, structured_segments
from textgym.rollout import Trajectory

__all__ = [
    "Interner",
    "NotARunError",
    "Run",
    "episode_outcome",
    "load_run",
    "read_jsonl_lenient",
]

#: Most notes kept per run (each broken line is one); the rest are counted.
_MAX_NOTES = 20


class NotARunError(ValueError):
    """A path that holds none of the files a textgym run writes."""


@dataclasses.dataclass
class Run:
    """One run as the report shows it.

    Attributes:
        name: The label of the run's column and curves (the directory or file name).
        path: Where it was read from.
        kind: ``"eval"``, ``"collect"``, ``"train"`` or ``"sft"``.
        summary: An eval summary (the keys of ``summary.json``), computed from the episodes
            when the run wrote none; ``None`` for train and SFT runs.
        metrics: The rows of ``metrics.jsonl`` (train and SFT runs), else empty.
        final_eval: ``final_eval.json`` of a train run (``"<setting>/<metric>"`` -> value).
        info: Other facts worth a row: ``run.json``'s config, ``sft_summary.json``.
        episodes: The embedded episodes (at most ``max_episodes``), as the page draws them.
        episodes_total: Episodes the run holds (all of them, embedded or not).
        notes: What could not be read, in plain sentences, for the page.
        tasks: The rows of ``per_task.jsonl`` of an eval run's walk over the tasks
            (``task_id``, ``rollouts``, ``successes`` ...), else empty.
    """

    name: str
    path: str
    kind: str
    summary: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    final_eval: dict[str, Any] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    episodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    episodes_total: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)
    tasks: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def note(self, text: str) -> None:
        """Keep a note for the page (the first :data:`_MAX_NOTES`, then a count)."""
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(text)
        elif len(self.notes) == _MAX_NOTES:
            self.notes.append("more problems were found; only the first 20 are listed")


def read_jsonl_lenient(path: Path, run: Run) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each JSON-object line of ``path``, streaming
    (:func:`textgym.data.iter_jsonl` with a ``skip``): a line that is not a JSON object (half a
    line cut by a crash, JSON nested too deeply to parse, a list) becomes a note on ``run``."""

    def skip(number: int, found: str) -> None:
        run.note(f"{path.name} line {number}: expected a JSON object, got {found}; skipped")

    yield from iter_jsonl(path, skip=skip)


def _read_json(path: Path, run: Run) -> dict[str, Any] | None:
    """A JSON object file, or ``None`` with a note when it is missing the shape or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError, RecursionError) as exc:
        run.note(f"{path.name}: could not be read ({exc}); left out")
        return None
    if not isinstance(value, dict):
        run.note(f"{path.name}: expected a JSON object, got {type(value).__name__}; left out")
        return None
    return value


# --- episodes ----------------------------------------------------------------------------------


def episode_outcome(
    outcome: str | None,
    truncated: bool | None,
    terminated: bool | None,
    totals: Mapping[str, float],
) -> str:
    """The outcome the page lists and filters by.

    The env's own ``outcome`` (tic-tac-toe: ``win``, ``draw``, ``loss``) when it reports one;
    else ``"time limit"`` for an episode cut by the time limit; else ``"success"`` or
    ``"failure"`` by the task's grade (:data:`textgym.evaluation.TASK_COMPONENTS`, the same
    rule as pass@k's default threshold 1.0); ``"unknown"`` when the episode reports no grade.
    """
    if outcome:
        return str(outcome)
    if truncated and not terminated:
        return "time limit"
    for name in TASK_COMPONENTS:
        if name in totals:
            return "success" if totals[name] >= 1.0 else "failure"
    return "unknown"


class Interner:
    """Each distinct system prompt and tool list, stored once for a whole report; an episode
    holds the index of its own in :attr:`values`."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._index: dict[str, int] = {}

    def add(self, key: str, value: Any) -> int:
        if key not in self._index:
            self._index[key] = len(self.values)
            self.values.append(value)
        return self._index[key]


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _episode(
    record: Mapping[str, Any],
    *,
    index: int,
    messages: Sequence[Mapping[str, Any]],
    steps: list[dict[str, Any]] | None,
    interner: Interner,
) -> dict[str, Any]:
    """The page's form of one episode (see :func:`load_run`)."""
    totals = {str(k): v for k, v in (record.get("totals") or {}).items() if _finite(v) is not None}
    system, shown = -1, []
    for message in messages:
        role = str(message.get("role", "?"))
        content = message.get("content")
        if role == "system" and system < 0 and isinstance(content, str):
            segments = message_segments(content, "system")
            system = interner.add("system:" + content, {"segments": segments})
            continue
        shown.append({"role": role, "segments": structured_segments(message)})
    tools = record.get("tools")
    tools_index = (
        interner.add(
            "tools:" + json.dumps(tools, sort_keys=True), pretty_json(json.dumps(tools))[0]
        )
        if tools
        else -1
    )
    return {
        "index": index,
        "task": record.get("task_id"),
        "seed": record.get("seed"),
        "env": record.get("env_id"),
        "outcome": episode_outcome(
            record.get("outcome"), record.get("truncated"), record.get("terminated"), totals
        ),
        "return": _finite(record.get("return")),
        "steps": record.get("num_steps"),
        "invalid": record.get("invalid_count"),
        "truncated": record.get("truncated"),
        "totals": totals,
        "system": system,
        "tools": tools_index,
        "messages": shown,
        "step_info": steps,
    }


_TRAJECTORY_FIELDS = {f.name for f in dataclasses.fields(Trajectory)}


def _trajectory(record: Mapping[str, Any]) -> Trajectory:
    """A :class:`Trajectory` from its ``to_dict`` record.

    Raises:
        ValueError: the record does not have a trajectory's shape.
    """
    fields = {k: v for k, v in record.items() if k in _TRAJECTORY_FIELDS}
    fields.setdefault("env_id", None)
    fields.setdefault("seed", None)
    fields.setdefault("task_id", None)
    try:
        trajectory = Trajectory(**fields)
        if not isinstance(trajectory.messages, list) or not all(
            isinstance(m, dict) for m in trajectory.messages
        ):
            raise TypeError("messages is not a list of objects")
        trajectory.episode_return  # noqa: B018  (checks the rewards are numbers)
        trajectory.component_totals()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a trajectory record ({exc})") from None
    return trajectory


def _trajectory_episode(traj: Trajectory, index: int, interner: Interner) -> dict[str, Any]:
    steps = [
        {
            "reward": _finite(reward),
            "components": dict(traj.reward_components[i])
            if i < len(traj.reward_components)
            else {},
            "invalid": bool(traj.invalid_actions[i]) if i < len(traj.invalid_actions) else False,
            "finish": traj.finish_reasons[i] if i < len(traj.finish_reasons) else None,
        }
        for i, reward in enumerate(traj.rewards)
    ]
    record = {
        "task_id": traj.task_id,
        "seed": traj.seed,
        "env_id": traj.env_id,
        "outcome": traj.outcome,
        "truncated": traj.truncated,
        "terminated": traj.terminated,
        "return": traj.episode_return,
        "num_steps": traj.num_steps,
        "invalid_count": sum(bool(x) for x in traj.invalid_actions),
        "totals": traj.component_totals(),
        "tools": traj.tools,
    }
    return _episode(record, index=index, messages=traj.messages, steps=steps, interner=interner)


def _load_trajectories(path: Path, run: Run, max_episodes: int, interner: Interner) -> Any:
    """Read ``trajectories.jsonl``: embed the first ``max_episodes``, summarize all."""
    running = RunningSummary()
    for number, record in read_jsonl_lenient(path, run):
        try:
            traj = _trajectory(record)
        except ValueError as exc:
            run.note(f"{path.name} line {number}: {exc}; skipped")
            continue
        try:
            running.add(traj)
        except ValueError as exc:  # a NaN or infinite reward: shown, not counted
            run.note(f"{path.name} line {number}: {exc}; left out of the summary")
        if len(run.episodes) < max_episodes:
            try:
                run.episodes.append(_trajectory_episode(traj, run.episodes_total, interner))
            except RecursionError:
                run.note(f"{path.name} line {number}: nested too deeply to show; left out")
        run.episodes_total += 1
    return running


def _load_collect(path: Path, run: Run, max_episodes: int, interner: Interner) -> None:
    """Read a ``textgym collect`` file: embed the first ``max_episodes``, summarize all."""
    rows: list[dict[str, Any]] = []  # per episode: return, totals, outcome, steps, invalid
    for number, record in read_jsonl_lenient(path, run):
        messages = record.get("messages")
        ret = _finite(record.get("return"))
        if (
            not isinstance(messages, list)
            or not all(isinstance(m, dict) for m in messages)
            or ret is None
        ):
            value = record.get("return")
            found = (
                f"its return {value} is not a finite number"
                if isinstance(value, float)
                else "expected a collect record (messages and return)"
            )
            run.note(f"{path.name} line {number}: {found}; skipped")
            continue
        totals = record.get("reward_components")
        totals = totals if isinstance(totals, dict) else {}
        row = {
            "return": ret,
            "totals": {k: v for k, v in totals.items() if _finite(v) is not None},
            "outcome": record.get("outcome"),
            "num_steps": record.get("num_steps"),
            "invalid_count": record.get("invalid_actions"),
        }
        rows.append(row)
        if len(run.episodes) < max_episodes:
            shown = list(messages)
            final = record.get("final_observation")
            if isinstance(final, str):
                shown.append({"role": "user", "content": final})
            tools = record.get("tools")
            if isinstance(tools, str):  # the chat-completions tools column, as a JSON string
                try:
                    tools = json.loads(tools)
                except (ValueError, RecursionError):
                    tools = [tools]
            full = {**record, **row, "tools": tools}
            try:
                episode = _episode(
                    full, index=len(rows) - 1, messages=shown, steps=None, interner=interner
                )
            except RecursionError:
                run.note(f"{path.name} line {number}: nested too deeply to show; left out")
            else:
                run.episodes.append(episode)
    run.episodes_total = len(rows)
    run.summary = _collect_summary(rows)


def _collect_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The statistics of :class:`textgym.evaluation.RunningSummary` that collect records
    allow (they carry episode totals, not steps: no time-limit or token-limit rates)."""
    n = len(rows)
    returns = [r["return"] for r in rows]
    mean = sum(returns) / n if n else math.nan
    stderr = math.sqrt(sum((x - mean) ** 2 for x in returns) / (n - 1) / n) if n > 1 else math.nan
    names = sorted({k for r in rows for k in r["totals"]})
    steps = sum(int(r["num_steps"] or 0) for r in rows)
    invalid = sum(int(r["invalid_count"] or 0) for r in rows)
    return {
        "episodes": n,
        "mean_return": mean,
        "stderr_return": stderr,
        "reward_components": {k: sum(r["totals"].get(k, 0.0) for r in rows) / n for k in names},
        "outcomes": {
            o: (sum(r["outcome"] == o for r in rows) / n if n else math.nan) for o in OUTCOMES
        },
        "invalid_action_rate": invalid / steps if steps else 0.0,
        "invalid_episode_rate": sum(bool(r["invalid_count"]) for r in rows) / n if n else math.nan,
        "mean_turns": steps / n if n else math.nan,
    }


def _run_kind(path: Path) -> str:
    """``"eval"``, ``"train"``, ``"sft"`` or ``"collect"`` from the files at ``path``.

    Raises:
        NotARunError: nothing there is a textgym run.
    """
    if path.is_file() or (path / RECORDS_FILE).is_file():
        return "collect"
    if not path.is_dir():
        raise NotARunError(f"{path} does not exist; expected a run directory or a collect file")
    if (path / "metrics.jsonl").is_file():
        return "sft" if (path / "sft_summary.json").is_file() else "train"  # see load_run
    if (path / "trajectories.jsonl").is_file() or (path / "summary.json").is_file():
        return "eval"
    raise NotARunError(
        f"{path} is not a textgym run: expected summary.json or trajectories.jsonl "
        "(textgym eval --output-dir), metrics.jsonl (textgym train or sft), sft_data.jsonl "
        "(textgym collect --output-dir), or the JSONL file that textgym collect --output wrote"
    )


def load_run(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    max_episodes: int = 2000,
    interner: Interner | None = None,
) -> Run:
    """Read one run (see the module docstring) for the report.

    Episodes (``Run.episodes``) are dicts: ``index`` (0-based order in the run's file),
    ``task``, ``seed``, ``env``, ``outcome`` (:func:`episode_outcome`), ``return``, ``steps``
    (agent turns), ``invalid`` (invalid actions), ``truncated``, ``totals`` (reward component
    -> episode total), ``system`` / ``tools`` (indices into the interner's values, -1 for
    none), ``messages`` (``{"role", "segments"}``, :func:`~textgym.report.segments.message_segments`) and ``step_info``
    (per agent turn: ``reward``, ``components``, ``invalid``, ``finish``; ``None`` for collect
    records, which keep episode totals only).

    Args:
        path: A run directory, or the JSONL file of ``textgym collect``.
        name: The run's label (default: the last part of the path).
        max_episodes: Embed at most this many episodes (the first ones); the summary still
            counts them all.
        interner: Shared store of system prompts and tool lists (one per report).

    Raises:
        NotARunError: the path holds no textgym run.
    """
    path = Path(path)
    kind = _run_kind(path)
    run = Run(name=name or path.name or str(path), path=str(path), kind=kind)
    interner = interner if interner is not None else Interner()
    if kind == "collect":
        records = path / RECORDS_FILE if path.is_dir() else path
        _load_collect(records, run, max_episodes, interner)
        return run
    if kind == "eval":
        running = None
        if (path / "trajectories.jsonl").is_file():
            running = _load_trajectories(path / "trajectories.jsonl", run, max_episodes, interner)
        if (path / "summary.json").is_file():
            run.summary = _read_json(path / "summary.json", run)
        if (path / "per_task.jsonl").is_file():
            run.tasks = [row for _, row in read_jsonl_lenient(path / "per_task.jsonl", run)]
        if run.summary is None and running is not None:
            run.summary = running.result()
            run.note(
                "summary.json is missing or unreadable (an interrupted run writes it last): "
                "the summary is computed from trajectories.jsonl"
            )
        return run
    run.metrics = [row for _, row in read_jsonl_lenient(path / "metrics.jsonl", run)]
    if not any(row.get("stage") == "eval" or "reward_mean" in row for row in run.metrics):
        run.kind = "sft"  # an SFT run logs a loss, no rewards and no evaluations
    for filename, key in (("run.json", "run"), ("sft_summary.json", "sft")):
        if (path / filename).is_file() and (value := _read_json(path / filename, run)):
            run.info[key] = value
    if (path / "final_eval.json").is_file():
        run.final_eval = _read_json(path / "final_eval.json", run)
    if (path / "train_episodes.jsonl").is_file():  # a sample of a train run's rollouts
        _load_trajectories(path / "train_episodes.jsonl", run, max_episodes, interner)
    if not run.metrics:
        run.note("metrics.jsonl holds no rows yet")
    return run
