"""``textgym eval``: play episodes with a policy and report statistics.

Prints a table (mean return with its standard error, each reward component, win/draw/loss,
invalid-action, time-limit and length-truncation rates, pass@k on a walk over the tasks) and a
one-sentence verdict. With ``--output-dir``, each episode is written to ``trajectories.jsonl``
as it finishes, the per-task rows of a walk to ``per_task.jsonl`` and the summary last to
``summary.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textgym.cli import batch_play, building
from textgym.cli._options import EnvUrlOptions
from textgym.cli.batch_play import BatchPlayConfig
from textgym.cli.collect import env_stem
from textgym.cli.outputs import claim_dir, json_safe
from textgym.evaluation import RunningSummary
from textgym.models import MODEL_NAMES
from textgym.results import hold_interrupts, open_jsonl, write_json
from textgym.rollout import Trajectory

__all__ = ["EvalConfig", "run", "verdict"]


@dataclasses.dataclass(kw_only=True)
class EvalConfig(BatchPlayConfig, EnvUrlOptions):
    """Play episodes with a policy and report statistics."""

    output_dir: str | None = None
    """Directory for summary.json, trajectories.jsonl and, when the tasks are walked,
    per_task.jsonl (None: write nothing). Locked while the run writes; one that is not empty
    is refused unless --overwrite."""
    overwrite: bool = False
    """Replace the results already in --output-dir (its summary.json, trajectories.jsonl and
    per_task.jsonl)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overwrite and self.output_dir is None:
            raise ValueError("--overwrite needs --output-dir (without one nothing is written)")


Config = EvalConfig


def run(config: EvalConfig) -> int:
    """Play, print the summary; with ``--output-dir``, save each episode as it finishes.

    The output directory is locked for the whole run, and one that is not empty is refused
    without ``--overwrite`` (:mod:`textgym.cli.outputs`).
    """
    plan = batch_play.setup(config)
    if config.env_url:
        from textgym.serving.client import remote_env_factory

        recipe = {
            "env_id": config.env_id,
            "env_kwargs": json.loads(json.dumps(config.env_kwargs)),
            "wrappers": list(config.wrappers),
        }
        plan.make_env = remote_env_factory(config.env_url, recipe)
    if config.output_dir is None:
        return _run(config, plan, None)
    out = Path(config.output_dir)
    with claim_dir(out, "--output-dir", overwrite=config.overwrite) as out_dir:
        return _run(config, plan, out_dir)


def _run(config: EvalConfig, plan: batch_play.Setup, out_dir: Path | None) -> int:
    """:func:`run` once the output directory (if any) is claimed."""
    policy = building.episode_policy(config, plan.stop, plan.random_action, plan.make_expert)
    running, tasks = RunningSummary(), plan.task_results(config)
    with contextlib.ExitStack() as stack:
        sink = None
        if out_dir is not None:
            # The old summary and per-task rows describe trajectories about to be overwritten.
            (out_dir / "summary.json").unlink(missing_ok=True)
            (out_dir / "per_task.jsonl").unlink(missing_ok=True)
            sink = stack.enter_context(open_jsonl(out_dir / "trajectories.jsonl", fresh=True))

        def keep(index: int, traj: Trajectory) -> None:
            if sink is not None:
                sink.write(traj.to_json())
            running.add(traj)
            if tasks is not None:
                tasks.add(plan.walk.task_of(index), traj)  # type: ignore[union-attr]

        played = batch_play.play(config, plan, policy, "eval", keep)
    summary = batch_play.run_summary(config, plan, policy, running, tasks, played)
    files: list[Path] = []
    if out_dir is not None:
        try:
            with hold_interrupts():
                if tasks is not None:
                    with open_jsonl(out_dir / "per_task.jsonl") as rows:
                        for row in tasks.rows():
                            rows.write(json.dumps(json_safe(row), ensure_ascii=False))
                write_json(out_dir / "summary.json", json_safe(summary))
        except OSError as exc:  # a full disk: one line, and what the trajectories file holds
            assert sink is not None
            cause = f"{played.error}; " if played.error else ""
            print(
                f"textgym: error: {cause}cannot write the summary into {out_dir} "
                f"({exc.strerror or exc}); {out_dir / 'trajectories.jsonl'} holds "
                f"{sink.count} whole episodes (valid JSONL)",
                file=sys.stderr,
            )
            return 1
        files = [
            out_dir / name
            for name in ("summary.json", "trajectories.jsonl", "per_task.jsonl")
            if name != "per_task.jsonl" or tasks is not None
        ]
    if not played.complete:
        saved = (
            f'; wrote them to {_and(files[1:] + files[:1])} ("complete": false)'
            if out_dir is not None
            else "; nothing saved (no --output-dir)"
        )
        return batch_play.stopped(
            played, f"{summary['episodes']} of {plan.episodes} episodes{saved}"
        )
    batch_play.print_summary(summary)
    print(verdict(summary, expert=plan.expert_policy))
    if out_dir is not None:
        print(f"wrote {_and(files)}")
    return 0


def _and(paths: Sequence[Path]) -> str:
    """``"a and b"``, ``"a, b and c"``."""
    names = [str(p) for p in paths]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def verdict(summary: dict[str, Any], expert: str | None = None) -> str:
    """One plain sentence on how the policy did, and for a built-in base model what to run next.

    Args:
        summary: The run's summary (:func:`textgym.cli.batch_play.run_summary`).
        expert: The env's expert policy (:attr:`textgym.TextEnv.expert_policy`), which the
            hint names for collecting SFT data; ``None``: the hint names GRPO only.
    """
    who = summary["policy"] + (f" ({summary['model']})" if summary.get("model") else "")
    parts = [f"legal, parsable actions in {1.0 - summary['invalid_action_rate']:.0%} of turns"]
    outcomes = summary["outcomes"]
    if any(v for v in outcomes.values()):
        plural = {"win": "wins", "draw": "draws", "loss": "losses"}
        parts.append(
            ", ".join(
                f"{rate:.0%} {plural.get(name, name)}"
                for name, rate in outcomes.items()
                if not math.isnan(rate)
            )
        )
    else:
        parts.append(f"mean return {summary['mean_return']:.3f}")
    if summary.get("tasks") is not None:
        tasks, k = summary["tasks"], summary["tasks"]["rollouts_per_task"]
        parts.append(
            f"pass@1 {tasks['pass@1']:.0%}"
            + (f", pass@{k} {tasks[f'pass@{k}']:.0%}" if k > 1 else "")
            + f" over {tasks['played']} tasks"
        )
    if summary["truncated_rate"] > 0:
        parts.append(f"{summary['truncated_rate']:.0%} of episodes hit the turn limit")
    text = f"{who} over {summary['episodes']} episodes: " + "; ".join(parts) + "."
    if summary["policy"] == "hf" and summary.get("model") in MODEL_NAMES:  # a base model
        env_id = summary["env_id"]
        if expert is not None:
            data = f"{expert}-{env_stem(env_id)}.jsonl"
            text += (
                f" To train it: collect expert episodes with `textgym collect {env_id} "
                f"--policy {expert} --output {data}`, fine-tune on them with `textgym sft "
                f"--data {data} --model {summary['model']}`, then `textgym train` (README, "
                "'Training')."
            )
        else:
            text += (
                f" To train it: `textgym train {env_id}` (GRPO; the env has no expert policy "
                "to collect SFT data from; README, 'Training')."
            )
    return text
