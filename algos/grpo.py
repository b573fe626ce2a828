"""Group Relative Policy Optimization for LLM policies on textgym envs (``textgym train``).

GRPO (Shao et al., 2024, "DeepSeekMath") drops PPO's value network: each task is played by a
*group* of ``G`` episodes that share the seed (same task, same opponent), and an episode's
advantage is its return measured against its group. One training step of :func:`train`:

1. **Rollout** ``M`` tasks x ``G`` copies with :func:`textgym.rollout.rollout`, token-in /
   token-out, so every trajectory carries its token ids, sampling log-probs and a loss mask
   that covers only the policy's own tokens (multi-turn episodes included)
   (:mod:`textgym.algos.grpo_rollouts`).
2. **Update** (:func:`~textgym.algos.grpo_update.update`): advantages per group
   (:func:`~textgym.algos.advantages.group_advantages`; groups whose rewards are all equal carry no
   signal and are left out of the backward pass), then ``num_iterations`` optimizer steps with
   the clipped surrogate of the chosen ``loss_type`` (:func:`~textgym.algos.losses.policy_loss`),
   gradients accumulated over micro-batches (``micro_batch_size`` right-padded sequences, or
   rows of ``micro_batch_tokens`` packed tokens) with a normaliser of the whole batch, so the
   update does not depend on how the batch is split.
3. **Log, evaluate, save**: metrics (JSONL + TensorBoard, one progress line per step), an
   evaluation and a checkpoint every few steps.

This module reads in that order: the loop (:func:`train`) and one step, then the run's set-up,
saving and evaluation around them (:func:`make_learner` builds the learner); the update and
the optimizer step under it are :mod:`textgym.algos.grpo_update`. The arguments and their checks are
:mod:`textgym.algos.grpo_config`; the learner state (model, reference, optimizer, scheduler,
device, non-finite guard) is one :class:`~textgym.algos.learner.Learner`. The maths lives in :mod:`textgym.algos.losses`.
The same code runs on CPU (float32) and CUDA (bf16 autocast, optional gradient checkpointing and
LoRA).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import textgym  # noqa: F401  (registers the envs)
from textgym.algos.checkpoint_layout import rng_state, set_rng_state
from textgym.algos.checkpoints import check_disk_for_run, save_trainer_checkpoint
from textgym.algos.common import (
    StopOnInterrupt,
    TrainingInterrupted,
    make_optimizer,
)
from textgym.algos.distributed import (
    SINGLE_PROCESS,
    DistributedContext,
    all_reduce_sum,
    any_rank,
    barrier,
    broadcast_parameters,
    init_distributed,
)
from textgym.algos.dynamic_sampling import sample_groups
from textgym.algos.grpo_config import GRPOConfig, check_world_size
from textgym.algos.grpo_rollouts import (
    TrainingEnv,
    evaluate,
    rollout_metrics,
    rollout_policies,
    rollout_step,
    training_env,
)
from textgym.algos.grpo_update import update
from textgym.algos.league import OpponentLeague
from textgym.algos.learnability import hint_rule, member_hint_rules
from textgym.algos.learner import Learner
from textgym.algos.metric_plots import plot_metrics
from textgym.algos.metric_rows import METRICS_FILENAME, read_metrics
from textgym.algos.metric_summaries import progress_line, skipped_update_note
from textgym.algos.metrics import rank_logger, write_run_record
from textgym.algos.model_loading import (
    adapter_start,
    load_trainable_model,
    resolve_device,
)
from textgym.algos.policy_drift import start_policy_drift
from textgym.algos.resume import checkpoint_to_resume, evaluation_row, load_checkpoint
from textgym.algos.server_rollouts import ServerRollouts
from textgym.algos.train_episodes import TrainEpisodesLog, episode_records
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress
from textgym.results import write_json
from textgym.rollout import Trajectory

__all__ = ["make_learner", "train"]


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
    ends the process at once (:class:`StopOnInterrupt`). The time limit is checked after every
    step, before every extra rollout round and after every turn of an evaluation (one process):
    what it cuts short is given up as a Ctrl-C's, and the run ends with its last step saved.

    Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel
    (:mod:`textgym.algos.distributed`): each rank plays and learns from its share of the
    step's groups, rank 0 logs, evaluates and saves, and the other ranks return ``{}``.

    Raises:
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
    checkpoint = _checkpoint_to_resume(config, out)  # checked before any record is touched
    if checkpoint is not None and _finished(checkpoint, config):
        print(f"{out} already finished its {config.steps} steps; nothing to do")
        return json.loads((out / "final_eval.json").read_text())
    run = _start_run(config, ctx, checkpoint)
    with run.logger, run.server or contextlib.nullcontext(), run.stop:
        if ctx.is_main:
            check_disk_for_run(run.learner)  # before any step, not after the last
        if config.resume:  # rows after the checkpoint (all rows: resumed from scratch) go
            run.logger.truncate_after(run.start)
            if ctx.is_main:
                run.episodes.truncate_after(run.start)
        last = config.steps
        if _evaluate_first(run) == "out of time":
            _out_of_time(run, f"the evaluation after step {run.start}", run.start)
            last = run.start  # no step this time
        for step in range(run.start + 1, last + 1):
            at_start = _StepStart.of(run)
            try:
                metrics = _train_step(run, step)
            except _StepStopped as stopped:  # in a loop of the step: it is given up
                _give_up_step(run, step, stopped.reason, at_start)
                break
            run.progressed = True
            run.logger.log(step, metrics)
            _report_progress(run, step, metrics)
            if _after_step(run, step) == "out of time":
                break
    _finish_run(run)
    return run.eval_metrics


def _train_step(run: _Run, step: int) -> dict[str, float]:
    """Step ``step``: its rollouts (or, with asynchronous server rollouts, the ones submitted
    a step before), the update, and the step's metrics with timings."""
    learner, env, policy, server = run.learner, run.env, run.policy, run.server
    config, ctx = learner.config, learner.dist
    began = time.perf_counter()
    stale, sync_s = 0.0, 0.0
    opponents = None
    if server is not None and server.pending:
        trajectories, stale = server.collect(), 1.0  # sampled one update behind
        played = trajectories
    else:
        # Named ranges for torch.profiler (benchmarks/grpo_vs_trl.py --profile-output); a
        # few microseconds when no profiler runs.
        with torch.profiler.record_function("grpo.rollout"):
            if config.dynamic_sampling_rounds:
                sampled = sample_groups(
                    lambda r: play_round(run, step, r),
                    config.groups_per_step,
                    config.group_size,
                    config.dynamic_sampling_rounds,
                    check=lambda: _check_stop(run),
                )
                trajectories, played, opponents = sampled.batch, sampled.played, sampled.opponents
            else:
                trajectories, opponents = play_round(run, step, 0)
                played = trajectories
    if server is not None and config.async_rollouts and step < config.steps:
        sync_s = server.push() if step > run.start + 1 else 0.0  # this step's weights
        server.submit(lambda s=step: rollout_step(env, policy, config, s, ctx))
    policy.clear_cache()  # the update needs the memory; new weights void the cache anyway
    rolled = time.perf_counter()
    with torch.profiler.record_function("grpo.update"):
        # The rollout metrics describe every episode played (with dynamic sampling the batch
        # is a biased pick of them); the update's, the batch.
        metrics = update(learner, trajectories) | rollout_metrics(played, ctx)
    if config.dynamic_sampling_rounds:
        metrics |= sampled.metrics(config.group_size)
    if run.league is not None and opponents is not None:
        metrics |= run.league.metrics()  # the draw this step's groups came from
        _record_league(run.league, opponents, played, config, ctx)
    if _every(config.eval_every, step) or step == config.steps:
        # An extra forward pass without gradients: on evaluation steps only, off the hot path,
        # and timed on its own (not in update_time_s).
        drift_began = time.perf_counter()
        metrics |= start_policy_drift(learner, trajectories)
        metrics["drift_time_s"] = time.perf_counter() - drift_began
    if ctx.is_main:
        run.episodes.write(_episode_records(trajectories, config, step))
    if server is not None:
        if not config.async_rollouts and step < config.steps:
            sync_s = server.push()  # the next step samples from this update's weights
        metrics |= {"sampler_staleness_steps": stale, "weight_sync_s": sync_s}
    timing = _timing(learner, began, rolled)
    timing["update_time_s"] -= metrics.get("drift_time_s", 0.0)
    timing["step_time_s"] -= metrics.get("drift_time_s", 0.0)  # rollout + update, as each step
    return metrics | timing


# ----------------------------------------------------------------------------- the run


def make_learner(
    config: GRPOConfig,
    *,
    max_turns: int = 1,
    device: torch.device | None = None,
    dist: DistributedContext = SINGLE_PROCESS,
) -> Learner:
    """Load and prepare ``config.model`` (:func:`~textgym.algos.model_loading.load_trainable_model`),
    a reference copy when ``beta > 0``, AdamW and its warm-up schedule.

    Args:
        config: The run's arguments.
        max_turns: Most agent turns per episode (the env's step limit), for ``max_loss_tokens``.
        device: Where to train; default ``resolve_device(config.device)``.
        dist: The rank context; with more than one rank, rank 0's trainable weights are
            broadcast to the others.

    Raises:
        ValueError: CUDA asked for and not available; a model that cannot be loaded.
    """
    device = resolve_device(config.device) if device is None else device
    model, tokenizer, reference = load_trainable_model(config, device, reference=config.beta > 0)
    broadcast_parameters(model, dist)
    start_adapter = adapter_start(model) if config.continue_adapter else None
    optimizer, scheduler = make_optimizer(model, config)
    return Learner(
        config=config,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        max_loss_tokens=config.max_new_tokens * max_turns,
        device=device,
        reference=reference,
        start_adapter=start_adapter,
        tokenizer=tokenizer,
        pad_token_id=tokenizer.pad_token_id or 0,
        dist=dist,
    )


@dataclass(kw_only=True)
class _Run:
    """What the loop of :func:`train` reads and keeps between steps."""

    config: GRPOConfig
    ctx: DistributedContext
    env: TrainingEnv
    learner: Learner
    policy: HFPolicy  # samples the training rollouts (the server's client with llama-server)
    evaluator: HFPolicy
    server: ServerRollouts | None  # rollout_engine llama-server
    start: int  # the step the run starts after (the resumed checkpoint's; 0)
    deadline: float  # time.perf_counter() at the time limit (inf without one)
    logger: Any  # MetricsLogger on rank 0, NullLogger on the others
    stop: StopOnInterrupt
    episodes: TrainEpisodesLog  # a sample of each step's rollouts (train_episodes.jsonl)
    league: OpponentLeague | None = None  # opponent_priority "loss"
    eval_metrics: dict[str, Any] = field(default_factory=dict)  # the last evaluation's
    # The learnability rule of the last hint printed, by scope ("": the step, else a member).
    hint_rules: dict[str, str] = field(default_factory=dict)
    saved: int = 0  # the last step with a checkpoint (the resumed one's; 0: none)
    final_eval_owed: bool = False  # the last step is done, its evaluation was given up
    progressed: bool = False  # a step of this invocation is done: the time limit may cut now

    @property
    def out(self) -> Path:
        return Path(self.config.output_dir)


def _start_run(config: GRPOConfig, ctx: DistributedContext, checkpoint: Path | None) -> _Run:
    """The run record (rank 0), the training env, the learner and its policies (on a
    llama-server, with ``rollout_engine`` llama-server), the checkpoint's state restored, the
    time limit's deadline, the logger and the Ctrl-C handler (not entered yet)."""
    out = Path(config.output_dir)
    if ctx.is_main:
        write_run_record(out, config)
    env = training_env(config)
    learner = make_learner(config, max_turns=env.max_turns, device=ctx.device, dist=ctx)
    policy, evaluator = rollout_policies(learner, env)
    server = None
    if config.rollout_engine == "llama-server":
        server = ServerRollouts(
            config, learner, list(env.stop), out / "llama-server" / f"rank{ctx.rank}"
        )
        policy = server.policy
    league = None
    if config.opponent_priority == "loss":
        league = OpponentLeague(tuple(config.env_kwargs["opponent"]))
    start = _restore(checkpoint, learner, policy, league)
    deadline = time.perf_counter() + 60 * (config.time_limit_minutes or math.inf)
    logger, stop = rank_logger(out, config, ctx, resume=config.resume), StopOnInterrupt()
    return _Run(
        config=config,
        ctx=ctx,
        env=env,
        learner=learner,
        policy=policy,
        evaluator=evaluator,
        server=server,
        start=start,
        deadline=deadline,
        logger=logger,
        stop=stop,
        episodes=TrainEpisodesLog(out, config.log_completions),
        league=league,
        saved=start,
    )


def _after_step(run: _Run, step: int) -> str | None:
    """After step ``step``: save (at the last step, the time limit, a Ctrl-C or every
    ``save_every`` steps), stop on a Ctrl-C, evaluate (rank 0, at the last step and every
    ``eval_every``); ``"out of time"`` when the time limit ends the run here, else ``None``.

    Raises:
        TrainingInterrupted: a Ctrl-C on any rank, once the step is saved.
    """
    config, ctx = run.config, run.ctx
    done = step == config.steps
    out_of_time, stopping = any_rank([time.perf_counter() > run.deadline, run.stop.requested], ctx)
    saved = done or out_of_time or stopping or _every(config.save_every, step)
    if saved:  # save first: an evaluation that fails or is interrupted costs no work
        _save(run.learner, run.policy, step, final=done, league=run.league)
        run.saved = step
        # A signal during the save: the evaluation is owed, and a resume plays it first.
        (stopping,) = any_rank([run.stop.requested], ctx)
    if stopping:
        raise TrainingInterrupted(step, run.out / f"checkpoint-{step}")
    if ctx.is_main and _evaluates(config, step):
        evaluation = _evaluate_saved(run, step)
        if evaluation is None:  # the time limit cut it short: a resume plays it again
            run.final_eval_owed = done
            _out_of_time(run, f"the evaluation after step {step}", step)
            return "out of time"
        run.eval_metrics = evaluation
        run.logger.log(step, evaluation, stage="eval")
    if out_of_time and not done:
        _out_of_time(run, f"step {step}", step)
        return "out of time"
    return None


def _finish_run(run: _Run) -> None:
    """Rank 0 plots the metrics and writes ``final_eval.json``; every rank waits for it, so
    the run's files are complete when :func:`train` returns."""
    if run.ctx.is_main:
        if read_metrics(run.out / "metrics.jsonl"):
            plot_metrics(run.out / "metrics.jsonl", run.out / "plots")
        if not run.final_eval_owed:  # else the run is not finished: --resume evaluates
            write_json(run.out / "final_eval.json", run.eval_metrics)  # in one step, atomic
    barrier(run.ctx)


def _evaluate_saved(run: _Run, step: int) -> dict[str, float] | None:
    """Evaluate after ``step``; ``None`` when the time limit cut the evaluation short. If it
    fails, is cut short or a Ctrl-C abandons it, save the step first when it was not saved yet
    (then re-raise; a Ctrl-C as :class:`TrainingInterrupted`)."""
    try:
        return _evaluate_stoppable(run, step)
    except BaseException as exc:
        if run.saved < step:
            _save(run.learner, run.policy, step, league=run.league)
            run.saved = step
        if isinstance(exc, KeyboardInterrupt | _StepStopped) and _interrupted(exc):
            raise TrainingInterrupted(step, run.out / f"checkpoint-{step}") from None
        if isinstance(exc, _StepStopped):
            return None
        raise


def _evaluate_stoppable(run: _Run, step: int) -> dict[str, float]:
    """:func:`_evaluate` that a Ctrl-C abandons at once and the time limit after a turn (with
    one process: a rank that stopped alone would leave the others waiting).

    Raises:
        KeyboardInterrupt: a Ctrl-C.
        _StepStopped: the time limit.
    """
    check = None if run.ctx.distributed else functools.partial(_check_stop, run)
    with run.stop.abandonable():
        return _evaluate(run.evaluator, run.env, run.config, step, check=check)


def _interrupted(exc: BaseException) -> bool:
    return not isinstance(exc, _StepStopped) or exc.reason == "interrupted"


def _evaluates(config: GRPOConfig, step: int) -> bool:
    """Whether an evaluation follows step ``step`` (0: the one before training)."""
    return step in (0, config.steps) or _every(config.eval_every, step)


def _evaluate_first(run: _Run) -> str | None:
    """Rank 0, before the first step of this session: the evaluation owed by the step the run
    starts after (step 0's before training; a resumed checkpoint's at an evaluation step,
    when ``metrics.jsonl`` has no row of it: a Ctrl-C or the time limit came before it ended);
    an evaluation the file has already is read back instead (a resume after the final
    evaluation's row was written and before ``final_eval.json`` was). ``"out of time"`` when
    the time limit cut it short."""
    config, step = run.config, run.start
    if not (run.ctx.is_main and _evaluates(config, step)):
        return None
    logged = evaluation_row(run.out / METRICS_FILENAME, step) if config.resume else None
    if logged is not None:
        run.eval_metrics = logged
        return None
    try:
        run.eval_metrics = _evaluate_stoppable(run, step)
    except _StepStopped as stopped:
        if stopped.reason == "interrupted":
            raise KeyboardInterrupt from None  # no step of this session is done
        run.final_eval_owed = step == config.steps
        return "out of time"
    run.logger.log(step, run.eval_metrics, stage="eval")
    return None


class _StepStopped(Exception):
    """A loop inside a step (dynamic sampling's rounds, an evaluation's turns) met a Ctrl-C or
    the time limit: the step, or its evaluation, is given up.

    Attributes:
        reason: ``"interrupted"`` or ``"out of time"``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _check_stop(run: _Run) -> None:
    """Raise :class:`_StepStopped` once a Ctrl-C (or SIGTERM) came, or the time limit passed
    after a step of this invocation was done (the first step always completes, so a resumed
    run with the same limit still makes progress)."""
    if run.stop.requested:
        raise _StepStopped("interrupted")
    if run.progressed and time.perf_counter() > run.deadline:
        raise _StepStopped("out of time")


@dataclass(frozen=True)
class _StepStart:
    """What a step's rollouts change before its update: the sampling policy's RNG and the
    global RNGs, as the step began (a step given up is saved as it was before it)."""

    sampling: object
    rng: dict[str, Any] | None

    @classmethod
    def of(cls, run: _Run) -> _StepStart | None:
        """The state now, when the run has loops a step can be given up in (dynamic sampling)."""
        if not run.config.dynamic_sampling_rounds:
            return None
        return cls(run.policy.sampling_state(), rng_state())


def _give_up_step(run: _Run, step: int, reason: str, at_start: _StepStart | None) -> None:
    """Step ``step`` stopped inside its rollouts: save the step before it as it was (unless it
    is saved), then stop the run.

    Raises:
        TrainingInterrupted: ``reason`` ``"interrupted"``, after a completed step;
            ``KeyboardInterrupt`` when no step of the run is done.
    """
    last = step - 1
    if last > run.saved and at_start is not None:
        run.policy.set_sampling_state(at_start.sampling)
        if at_start.rng is not None:
            set_rng_state(at_start.rng)
        _save(run.learner, run.policy, last, league=run.league)
        run.saved = last
    if reason == "interrupted":
        if last == 0:
            raise KeyboardInterrupt
        raise TrainingInterrupted(last, run.out / f"checkpoint-{last}")
    _out_of_time(run, f"step {step}'s rollout rounds (given up)", last)


def _out_of_time(run: _Run, during: str, saved: int) -> None:
    """Say that the time limit ended the run during ``during``; ``saved``: the last step done."""
    kept = f"{run.out / f'checkpoint-{saved}'} is the last step" if saved else "no step is done"
    minutes = run.config.time_limit_minutes
    print(f"time limit of {minutes} min reached in {during}; {kept}; resume to go on")


def _checkpoint_to_resume(config: GRPOConfig, out: Path) -> Path | None:
    """The checkpoint ``resume`` continues, checked against ``config`` and read
    (:func:`~textgym.algos.resume.checkpoint_to_resume`), else ``None``.

    Raises:
        CheckpointError: ``resume`` and ``out`` holds no checkpoint, or a damaged one.
        ValueError: the resume is refused (a changed config, a checkpoint past ``steps``).
    """
    return checkpoint_to_resume(out, config) if config.resume else None


def _finished(checkpoint: Path, config: GRPOConfig) -> bool:
    """Whether ``checkpoint`` ends a run that already wrote its final evaluation."""
    final_eval = Path(config.output_dir) / "final_eval.json"
    return checkpoint.name == f"checkpoint-{config.steps}" and final_eval.exists()


def _restore(
    checkpoint: Path | None,
    learner: Learner,
    policy: HFPolicy,
    league: OpponentLeague | None = None,
) -> int:
    """Load ``checkpoint`` into the learner, the sampling policy and the opponent league;
    return its step (0 if there is none)."""
    if checkpoint is None:
        return 0
    state = load_checkpoint(
        checkpoint,
        model=learner.model,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        # The last step's checkpoint may lack it (saved light on a full disk): no step is left.
        optimizer_needed=checkpoint.name != f"checkpoint-{learner.config.steps}",
    )
    policy.set_sampling_state(state["extra"].get("sampling_state"))
    if league is not None and "league" in state["extra"]:
        league.load_state_dict(state["extra"]["league"])
    return int(state["step"])


def _save(
    learner: Learner,
    policy: HFPolicy,
    step: int,
    *,
    final: bool = False,
    league: OpponentLeague | None = None,
) -> Path | None:
    """Checkpoint the learner and the sampling policy's RNG state after ``step`` (rank 0 only:
    the other ranks hold the same weights and optimizer state); return its path (``None`` on
    other ranks). Older checkpoints beyond ``save_total_limit`` go once it is complete. The
    ``final`` step's checkpoint is saved without its optimizer state when the disk has room
    only for that (:func:`~textgym.algos.checkpoints.save_trainer_checkpoint`).

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
    """
    if not learner.dist.is_main:
        return None
    extra: dict[str, Any] = {"sampling_state": policy.sampling_state()}
    if league is not None:
        extra["league"] = league.state_dict()
    return save_trainer_checkpoint(learner, step, extra=extra, final=final)


def play_round(run: _Run, step: int, round_: int) -> tuple[list[Trajectory], list[str] | None]:
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


def _every(interval: int, step: int) -> bool:
    """Whether ``step`` is a multiple of ``interval`` (0: never)."""
    return bool(interval) and step % interval == 0


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


def _report_progress(run: _Run, step: int, metrics: dict[str, float]) -> None:
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


def _evaluate(
    evaluator: HFPolicy,
    env: TrainingEnv,
    config: GRPOConfig,
    step: int,
    *,
    check: Callable[[], None] | None = None,
) -> dict[str, float]:
    """:func:`~textgym.algos.grpo_rollouts.evaluate` with the run's settings, after ``step``
    optimizer steps (0: before training), its progress shown (``progress``: a bar in a terminal,
    else plain lines on stderr, :class:`~textgym.progress.EpisodeProgress`) and kept on the
    screen; frees the evaluator's cache afterwards. ``check`` runs after every turn (what it
    raises ends the evaluation)."""
    when = f"after step {step} of {config.steps}" if step else "before training"
    with EpisodeProgress(
        f"evaluation {when} ({config.env_id})",
        enabled=config.progress,
        transient=False,
    ) as progress:
        metrics = evaluate(
            env.make,
            evaluator,
            episodes=config.eval_episodes,
            seed=config.seed,
            batch_size=config.rollout_batch_size,
            progress=progress,
            settings=env.evaluation_settings,
            check=check,
        )
    evaluator.clear_cache()
    return metrics
