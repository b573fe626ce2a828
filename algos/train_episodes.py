"""The episodes a GRPO run trained on, kept: a sample of each step's rollouts in
``OUTPUT_DIR/train_episodes.jsonl`` (TRL's ``log_completions``).

Each line is the record ``textgym eval`` writes to ``trajectories.jsonl``
(:meth:`~textgym.rollout.Trajectory.to_dict`: messages, rewards, reward components per turn and
their ``component_totals``, outcome, ``return``), without the token ids, loss mask and sampling
log-probs (empty lists: they are the training batch, not the episode), plus ``step`` (1-based,
as in ``metrics.jsonl``), ``group`` (the group's index in the step) and ``advantage`` (the
episode's group advantage, as the update computes it for ``scale_rewards`` group or none; with
batch, the std is of the episodes written by this process). ``textgym report`` reads the file
as a train run's episodes. A resumed run appends to it after dropping the lines of steps past
the resumed checkpoint (:meth:`TrainEpisodesLog.truncate_after`), as ``metrics.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch

from textgym.algos.advantages import group_advantages
from textgym.results import JsonlWriter, write_atomic
from textgym.rollout import Trajectory

__all__ = ["TRAIN_EPISODES", "TrainEpisodesLog", "episode_records"]

#: The file, inside the run's output directory.
TRAIN_EPISODES = "train_episodes.jsonl"


def episode_records(
    trajectories: list[Trajectory],
    *,
    step: int,
    groups: int,
    group_size: int,
    scale_rewards: str | None,
) -> list[dict]:
    """The records of the first ``groups`` groups of a step's episodes.

    Args:
        trajectories: The step's episodes, consecutive runs of ``group_size`` forming a group.
        step: The step (1-based).
        groups: Groups to keep (0: none; more than the step has: all).
        group_size: Episodes per group, G.
        scale_rewards: The run's advantage scaling (``group``, ``batch`` or ``none``).
    """
    kept = trajectories[: max(groups, 0) * group_size]
    if not kept:
        return []
    rewards = torch.tensor([t.episode_return for t in kept], dtype=torch.float64)  # [n]
    advantages = group_advantages(rewards, group_size, scale_rewards).tolist()  # [n]
    records = []
    for index, (traj, advantage) in enumerate(zip(kept, advantages, strict=True)):
        light = dataclasses.replace(traj, token_ids=[], loss_mask=[], token_logprobs=[])
        record = {"step": step, "group": index // group_size, "advantage": advantage}
        records.append(record | light.to_dict())
    return records


class TrainEpisodesLog:
    """Appends each step's sampled episodes to ``run_dir/train_episodes.jsonl``.

    Args:
        run_dir: The run's output directory (created if missing).
        groups: Groups per step to keep (``log_completions``; 0 writes nothing and creates no
            file).
    """

    def __init__(self, run_dir: str | os.PathLike[str], groups: int) -> None:
        self.path = Path(run_dir) / TRAIN_EPISODES
        self.groups = groups

    def write(self, records: list[dict]) -> None:
        """Append ``records`` (:func:`episode_records`), one JSON line each, flushed. A file
        with other names (hard links, e.g. in a ``--resume`` directory) first gets its own.

        Raises:
            OutputWriteError: a record cannot be written (a full disk): it is cut off, the
                file holds whole records.
        """
        if not records or self.groups <= 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer = JsonlWriter.append(self.path)
        try:
            for record in records:
                writer.write(json.dumps(record, ensure_ascii=False))
        finally:
            writer.close()

    def truncate_after(self, step: int) -> None:
        """Keep only the lines of steps ``<= step`` (a resume from checkpoint ``step``); a line
        that does not read as a record (half written by a killed run) goes too. The file is
        rewritten atomically (:func:`~textgym.results.write_atomic`).

        Raises:
            OutputWriteError: it cannot be rewritten (a full disk): it is as it was.
        """
        if not self.path.is_file():
            return
        kept = []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    continue
                number = record.get("step") if isinstance(record, dict) else None
                if isinstance(number, int) and number <= step:
                    kept.append(line if line.endswith("\n") else line + "\n")
        write_atomic(self.path, "".join(kept), keeps=f"{self.path.name} is as it was")
