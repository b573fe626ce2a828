"""The run around GRPO's steps (:func:`textgym.algos.grpo.train`): its state
(:class:`GRPORun`) and set-up, what follows each step (save, stop on a Ctrl-C or the time
limit, evaluate), the evaluation owed before the first step, a step given up inside its
rollout rounds, checkpoint save and restore, and the finish.

The order of what follows a step is the contract of resuming: a step is saved before it is
evaluated (an evaluation that fails or is interrupted costs no training), a signal during the
save leaves the evaluation owed, and a resumed run plays an owed evaluation first
(:func:`evaluate_first`), so a resumed run's rows are an uninterrupted run's.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textgym.algos.checkpoint_layout import rng_state, set_rng_state
from textgym.algos.checkpoints import save_trainer_checkpoint
from textgym.algos.common import (
    StopOnInterrupt,
    TrainingInterrupted,
)
from textgym.algos.distributed import (
    DistributedContext,
    any_rank,
    barrier,
)
from textgym.algos.expert_guidance import ExpertGuide
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.grpo_rollouts import (
    TrainingEnv,
    evaluate,
    rollout_policies,
    training_env,
)
from textgym.algos.league import OpponentLeague
from textgym.algos.learner import Learner, make_learner, sampled_elsewhere
from textgym.algos.metric_plots import plot_metrics
from textgym.algos.metric_rows import METRICS_FILENAME, read_metrics
from textgym.algos.metrics import rank_logger, write_run_record
from textgym.algos.resume import evaluation_row, load_checkpoint
from textgym.algos.server_rollouts import ServerRollouts
from textgym.algos.train_episodes import TrainEpisodesLog
from textgym.errors import SetupError
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress
from textgym.results import write_json

__all__ = [
    "GRPORun",
    "StepStart",
    "StepStopped",
    "after_step",
    "check_stop",
    "every",
    "evaluate_first",
    "finish_run",
    "finished",
    "give_up_step",
    "report_time_limit",
    "restore_step",
    "save_step",
    "start_run",
]


@dataclass(kw_only=True)
class GRPORun:
    """What the loop of :func:`textgym.algos.grpo.train` reads and keeps between steps."""

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
    guide: ExpertGuide | None = None  # expert_guidance
    eval_metrics: dict[str, Any] = field(default_factory=dict)  # the last evaluation's
    # The learnability rule of the last hint printed, by scope ("": the step, else a member).
    hint_rules: dict[str, str] = field(default_factory=dict)
    saved: int = 0  # the last step with a checkpoint (the resumed one's; 0: none)
    final_eval_owed: bool = False  # the last step is done, its evaluation was given up
    progressed: bool = False  # a step of this invocation is done: the time limit may cut now

    @property
    def out(self) -> Path:
        return Path(self.config.output_dir)


def start_run(config: GRPOConfig, ctx: DistributedContext, checkpoint: Path | None) -> GRPORun:
    """The run record (rank 0), the training env, the learner and its policies (on a
    llama-server, with ``rollout_engine`` llama-server), the checkpoint's state restored, the
    time limit's deadline, the logger and the Ctrl-C handler (not entered yet)."""
    out = Path(config.output_dir)
    if ctx.is_main:
        write_run_record(out, config)
    env = training_env(config)
    guide = None
    if config.expert_guidance:  # before the model loads: an env without an expert fails fast
        guide = ExpertGuide.for_env(
            env.make,
            config.env_kwargs,
            per_group=config.expert_guidance,
            seed=config.seed,
            batch_size=config.rollout_batch_size,
        )
    learner = make_learner(config, max_turns=env.max_turns, device=ctx.device, dist=ctx)
    if guide is not None and sampled_elsewhere(learner):
        raise SetupError(
            "expert_guidance: the rollouts sample a bfloat16 copy (rollout_dtype auto on CUDA "
            "with bf16), whose log-probs the ratio reads and the expert's tokens lack; set "
            "rollout_dtype float32"
        )
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
    start = restore_step(checkpoint, learner, policy, league)
    deadline = time.perf_counter() + 60 * (config.time_limit_minutes or math.inf)
    logger, stop = rank_logger(out, config, ctx, resume=config.resume), StopOnInterrupt()
    return GRPORun(
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
        guide=guide,
        saved=start,
    )


def after_step(run: GRPORun, step: int) -> str | None:
    """After step ``step``: save (at the last step, the time limit, a Ctrl-C or every
    ``save_every`` steps), stop on a Ctrl-C, evaluate (rank 0, at the last step and every
    ``eval_every``); ``"out of time"`` when the time limit ends the run here, else ``None``.

    Raises:
        TrainingInterrupted: a Ctrl-C on any rank, once the step is saved.
    """
    config, ctx = run.config, run.ctx
    done = step == config.steps
    out_of_time, stopping = any_rank([time.perf_counter() > run.deadline, run.stop.requested], ctx)
    saved = done or out_of_time or stopping or every(config.save_every, step)
    if saved:  # save first: an evaluation that fails or is interrupted costs no work
        save_step(run.learner, run.policy, step, final=done, league=run.league)
        run.saved = step
        # A signal during the save: the evaluation is owed, and a resume plays it first.
        (stopping,) = any_rank([run.stop.requested], ctx)
    if stopping:
        raise TrainingInterrupted(step, run.out / f"checkpoint-{step}")
    if ctx.is_main and _evaluates(config, step):
        evaluation = _evaluate_saved(run, step)
        if evaluation is None:  # the time limit cut it short: a resume plays it again
            run.final_eval_owed = done
            report_time_limit(run, f"the evaluation after step {step}", step)
            return "out of time"
        run.eval_metrics = evaluation
        run.logger.log(step, evaluation, stage="eval")
    if out_of_time and not done:
        report_time_limit(run, f"step {step}", step)
        return "out of time"
    return None


def finish_run(run: GRPORun) -> None:
    """Rank 0 plots the metrics and writes ``final_eval.json``; every rank waits for it, so
    the run's files are complete when :func:`~textgym.algos.grpo.train` returns."""
    if run.ctx.is_main:
        if read_metrics(run.out / "metrics.jsonl"):
            plot_metrics(run.out / "metrics.jsonl", run.out / "plots")
        if not run.final_eval_owed:  # else the run is not finished: --resume evaluates
            write_json(run.out / "final_eval.json", run.eval_metrics)  # in one step, atomic
    barrier(run.ctx)


def evaluate_first(run: GRPORun) -> str | None:
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
    except StepStopped as stopped:
        if stopped.reason == "interrupted":
            raise KeyboardInterrupt from None  # no step of this session is done
        run.final_eval_owed = step == config.steps
        return "out of time"
    run.logger.log(step, run.eval_metrics, stage="eval")
    return None


def _evaluate_saved(run: GRPORun, step: int) -> dict[str, float] | None:
    """Evaluate after ``step``; ``None`` when the time limit cut the evaluation short. If it
    fails, is cut short or a Ctrl-C abandons it, save the step first when it was not saved yet
    (then re-raise; a Ctrl-C as :class:`TrainingInterrupted`)."""
    try:
        return _evaluate_stoppable(run, step)
    except BaseException as exc:
        if run.saved < step:
            save_step(run.learner, run.policy, step, league=run.league)
            run.saved = step
        if isinstance(exc, KeyboardInterrupt | StepStopped) and _interrupted(exc):
            raise TrainingInterrupted(step, run.out / f"checkpoint-{step}") from None
        if isinstance(exc, StepStopped):
            return None
        raise


def _evaluate_stoppable(run: GRPORun, step: int) -> dict[str, float]:
    """:func:`_evaluate` that a Ctrl-C abandons at once and the time limit after a turn (with
    one process: a rank that stopped alone would leave the others waiting).

    Raises:
        KeyboardInterrupt: a Ctrl-C.
        StepStopped: the time limit.
    """
    check = None if run.ctx.distributed else functools.partial(check_stop, run)
    with run.stop.abandonable():
        return _evaluate(run.evaluator, run.env, run.config, step, check=check)


def _interrupted(exc: BaseException) -> bool:
    return not isinstance(exc, StepStopped) or exc.reason == "interrupted"


def _evaluates(config: GRPOConfig, step: int) -> bool:
    """Whether an evaluation follows step ``step`` (0: the one before training)."""
    return step in (0, config.steps) or every(config.eval_every, step)


class StepStopped(Exception):
    """A loop inside a step (dynamic sampling's rounds, an evaluation's turns) met a Ctrl-C or
    the time limit: the step, or its evaluation, is given up.

    Attributes:
        reason: ``"interrupted"`` or ``"out of time"``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def check_stop(run: GRPORun) -> None:
    """Raise :class:`StepStopped` once a Ctrl-C (or SIGTERM) came, or the time limit passed
    after a step of this invocation was done (the first step always completes, so a resumed
    run with the same limit still makes progress)."""
    if run.stop.requested:
        raise StepStopped("interrupted")
    if run.progressed and time.perf_counter() > run.deadline:
        raise StepStopped("out of time")


@dataclass(frozen=True)
class StepStart:
    """What a step's rollouts change before its update: the sampling policy's RNG and the
    global RNGs, as the step began (a step given up is saved as it was before it)."""

    sampling: object
    rng: dict[str, Any] | None

    @classmethod
    def of(cls, run: GRPORun) -> StepStart | None:
        """The state now, when the run has loops a step can be given up in (dynamic sampling)."""
        if not run.config.dynamic_sampling_rounds:
            return None
        return cls(run.policy.sampling_state(), rng_state())


def give_up_step(run: GRPORun, step: int, reason: str, at_start: StepStart | None) -> None:
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
        save_step(run.learner, run.policy, last, league=run.league)
        run.saved = last
    if reason == "interrupted":
        if last == 0:
            raise KeyboardInterrupt
        raise TrainingInterrupted(last, run.out / f"checkpoint-{last}")
    report_time_limit(run, f"step {step}'s rollout rounds (given up)", last)


def report_time_limit(run: GRPORun, during: str, saved: int) -> None:
    """Say that the time limit ended the run during ``during``; ``saved``: the last step done."""
    kept = f"{run.out / f'checkpoint-{saved}'} is the last step" if saved else "no step is done"
    minutes = run.config.time_limit_minutes
    print(f"time limit of {minutes} min reached in {during}; {kept}; resume to go on")


def finished(checkpoint: Path, config: GRPOConfig) -> bool:
    """Whether ``checkpoint`` ends a run that already wrote its final evaluation."""
    final_eval = Path(config.output_dir) / "final_eval.json"
    return checkpoint.name == f"checkpoint-{config.steps}" and final_eval.exists()


def restore_step(
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


def save_step(
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


def every(interval: int, step: int) -> bool:
    """Whether ``step`` is a multiple of ``interval`` (0: never)."""
    return bool(interval) and step % interval == 0


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
