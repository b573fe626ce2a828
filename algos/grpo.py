"""Group Relative Policy Optimization for LLM policies on textgym envs (``textgym train``).

GRPO (Shao et al., 2024, "DeepSeekMath") drops PPO's value network: each task is played by a
*group* of ``G`` episodes that share the seed (same task, same opponent), and an episode's
advantage is its return measured against its group. One training step of :func:`train`:

1. **Rollout** ``M`` tasks x ``G`` copies with :func:`textgym.rollout.rollout`, token-in /
   token-out, so every trajectory carries its token ids, sampling log-probs and a loss mask
   that covers only the policy's own tokens (multi-turn episodes included)
   (:mod:`textgym.algos.grpo_rollouts`). :func:`step_rollouts` is the one door: a round played
   now (with dynamic sampling, more rounds; with expert guidance, the expert in flat groups)
   or the server's rollouts played during the last update; the update sees a
   :class:`StepRollouts` either way.
2. **Update** (:func:`~textgym.algos.grpo_update.update`): advantages per group
   (:func:`~textgym.algos.advantages.group_advantages`; groups whose rewards are all equal carry no
   signal and are left out of the backward pass), then ``num_iterations`` optimizer steps with
   the clipped surrogate of the chosen ``loss_type`` (:func:`~textgym.algos.losses.policy_loss`),
   gradients accumulated over micro-batches (``micro_batch_size`` right-padded sequences, or
   rows of ``micro_batch_tokens`` packed tokens) with a normaliser of the whole batch, so the
   update does not depend on how the batch is split.
3. **Log, evaluate, save**: metrics (JSONL + TensorBoard, one progress line per step), an
   evaluation and a checkpoint every few steps.

This module reads in that order: the loop (:func:`train`) and one step; the run around them
(set-up, saving, evaluation, the time limit and Ctrl-C) is :mod:`textgym.algos.grpo_run`, the
update and the optimizer step under it are :mod:`textgym.algos.grpo_update`. The arguments and their checks are
:mod:`textgym.algos.grpo_config`; the learner state (model, reference, optimizer, scheduler,
device, non-finite guard) is one :class:`~textgym.algos.learner.Learner`. The maths lives in :mod:`textgym.algos.losses`.
The same code runs on CPU (float32) and CUDA (bf16 autocast, optional gradient checkpointing and
LoRA).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import textgym  # noqa: F401  (registers the envs)
from textgym.algos.checkpoints import check_disk_for_run
from textgym.algos.distributed import (
    DistributedContext,
    all_reduce_sum,
    init_distributed,
)
from textgym.algos.dynamic_sampling import sample_groups
from textgym.algos.grpo_config import GRPOConfig, check_world_size
from textgym.algos.grpo_rollouts import (
    rollout_metrics,
    rollout_step,
    step_tasks,
)
from textgym.algos.grpo_run import (
    GRPORun,
    StepStart,
    StepStopped,
    after_step,
    check_stop,
    evaluate_first,
    every,
    finish_run,
    finished,
    give_up_step,
    report_time_limit,
    start_run,
)
from textgym.algos.grpo_update import update
from textgym.algos.league import OpponentLeague
from textgym.algos.learnability import hint_rule, member_hint_rules
from textgym.algos.learner import Learner
from textgym.algos.metric_summaries import progress_line, skipped_update_note
from textgym.algos.policy_drift import start_policy_drift
from textgym.algos.resume import run_to_continue
from textgym.algos.train_episodes import episode_records
from textgym.rollout import Trajectory

__all__ = ["train"]


def train(config: GRPOConfig) -> dict[str, Any]:
    """Run GRPO as ``config`` says; return the last evaluation's metrics.

    With ``resume``, the latest checkpoint in ``output_dir`` is continued; a run that already
    finished its ``steps`` returns its ``final_eval.json`` untouched.

    With ``resume`` and an ``output_dir`` whose run stopped before its first checkpoint, the
    run starts again from scratch. A step is saved before it is evaluated, so an evaluation
    that fails or is interrupted costs no training; a resumed run first plays the evaluation
    its checkpoint's step was owed when ``metrics.jsonl`` lacks it (and never plays one twice),
    so its rows are an uninterrupted run's. A Ctrl-C lets the step in progress finish (an
    evaluation is abandoned; a step whose dynamic sampling rounds are still playing is given
    up before its next round), saves the last completed step and raises
    :class:`~textgym.algos.common.TrainingInterrupted` naming the checkpoint; a second Ctrl-C
    ends the process at once (:class:`~textgym.algos.common.StopOnInterrupt`). The time limit is checked after every
    step, before every extra rollout round and after every turn of an evaluation (one process):
    what it cuts short is given up as a Ctrl-C's, and the run ends with its last step saved.

    Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel
    (:mod:`textgym.algos.distributed`): each rank plays and learns from its share of the
    step's groups, rank 0 logs, evaluates and saves, and the other ranks return ``{}``.

    Raises:
        SetupError: without ``resume``, ``output_dir`` already holds a run
            (:func:`~textgym.algos.resume.run_to_continue`), refused before anything is written.
        ValueError: an env or model that cannot be used (see the messages); a resume whose
            config differs in what the run learns (:func:`~textgym.algos.resume.check_resumable`)
            or whose checkpoint is past ``steps``; an episode return that is NaN or inf (with
            ``scale_rewards='none'``, an advantage beyond the loss's float32);
            ``groups_per_step`` not a multiple of the number of ranks.
        CheckpointError: ``resume`` with no checkpoint in ``output_dir``, or one that does not
            load (damaged files, missing keys, NaN/inf or wrongly shaped weights), found before
            any step runs.
        InsufficientDiskSpace: too little free disk for a checkpoint, found before the first
            step (:func:`~textgym.algos.checkpoints.check_disk_for_run`), or at a save: the run
            stops with its last checkpoint intact (the last step's save falls back to the
            weights without the optimizer state when only they fit).
        TrainingInterrupted: Ctrl-C; the last completed step was saved.
        FloatingPointError: optimizer steps keep having a non-finite loss or gradient norm
            (:class:`~textgym.algos.common.NonFiniteGuard`); nothing non-finite is saved.
    """
    if config.dry_run:  # its own module; imported here, as it builds on this one
        from textgym.algos.grpo_dry_run import dry_run

        return dry_run(config)
    torch.manual_seed(config.seed)
    ctx, out = init_distributed(config.device), Path(config.output_dir)
    check_world_size(config, ctx)
    # Checked before any record is touched.
    checkpoint = run_to_continue(out, config, "final_eval.json")
    if checkpoint is not None and finished(checkpoint, config):
        print(f"{out} already finished its {config.steps} steps; nothing to do")
        return json.loads((out / "final_eval.json").read_text())
    run = start_run(config, ctx, checkpoint)
    with run.logger, run.server or contextlib.nullcontext(), run.stop:
        if ctx.is_main:
            check_disk_for_run(run.learner)  # before any step, not after the last
        if config.resume:  # rows after the checkpoint (all rows: resumed from scratch) go
            run.logger.truncate_after(run.start)
            if ctx.is_main:
                run.episodes.truncate_after(run.start)
        last = config.steps
        if evaluate_first(run) == "out of time":
            report_time_limit(run, f"the evaluation after step {run.start}", run.start)
            last = run.start  # no step this time
        for step in range(run.start + 1, last + 1):
            at_start = StepStart.of(run)
            try:
                metrics = _train_step(run, step)
            except StepStopped as stopped:  # in a loop of the step: it is given up
                give_up_step(run, step, stopped.reason, at_start)
                break
            run.progressed = True
            run.logger.log(step, metrics)
            _report_progress(run, step, metrics)
            if after_step(run, step) == "out of time":
                break
    finish_run(run)
    return run.eval_metrics


def _train_step(run: GRPORun, step: int) -> dict[str, float]:
    """Step ``step``: its rollouts (:func:`step_rollouts`), the update, and the step's metrics
    with timings."""
    learner, config, ctx = run.learner, run.config, run.ctx
    began = time.perf_counter()
    rollouts = step_rollouts(run, step)
    run.policy.clear_cache()  # the update needs the memory; new weights void the cache anyway
    rolled = time.perf_counter()
    with torch.profiler.record_function("grpo.update"):
        # The rollout metrics describe every episode played (with dynamic sampling the batch
        # is a biased pick of them); the update's, the batch.
        metrics = update(learner, rollouts.batch) | rollout_metrics(rollouts.played, ctx)
    metrics |= rollouts.metrics
    if run.league is not None and rollouts.opponents is not None:
        metrics |= run.league.metrics()  # the draw this step's groups came from
        _record_league(run.league, rollouts.opponents, rollouts.played, config, ctx)
    if every(config.eval_every, step) or step == config.steps:
        # An extra forward pass without gradients: on evaluation steps only, off the hot path,
        # and timed on its own (not in update_time_s).
        drift_began = time.perf_counter()
        metrics |= start_policy_drift(learner, rollouts.batch)
        metrics["drift_time_s"] = time.perf_counter() - drift_began
    if ctx.is_main:
        run.episodes.write(_episode_records(rollouts.batch, config, step))
    if run.server is not None:
        metrics |= _sync_server(run, step, rollouts)
    timing = _timing(learner, began, rolled)
    timing["update_time_s"] -= metrics.get("drift_time_s", 0.0)
    timing["step_time_s"] -= metrics.get("drift_time_s", 0.0)  # rollout + update, as each step
    return metrics | timing


# ----------------------------------------------------------------------------- the step's parts


@dataclass
class StepRollouts:
    """One step's rollouts, whichever source played them (:func:`step_rollouts`).

    Attributes:
        batch: The update's ``M x G`` episodes, groups in order.
        played: Every episode played this step (the rollout metrics describe these): the batch,
            or more with dynamic sampling, or the sampled episodes the expert's replaced.
        opponents: The league's opponent style of each played group, or ``None``.
        metrics: The source's own (dynamic sampling's rounds, expert guidance's fractions).
        stale: The episodes sampled from the weights one update behind (asynchronous server
            rollouts, submitted a step before).
        sync_s: Seconds spent pushing weights to the server before this step's update.
    """

    batch: list[Trajectory]
    played: list[Trajectory]
    opponents: list[str] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    stale: bool = False
    sync_s: float = 0.0


def step_rollouts(run: GRPORun, step: int) -> StepRollouts:
    """Step ``step``'s rollouts, from one of three sources: the server's background rollouts
    (``async_rollouts``: played during the last update), dynamic sampling's rounds, or one round
    (the expert's episodes in its flat groups with ``expert_guidance``); the policy is the
    in-process one or the llama-server client alike. With asynchronous server rollouts the next
    step's rollouts start here, on the weights of this step's start."""
    server, config = run.server, run.config
    if server is not None and server.pending:
        played = server.collect()
        rollouts = StepRollouts(played, played, stale=True)
    else:
        # Named ranges for torch.profiler (benchmarks/grpo_vs_trl.py --profile-output); a
        # few microseconds when no profiler runs.
        with torch.profiler.record_function("grpo.rollout"):
            rollouts = _play_step(run, step)
    if server is not None and config.async_rollouts and step < config.steps:
        rollouts.sync_s = server.push() if step > run.start + 1 else 0.0  # this step's weights
        env, policy, ctx = run.env, run.policy, run.ctx
        server.submit(lambda s=step: rollout_step(env, policy, config, s, ctx))
    return rollouts


def _play_step(run: GRPORun, step: int) -> StepRollouts:
    """Step ``step``'s rollouts played now: dynamic sampling's rounds, or one round."""
    config = run.config
    if config.dynamic_sampling_rounds:
        sampled = sample_groups(
            lambda r: play_round(run, step, r),
            config.groups_per_step,
            config.group_size,
            config.dynamic_sampling_rounds,
            check=lambda: check_stop(run),
        )
        metrics = sampled.metrics(config.group_size)
        return StepRollouts(sampled.batch, sampled.played, sampled.opponents, metrics)
    played, opponents = play_round(run, step, 0)
    if run.guide is None:
        return StepRollouts(played, played, opponents)
    tasks = step_tasks(run.env, config, step - 1, run.ctx, opponents=opponents)
    batch, guided = run.guide.guide(played, tasks, config.group_size, run.policy)
    return StepRollouts(batch, played, opponents, guided)


def _sync_server(run: GRPORun, step: int, rollouts: StepRollouts) -> dict[str, float]:
    """After the update: the new weights pushed to the server for the next step's rollouts
    (synchronous server rollouts), and the step's staleness and weight-sync metrics."""
    config, server = run.config, run.server
    assert server is not None
    sync_s = rollouts.sync_s
    if not config.async_rollouts and step < config.steps:
        sync_s = server.push()  # the next step samples from this update's weights
    return {"sampler_staleness_steps": float(rollouts.stale), "weight_sync_s": sync_s}


def play_round(run: GRPORun, step: int, round_: int) -> tuple[list[Trajectory], list[str] | None]:
    """Rollout round ``round_`` of step ``step`` (0: the step's own groups; more with dynamic
    sampling), with the league's draw of one style per group (the same on every rank)."""
    config = run.learner.config
    opponents = None
    if run.league is not None:
        key = f"{config.seed}/{step}/league" + (f"/{round_}" if round_ else "")
        opponents = run.league.draw(config.groups_per_step, key)
    trajectories = rollout_step(
        run.env, run.policy, config, step - 1, run.learner.dist, opponents=opponents, round_=round_
    )
    return trajectories, opponents


def _record_league(
    league: OpponentLeague,
    opponents: list[str],
    trajectories: list[Trajectory],
    config: GRPOConfig,
    ctx: DistributedContext,
) -> None:
    """Add the step's outcomes per style to the league, summed over the ranks (each played its
    contiguous share of the groups, :func:`rollout_step`)."""
    per_episode = [style for style in opponents for _ in range(config.group_size)]
    first = ctx.rank * len(trajectories) if ctx.distributed else 0
    mine = per_episode[first : first + len(trajectories)]
    counts = league.counts(mine, [t.outcome for t in trajectories])
    league.add(all_reduce_sum(counts, ctx) if ctx.distributed else counts)


def _timing(learner: Learner, began: float, rolled: float) -> dict[str, float]:
    """Wall times of the step (seconds), the learning rate, and CUDA peak memory (GiB)."""
    now = time.perf_counter()
    metrics = {
        "rollout_time_s": rolled - began,
        "update_time_s": now - rolled,
        "step_time_s": now - began,
        "lr": learner.scheduler.get_last_lr()[0],
    }
    if learner.device.type == "cuda":
        metrics["cuda_max_memory_gib"] = torch.cuda.max_memory_allocated(learner.device) / 2**30
    return metrics


def _report_progress(run: GRPORun, step: int, metrics: dict[str, float]) -> None:
    """One line on stderr (``progress``, rank 0): loss, reward, step time, sampled tokens per
    second, and why no update ran when none did (every group had equal rewards; a non-finite
    loss or gradient norm). When the step barely learns, a second line, ``hint: ...``, names
    the measured state and the knob to turn (:func:`~textgym.algos.learnability.hint_rule`),
    printed when its rule differs from the last hint's (not again for every step alike); in a
    mixture, each member whose own episodes barely learn gets its line, ``hint (NAME): ...``
    (:func:`~textgym.algos.learnability.member_hint_rules`)."""
    config, ctx = run.config, run.ctx
    if config.progress and ctx.is_main:
        tokens = metrics["completion_tokens_mean"] * config.batch_size
        line = progress_line(
            step,
            config.steps,
            loss=metrics["loss"],
            reward=metrics["reward_mean"],
            seconds=metrics["step_time_s"],
            tokens=tokens,
            note=skipped_update_note(metrics, config.groups_per_step),
        )
        print(line, file=sys.stderr, flush=True)
        rules = {f" ({name})": rule for name, rule in member_hint_rules(metrics).items()}
        if (rule := hint_rule(metrics)) is not None:
            rules[""] = rule
        for scope, (name, hint) in rules.items():
            if run.hint_rules.get(scope) != name:
                print(f"hint{scope}: {hint}", file=sys.stderr, flush=True)
        run.hint_rules = {scope: name for scope, (name, _) in rules.items()}


def _episode_records(
    trajectories: list[Any], config: GRPOConfig, step: int
) -> list[dict[str, Any]]:
    """The records of step ``step``'s first ``log_completions`` groups (this rank's)."""
    return episode_records(
        trajectories,
        step=step,
        groups=config.log_completions,
        group_size=config.group_size,
        scale_rewards=config.scale_rewards,
    )
