"""``textgym collect``: play episodes and write them as chat-format JSONL for SFT.

Each episode the ``--filter`` keeps is appended to the records file as it finishes, one record
per line (:func:`textgym.collect.sft_record`). With ``--output-dir DIR`` the run is a directory
like every other command's: ``DIR/sft_data.jsonl`` and, last, ``DIR/summary.json`` (what the
run printed, with the records kept); ``--output FILE.jsonl`` writes the records file alone;
with neither, the file is ``runs/collect-ENV-TIME.jsonl`` (:func:`default_output`), and the
run prints its path.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textgym.cli import batch_play, building
from textgym.cli._options import EnvUrlOptions
from textgym.cli.batch_play import BatchPlayConfig
from textgym.cli.outputs import claim_dir, claim_file, json_safe
from textgym.collect import RECORDS_FILE
from textgym.errors import UsageError
from textgym.evaluation import RunningSummary
from textgym.results import hold_interrupts, open_jsonl, write_json
from textgym.rollout import Trajectory

__all__ = ["CollectConfig", "default_output", "env_stem", "run"]


@dataclasses.dataclass(kw_only=True)
class CollectConfig(BatchPlayConfig, EnvUrlOptions):
    """Play episodes and write chat-format JSONL for SFT."""

    output: str | None = None
    """JSONL file to write (one chat record per kept episode; textgym sft --data reads it).
    Locked while the run writes; one that is not empty is refused unless --overwrite (None:
    runs/collect-ENV-YYYYmmdd-HHMMSS.jsonl, e.g. runs/collect-TicTacToe-v0-20250101-120000.jsonl;
    the run prints the path it wrote)."""
    output_dir: str | None = None
    """Directory to write the run into instead: sft_data.jsonl (the records, as --output
    writes them) and summary.json (written last: episodes played and kept, returns,
    outcomes). Locked while the run writes; one that holds a run is refused unless
    --overwrite. Give --output or --output-dir, not both."""
    overwrite: bool = False
    """Replace the records already in --output (or the run in --output-dir)."""
    filter: str | None = None
    """Keep only the episodes that match, e.g. 'outcome in win,draw' or 'return >= 0.5'
    (None: keep all)."""


Config = CollectConfig


def run(config: CollectConfig) -> int:
    """Play; append each episode the filter keeps to the JSONL file as it finishes.

    The file is locked for the whole run, and one that is not empty is refused without
    ``--overwrite`` (:mod:`textgym.cli.outputs`).
    """
    from textgym.collect import parse_filter

    try:
        wanted = parse_filter(config.filter) if config.filter else (lambda _t: True)
    except ValueError as exc:
        raise UsageError(f"--filter: {exc}") from None
    plan = batch_play.setup(config)
    if config.env_url:
        from textgym.serving.client import served_env_factory

        plan.make_env = served_env_factory(
            config.env_url, config.env_id, config.env_kwargs, config.wrappers
        )
    if config.output_dir is not None:
        if config.output is not None:
            raise UsageError(
                "--output and --output-dir both name where the records go; give one of them"
            )
        with claim_dir(Path(config.output_dir), "--output-dir", overwrite=config.overwrite) as d:
            (d / "summary.json").unlink(missing_ok=True)  # it described the records replaced
            return _run(config, plan, d / RECORDS_FILE, wanted, summary_file=d / "summary.json")
    if config.output is None:
        config.output = default_output(config.env_id)
    with claim_file(Path(config.output), "--output", overwrite=config.overwrite) as out:
        return _run(config, plan, out, wanted)


def default_output(env_id: str, now: datetime.datetime | None = None) -> str:
    """The ``--output`` of a run that gives none: ``runs/collect-ENV-YYYYmmdd-HHMMSS.jsonl``,
    ENV the env id's name without its namespace or module (characters a file name cannot hold
    become ``_``); ``now`` is the local time (default: now).

    Example:
        >>> default_output("textgym/TicTacToe-v0", datetime.datetime(2025, 1, 2, 3, 4, 5))
        'runs/collect-TicTacToe-v0-20250102-030405.jsonl'
        >>> default_output("my_pkg.envs:Grid World-v1", datetime.datetime(2025, 1, 2))
        'runs/collect-Grid_World-v1-20250102-000000.jsonl'
    """
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"runs/collect-{env_stem(env_id)}-{stamp}.jsonl"


def env_stem(env_id: str) -> str:
    """An env id as part of a file name: its name without namespace or module, with the
    characters a file name cannot hold as ``_``.

    Example:
        >>> env_stem("textgym/GSM8K-v0"), env_stem("pkg.mod:Grid World-v1")
        ('GSM8K-v0', 'Grid_World-v1')
    """
    name = re.split(r"[/:]", env_id)[-1]
    return re.sub(r"[^\w.-]", "_", name).strip("._") or "env"


def _run(
    config: CollectConfig,
    plan: batch_play.Setup,
    out: Path,
    wanted: Callable[[Any], bool],
    *,
    summary_file: Path | None = None,
) -> int:
    """:func:`run` once the output is claimed (checked and locked): the records go to ``out``;
    with ``summary_file`` (``--output-dir``) the run's summary goes there last."""
    from textgym.collect import sft_record

    policy = building.episode_policy(config, plan.stop, plan.random_action, plan.make_expert)
    running, tasks = RunningSummary(), plan.task_results(config)
    # --overwrite never writes into a hard link: a file with other names gets a new inode (the
    # lock on the old one, held by claim_file, still refuses a run through those names).
    shared = out.exists() and out.stat().st_nlink > 1
    with open_jsonl(out, fresh=shared or summary_file is not None) as sink:

        def keep(index: int, traj: Trajectory) -> None:
            if wanted(traj):
                sink.write(json.dumps(sft_record(traj), ensure_ascii=False))
            running.add(traj)
            if tasks is not None:
                tasks.add(plan.walk.task_of(index), traj)  # type: ignore[union-attr]

        played = batch_play.play(config, plan, policy, "collect", keep)
    summary = batch_play.run_summary(config, plan, policy, running, tasks, played)
    kept = f"kept {sink.count} of {summary['episodes']} episodes" + (
        f" (filter: {config.filter})" if config.filter else ""
    )
    wrote = f"{out} ({sink.count} whole records, valid JSONL)"
    if summary_file is not None:
        summary |= {"records": out.name, "records_kept": sink.count, "filter": config.filter}
        try:
            with hold_interrupts():
                write_json(summary_file, json_safe(summary))
        except OSError as exc:  # a full disk: one line, and what the records file holds
            print(
                f"textgym: error: cannot write {summary_file} ({exc.strerror or exc}); {wrote}",
                file=sys.stderr,
            )
            return 1
        wrote += f" and {summary_file}"
    if not played.complete:
        return batch_play.stopped(
            played, f"{summary['episodes']} of {plan.episodes} episodes; {kept}; wrote {wrote}"
        )
    batch_play.print_summary(summary)
    print(f"{kept}; wrote {wrote}")
    return 0
