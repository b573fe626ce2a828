"""Group Relative Policy Optimization for LLM policies on textgym envs (``textgym train``).

GRPO (Shao et al., 2024, "DeepSeekMath") drops PPO's value network: each task is played by a
*group* of ``G`` episodes that share the seed (same task, same opponent), and an episode's
advantage is its return measured against its group. One training step of :func:`train`:

1. **Rollout** ``M`` tasks x ``G`` copies with :func:`textgym.rollout.rollout`, token-in /
   token-out, so every trajectory carries its token ids, sampling log-probs and a loss mask
   that covers only the policy's own tokens (multi-turn episodes included).
2. **Update** (:func:`update`): advantages per group
   (:func:`~textgym.algos.losses.group_advantages`; groups whose rewards are all equal carry no
   signal and are left out of the backward pass), then ``num_iterations`` optimizer steps with
   the clipped surrogate of the chosen ``loss_type`` (:func:`~textgym.algos.losses.policy_loss`),
   gradients accumulated over micro-batches (``micro_batch_size`` right-padded sequences, or
   rows of ``micro_batch_tokens`` packed tokens) with a normaliser of the whole batch, so the
   update does not depend on how the batch is split.
3. **Log, evaluate, save**: metrics (JSONL + TensorBoard, one progress line per step), an
   evaluation and a checkpoint every few steps.

The learner state (model, reference, optimizer, scheduler, device, non-finite guard) is one
:class:`Learner`; :func:`update` takes it and a batch of trajectories and returns the step's
metrics. The maths lives in :mod:`textgym.algos.losses`. The same code runs on CPU (float32)
and CUDA (bf16 autocast, optional gradient checkpointing and LoRA).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import torch

import textgym  # noqa: F401  (registers the envs)
from textgym.algos.batches import (
    TokenBatch,
    make_token_batch,
    micro_batch_rows,
    sequence_log_probs,
)
from textgym.algos.checkpoints import (
    check_checkpoint_settings,
    checkpoint_to_resume,
    load_checkpoint,
    save_checkpoint,
)
from textgym.algos.common import (
    NonFiniteGuard,
    OptimizationConfig,
    StopOnInterrupt,
    TrainingInterrupted,
    check_positive_ints,
    clip_gradients,
    make_optimizer,
)
from textgym.algos.distributed import (
    SINGLE_PROCESS,
    DistributedContext,
    NullLogger,
    all_gather_objects,
    all_reduce_gradients,
    all_reduce_sum,
    barrier,
    broadcast_parameters,
    init_distributed,
)
from textgym.algos.losses import (
    LOSS_VARIANTS,
    LossType,
    ScaleRewards,
    group_advantages,
    loss_normalizer,
    policy_loss,
    zero_variance_groups,
)
from textgym.algos.metrics import (
    MetricsLogger,
    plot_metrics,
    progress_line,
    skipped_update_note,
    write_run_record,
)
from textgym.algos.model_loading import autocast, load_trainable_model, resolve_device
from textgym.algos.rollout_weights import BF16Snapshot, SnapshotPolicy
from textgym.algos.server_rollouts import ServerRollouts
from textgym.builder import EnvRecipe, check_wrapper_names, env_factory
from textgym.evaluation import summarize
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress
from textgym.rollout import Trajectory, rollout

__all__ = [
    "GRPOConfig",
    "Learner",
    "check_world_size",
    "evaluate",
    "make_learner",
    "train",
    "update",
]

_EVAL_SEED_OFFSET = 10**9  # evaluation seeds never collide with training tasks


@dataclass(kw_only=True)
class GRPOConfig(OptimizationConfig):
    """Arguments of textgym train (GRPO); every field is an option of the command."""

    model: str = "gemma-3-270m"
    """Policy to train: gemma-3-270m, tiny (a small random model for tests), a local directory
    (e.g. the output of textgym sft) or a Hugging Face model id."""
    output_dir: str = "runs/grpo"
    """Directory for checkpoints, metrics.jsonl, TensorBoard logs and plots."""
    env_id: str = "textgym/TicTacToe-v0"
    """Registered env to train on (textgym list shows them)."""
    env_kwargs: dict[str, bool | int | float | str] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make for the env (none by default)."""
    wrappers: tuple[str, ...] = ("invalid_action_penalty",)
    """Reward wrappers applied in order: format_reward, invalid_action_penalty."""
    opponent_random_move_prob: tuple[float, float] | None = (0.5, 1.0)
    """Envs with an opponent (tic-tac-toe): the range (low, high) from which each task's
    opponent random-move probability is drawn, stratified over the tasks of a step; 1 is a
    uniformly random opponent, 0 the optimal one. None keeps the env's own setting."""
    seed: int = 0
    """Seed of tasks, sampling and initialisation."""
    steps: int = 100
    """Training steps (one rollout and one update each)."""
    groups_per_step: int = 8
    """Groups per step, M: each group is G episodes of one task (the same seed and opponent)."""
    group_size: int = 8
    """Episodes per task, G (at least 2: a group of one has no baseline)."""
    rollout_batch_size: int = 64
    """Most episodes generated at once (memory, not maths)."""
    env_workers: bool = False
    """Step each env in its own worker process (Gymnasium's AsyncVectorEnv), so a turn's env
    steps run in parallel: for envs whose step is heavy (tool sandboxes); the trajectories are
    the same."""
    rollout_engine: Literal["hf", "llama-server"] = "hf"
    """Where rollouts are generated: hf (in this process, on the learner's model) or
    llama-server (llama.cpp's server, started by the trainer on the base model's GGUF, sent
    prompt token ids and returning sampled ids and log-probs; the LoRA adapter is pushed to it
    after every update: needs lora_rank > 0). With num_iterations 1 the importance ratio is
    taken against the server's log-probs (the behaviour policy)."""
    llama_server: str = ""
    """llama-server binary (empty: $TEXTGYM_LLAMA_SERVER, then PATH)."""
    server_model: str = ""
    """Base model GGUF that llama-server serves (empty: the packaged Gemma 3 270M GGUF, for
    model gemma-3-270m)."""
    server_context_tokens: int = 4096
    """Tokens of context per llama-server slot (one slot per episode in flight): the longest
    episode must fit (a compact tic-tac-toe game is under 1k; a Workplace prompt alone is about
    5k)."""
    async_rollouts: int = 0
    """0: each step's rollouts use the weights of the update before. 1: the next step's
    rollouts run on the server while this step updates, one update behind; the importance
    ratio against the sampler's log-probs corrects for it. Needs rollout_engine llama-server."""
    rollout_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights the in-process rollouts and evaluations sample from: bfloat16 (a copy of the
    policy refreshed after every update, merged with LoRA; half the bytes read per decode step;
    the importance ratio is then taken against the sampler's log-probs), float32 (the learner's
    own weights), or auto (bfloat16 on CUDA with bf16 on, else the learner's weights)."""
    max_new_tokens: int = 32
    """Most tokens per completion (per agent turn)."""
    temperature: float = 1.0
    """Sampling temperature; training log-probs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 turns it off; the surrogate assumes unmodified sampling)."""
    num_iterations: int = 1
    """Optimizer steps per rollout batch (mu); above 1 reuses the batch with stored old
    log-probs."""
    loss_type: LossType = "dapo"
    """Policy loss, a row of the loss table in textgym/algos/losses.py (surrogate, reduction,
    normaliser, default clip range)."""
    scale_rewards: ScaleRewards | None = None
    """Advantage scaling: group (divide by the group's std), batch (by the batch's std) or none;
    None takes the loss type's default (none for dr_grpo, else group)."""
    epsilon_low: float | None = None
    """Clip range below a ratio of 1; None takes the loss type's default (0.2; gspo 3e-4)."""
    epsilon_high: float | None = None
    """Clip range above a ratio of 1; None takes the loss type's default (grpo 0.2, dapo 0.28,
    gspo 4e-4, cispo 5.0)."""
    beta: float = 0.0
    """Weight of the k3 KL penalty to the initial policy (nats per token); 0 loads no reference
    model."""
    share_prefix: bool = True
    """Run the prompt a group's rows share once, in the rollout's prefill and in the update's
    forward pass: the same samples and loss up to float rounding, fewer FLOPs; the update
    ignores it under gradient checkpointing and with micro_batch_tokens (packed rows are the
    alternative to the shared-prompt pass; the rollouts still share prefills)."""
    mask_truncated: bool = False
    """Give no loss to episodes with a completion cut by max_new_tokens (DAPO's overlong
    filtering); they still count in their group's statistics."""
    eval_every: int = 10
    """Evaluate every this many steps (0: only before the first step and at the end)."""
    eval_episodes: int = 100
    """Episodes per evaluation setting (per opponent for tic-tac-toe)."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation; 0 decodes greedily."""
    save_every: int = 0
    """Checkpoint every this many steps (0: only at the end, at a time limit or on Ctrl-C)."""
    save_total_limit: int | None = 2
    """Most checkpoint-* folders kept in output_dir (TRL's save_total_limit): the oldest are
    deleted once a new one is complete, and only the newest keeps the optimizer state. None
    keeps all."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (refused when it holds none)."""
    time_limit_minutes: float | None = None
    """Wall-clock budget of this invocation in minutes: after the step that crosses it, save a
    checkpoint and return (a later run with resume goes on). None: no limit."""

    # Derived in __post_init__.
    batch_size: int = field(init=False)
    """M x G episodes per step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_checkpoint_settings(self)
        check_positive_ints(
            self,
            (
                "steps",
                "groups_per_step",
                "rollout_batch_size",
                "max_new_tokens",
                "num_iterations",
                "server_context_tokens",
            ),
        )
        if self.group_size < 2:
            raise ValueError(
                f"group_size: expected >= 2, got {self.group_size}: a group of one episode has "
                "no baseline, so every advantage would be 0"
            )
        if self.loss_type not in LOSS_VARIANTS:
            raise ValueError(
                f"loss_type: unknown loss_type {self.loss_type!r}; expected one of "
                f"{', '.join(LOSS_VARIANTS)}"
            )
        variant = LOSS_VARIANTS[self.loss_type]
        if self.scale_rewards is None:
            self.scale_rewards = variant.scale_rewards[0]
        if self.scale_rewards not in variant.scale_rewards:
            allowed = " or ".join(f"scale_rewards={s!r}" for s in variant.scale_rewards)
            raise ValueError(
                f"scale_rewards: {self.loss_type} ({variant.source}) allows only "
                f"{', '.join(variant.scale_rewards)}, got {self.scale_rewards!r}; use {allowed} "
                "or another loss_type"
            )
        low, high = variant.epsilons
        self.epsilon_low = low if self.epsilon_low is None else self.epsilon_low
        self.epsilon_high = high if self.epsilon_high is None else self.epsilon_high
        for name in ("epsilon_low", "epsilon_high", "eval_temperature", "beta"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature: expected > 0 for GRPO sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: expected a value in (0, 1], got {self.top_p}")
        if self.time_limit_minutes is not None and self.time_limit_minutes <= 0:
            raise ValueError(
                f"time_limit_minutes: expected > 0 or None, got {self.time_limit_minutes}"
            )
        try:
            check_wrapper_names(self.wrappers)
        except ValueError as exc:
            raise ValueError(f"wrappers: {exc}") from None
        prob = self.opponent_random_move_prob
        if prob is not None and not (len(prob) == 2 and 0 <= prob[0] <= prob[1] <= 1):
            raise ValueError(
                "opponent_random_move_prob: expected (low, high) with 0 <= low <= high <= 1, "
                f"got {prob}"
            )
        if self.rollout_engine not in ("hf", "llama-server"):
            raise ValueError(
                f"rollout_engine: expected hf or llama-server, got {self.rollout_engine!r}"
            )
        if self.async_rollouts not in (0, 1):
            raise ValueError(f"async_rollouts: expected 0 or 1, got {self.async_rollouts}")
        if self.async_rollouts and self.rollout_engine == "hf":
            raise ValueError(
                "async_rollouts: 1 needs rollout_engine llama-server (in process, the rollout "
                "and the update would share one model while it changes)"
            )
        if self.rollout_engine == "llama-server" and self.lora_rank <= 0:
            raise ValueError(
                "rollout_engine: llama-server receives the trained weights as a LoRA adapter; "
                "set lora_rank > 0"
            )
        self.batch_size = self.groups_per_step * self.group_size


@dataclass(kw_only=True)
class Learner:
    """The learner state of a GRPO run: everything :func:`update` reads or changes.

    Build one with :func:`make_learner`, or directly (tests pass their own optimizer).

    Attributes:
        config: The run's arguments (never changed).
        model: The policy being trained, a ``transformers`` causal LM (a ``peft`` model with
            LoRA), in train mode.
        optimizer: Over the model's trainable parameters (AdamW in :func:`make_learner`).
        scheduler: Learning-rate schedule, stepped once per optimizer step.
        max_loss_tokens: Most policy tokens per episode (``max_new_tokens`` x the env's most
            agent turns); ``dr_grpo``'s constant normaliser is the batch size times this.
        device: Where the model runs.
        reference: Frozen reference policy of the KL penalty; ``None`` when ``beta == 0``, and
            with LoRA (the base model with its adapter disabled is the reference then).
        tokenizer: The model's tokenizer (``None`` when only :func:`update` is needed).
        pad_token_id: Token id written in padding (never attended to, never scored).
        guard: Skips optimizer steps whose loss or gradient norm is not finite, and stops the
            run after a few in a row.
        dist: This process's rank in a data-parallel run (:mod:`textgym.algos.distributed`);
            one process by default.
    """

    config: GRPOConfig
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    max_loss_tokens: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    reference: Any = None
    tokenizer: Any = None
    pad_token_id: int = 0
    guard: NonFiniteGuard = field(default_factory=NonFiniteGuard)
    dist: DistributedContext = SINGLE_PROCESS


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
    optimizer, scheduler = make_optimizer(model, config)
    return Learner(
        config=config,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        max_loss_tokens=config.max_new_tokens * max_turns,
        device=device,
        reference=reference,
        tokenizer=tokenizer,
        pad_token_id=tokenizer.pad_token_id or 0,
        dist=dist,
    )


def train(config: GRPOConfig) -> dict[str, Any]:
    """Run GRPO as ``config`` says; return the last evaluation's metrics.

    With ``resume``, the latest checkpoint in ``output_dir`` is continued; a run that already
    finished its ``steps`` returns its ``final_eval.json`` untouched.

    A step is saved before it is evaluated, so an evaluation that fails or is interrupted
    costs no training. A Ctrl-C lets the step in progress finish (an evaluation is abandoned),
    saves the last completed step and raises :class:`~textgym.algos.common.TrainingInterrupted`
    naming the checkpoint; a second Ctrl-C stops at once (:class:`StopOnInterrupt`).

    Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel
    (:mod:`textgym.algos.distributed`): each rank plays and learns from its share of the
    step's groups, rank 0 logs, evaluates and saves, and the other ranks return ``{}``.

    Raises:
        ValueError: an env or model that cannot be used (see the messages); a resume whose
            config differs in what the run learns (:func:`~textgym.algos.checkpoints.check_resumable`)
            or whose checkpoint is past ``steps``; an episode return that is NaN or inf;
            ``groups_per_step`` not a multiple of the number of ranks.
        CheckpointError: ``resume`` with no checkpoint in ``output_dir``, or one that does not
            load (damaged files, missing keys, NaN/inf or wrongly shaped weights), found before
            any step runs.
        InsufficientDiskSpace: too little free disk for the next checkpoint; the run stops
            with its last checkpoint intact.
        TrainingInterrupted: Ctrl-C; the last completed step was saved.
        FloatingPointError: optimizer steps keep having a non-finite loss or gradient norm
            (:class:`~textgym.algos.common.NonFiniteGuard`); nothing non-finite is saved.
    """
    torch.manual_seed(config.seed)
    ctx, out = init_distributed(config.device), Path(config.output_dir)
    check_world_size(config, ctx)
    checkpoint = _checkpoint_to_resume(config, out)  # checked before any record is touched
    if checkpoint is not None and _finished(checkpoint, config):
        print(f"{out} already finished its {config.steps} steps; nothing to do")
        return json.loads((out / "final_eval.json").read_text())
    if ctx.is_main:
        write_run_record(out, config)
    task = _env_factory(config)
    learner = make_learner(config, max_turns=task.max_turns, device=ctx.device, dist=ctx)
    policy, evaluator = _policies(learner, task)
    server = None
    if config.rollout_engine == "llama-server":
        server = ServerRollouts(
            config, learner, list(task.stop), out / "llama-server" / f"rank{ctx.rank}"
        )
        policy = server.policy
    start = _restore(checkpoint, learner, policy)
    deadline = time.perf_counter() + 60 * (config.time_limit_minutes or math.inf)
    eval_metrics: dict[str, Any] = {}
    logger, stop = _logger(out, config, ctx), StopOnInterrupt()
    with logger, server or contextlib.nullcontext(), stop:
        if checkpoint is not None:
            logger.truncate_after(start)
        # Before the first step; or a run saved at its last step whose final evaluation did
        # not finish (it failed or was interrupted).
        if ctx.is_main and start in (0, config.steps):
            with stop.abandonable():
                eval_metrics = _evaluate(evaluator, task, config, start)
            logger.log(start, eval_metrics, stage="eval")
        for step in range(start + 1, config.steps + 1):
            metrics = _train_step(learner, task, policy, server, step=step, start=start)
            logger.log(step, metrics)
            _report_progress(config, step, metrics, ctx)
            done = step == config.steps
            out_of_time, stopping = _any_rank([time.perf_counter() > deadline, stop.requested], ctx)
            saved = done or out_of_time or stopping or _every(config.save_every, step)
            if saved:  # save first: an evaluation that fails or is interrupted costs no work
                _save(learner, policy, step)
            if stopping:
                raise TrainingInterrupted(step, out / f"checkpoint-{step}")
            if ctx.is_main and (done or _every(config.eval_every, step)):
                eval_metrics = _evaluate_saved(
                    learner, policy, evaluator, task, step=step, saved=saved, stop=stop
                )
                logger.log(step, eval_metrics, stage="eval")
            if out_of_time and not done:
                minutes = config.time_limit_minutes
                print(f"time limit of {minutes} min reached after step {step}; resume to go on")
                break
    if ctx.is_main:
        plot_metrics(out / "metrics.jsonl", out / "plots")
        (out / "final_eval.json").write_text(json.dumps(eval_metrics, indent=2) + "\n")
    barrier(ctx)  # the run's files are complete when train returns, on every rank
    return eval_metrics


def _train_step(
    learner: Learner,
    task: _TrainingEnv,
    policy: HFPolicy,
    server: ServerRollouts | None,
    *,
    step: int,
    start: int,
) -> dict[str, float]:
    """Step ``step``: its rollouts (or, with asynchronous server rollouts, the ones submitted
    a step before), the update, and the step's metrics with timings."""
    config, ctx = learner.config, learner.dist
    began = time.perf_counter()
    stale, sync_s = 0.0, 0.0
    if server is not None and server.pending:
        trajectories, stale = server.collect(), 1.0  # sampled one update behind
    else:
        trajectories = _rollout_step(task, policy, config, step - 1, ctx)
    if server is not None and config.async_rollouts and step < config.steps:
        sync_s = server.push() if step > start + 1 else 0.0  # this step's weights
        server.submit(lambda s=step: _rollout_step(task, policy, config, s, ctx))
    policy.clear_cache()  # the update needs the memory; new weights void the cache anyway
    rolled = time.perf_counter()
    metrics = update(learner, trajectories) | _rollout_metrics(trajectories, ctx)
    if server is not None:
        if not config.async_rollouts and step < config.steps:
            sync_s = server.push()  # the next step samples from this update's weights
        metrics |= {"sampler_staleness_steps": stale, "weight_sync_s": sync_s}
    return metrics | _timing(learner, began, rolled)


def _evaluate_saved(
    learner: Learner,
    policy: HFPolicy,
    evaluator: HFPolicy,
    task: _TrainingEnv,
    *,
    step: int,
    saved: bool,
    stop: StopOnInterrupt,
) -> dict[str, float]:
    """Evaluate after ``step``; if the evaluation fails or a Ctrl-C abandons it, save the step
    first when it was not saved yet (then re-raise; a Ctrl-C as :class:`TrainingInterrupted`)."""
    try:
        with stop.abandonable():
            return _evaluate(evaluator, task, learner.config, step)
    except BaseException as exc:
        if not saved:
            _save(learner, policy, step)
        if isinstance(exc, KeyboardInterrupt):
            checkpoint = Path(learner.config.output_dir) / f"checkpoint-{step}"
            raise TrainingInterrupted(step, checkpoint) from None
        raise


def update(learner: Learner, trajectories: list[Trajectory]) -> dict[str, float]:
    """One GRPO update on a batch of trajectories: advantages, then ``num_iterations`` optimizer
    steps on the groups that carry signal.

    With more than one rank (``learner.dist``), every rank calls this with its own share of
    the batch, whole groups only; the update and the metrics are those of one process over
    all the ranks' trajectories in rank order (see :mod:`textgym.algos.distributed`).

    Args:
        learner: The learner state; its model, optimizer, scheduler and guard change.
        trajectories: ``B = M x G`` token-level trajectories (``rollout(..., token_level=True)``),
            consecutive runs of ``G = config.group_size`` forming a group.

    Returns:
        The step's metrics as floats: ``zero_variance_fraction``, ``advantage_abs_mean``,
        ``loss``, ``grad_norm``, ``clip_fraction``, ``ratio_mean``, ``kl`` (nats per token),
        ``entropy`` (nats per token), ``loss_tokens``, ``skipped_update`` (1.0 when every group
        had equal rewards: then the update metrics are ``NaN``, written as null, so every row
        has them) and ``sampler_logprob_gap`` (mean |sampling - learner log-prob| per loss
        token before the update; ``NaN`` for in-process rollouts with ``num_iterations`` 1,
        where the two are the same numbers);
        ``nonfinite_skipped`` (1.0 when the guard skipped the step) when an update ran.

    Raises:
        ValueError: an episode return is NaN or inf (an env or wrapper bug; nothing is updated),
            or ``B`` (a rank's share) is not a multiple of the group size.
        FloatingPointError: from the guard when steps keep having a non-finite loss or gradient.
    """
    config = learner.config
    rewards, mine = _batch_returns(trajectories, learner)  # [B] float32 (all ranks), own rows
    advantages = group_advantages(rewards, config.group_size, config.scale_rewards)  # [B]
    flat = zero_variance_groups(rewards, config.group_size)  # [M] bool
    keep = (~flat).repeat_interleave(config.group_size)  # [B] bool
    metrics = {
        "zero_variance_fraction": float(flat.float().mean()),
        "advantage_abs_mean": float(advantages.abs().mean()),
    }
    if not keep.any():  # same keys every step (NaN is written as null): plots have no gaps
        return metrics | dict.fromkeys(_UPDATE_KEYS, math.nan) | _SKIPPED
    advantages, keep = advantages[mine], keep[mine]  # [B_rank] each: this rank's rows
    kept = [t for t, k in zip(trajectories, keep.tolist()) if k]
    batch = None
    if kept:  # a rank whose groups all have equal rewards still joins the collectives
        batch = make_token_batch(
            [t.token_ids for t in kept],
            [_loss_mask(t, config.mask_truncated) for t in kept],
            [t.token_logprobs for t in kept],
            pad_token_id=learner.pad_token_id,
        )
    normalizer = _normalizer(learner, batch)
    kept_advantages = advantages[keep]  # [B_kept]
    micro = [  # padded micro-batches of micro_batch_size, or packed rows of micro_batch_tokens
        (batch.select(r).to(learner.device), kept_advantages[r].to(learner.device))
        for r in micro_batch_rows(batch, config)
    ]
    old, ref = _fixed_log_probs(learner, micro)
    gap_in_step = sampled_elsewhere(learner) and config.num_iterations == 1
    if gap_in_step:
        # Other weights sampled (a bfloat16 copy, a quantized server, perhaps an update
        # behind): the ratio is taken against their log-probs, the behaviour policy. The first
        # optimizer step's log-probs are the learner's before the update, so the gap is
        # measured there, without another forward pass.
        old = [mb.sampler_logprobs for mb, _ in micro]
    for iteration in range(config.num_iterations):
        stats = _optimizer_step(learner, micro, old, ref, normalizer, measure_gap=gap_in_step)
        learner.scheduler.step()
        if iteration == 0:
            metrics.update(stats)
    metrics["skipped_update"] = 0.0
    if not gap_in_step:
        metrics["sampler_logprob_gap"] = _sampler_gap(learner, micro, old)
    return metrics


def sampled_elsewhere(learner: Learner) -> bool:
    """Whether rollouts come from weights other than the learner's own: llama-server, or the
    bfloat16 rollout copy (:func:`bf16_rollouts`)."""
    return learner.config.rollout_engine != "hf" or bf16_rollouts(learner)


def bf16_rollouts(learner: Learner) -> bool:
    """Whether in-process rollouts sample a bfloat16 copy (``rollout_dtype``; ``auto``: on CUDA
    with ``bf16``, when the learner's weights are not bfloat16 already)."""
    config = learner.config
    if config.rollout_engine != "hf" or config.rollout_dtype == "float32":
        return False
    learner_dtype = next(learner.model.parameters()).dtype
    if config.rollout_dtype == "bfloat16":
        return learner_dtype != torch.bfloat16
    return learner.device.type == "cuda" and config.bf16 and learner_dtype != torch.bfloat16


def _batch_returns(trajectories: list[Trajectory], learner: Learner) -> tuple[torch.Tensor, slice]:
    """The episode returns of the whole batch, ``[B]`` float32 (every rank's rows, in rank
    order), and the slice of them that ``trajectories`` (this rank's share) are.

    Raises:
        ValueError: a return is NaN or inf; with more than one rank, a share that splits a
            group.
    """
    returns = _finite_returns(trajectories)
    group, ctx = learner.config.group_size, learner.dist
    if ctx.distributed and len(returns) % group:
        raise ValueError(
            f"Expected rank {ctx.rank}'s share of the batch to be whole groups of {group}, got "
            f"{len(returns)} trajectories; give each rank whole groups"
        )
    shares = all_gather_objects(returns, ctx)
    start = sum(len(share) for share in shares[: ctx.rank])
    rewards = torch.tensor([r for share in shares for r in share])  # [B] float32
    return rewards, slice(start, start + len(returns))


def _normalizer(learner: Learner, batch: TokenBatch | None) -> float:
    """The loss normaliser of the whole batch (:func:`loss_normalizer`).

    With more than one rank it is all-reduced before the backward pass: every row of
    ``LOSS_VARIANTS`` counts something per sequence (sequences, loss tokens, or sequences x
    ``max_loss_tokens``), so the sum of the ranks' counts is the count over the whole batch.
    """
    config, ctx = learner.config, learner.dist
    if not ctx.distributed:
        return loss_normalizer(config.loss_type, batch.loss_mask, learner.max_loss_tokens)
    count = LOSS_VARIANTS[config.loss_type].normalizer
    local = 0.0 if batch is None else count(batch.loss_mask, learner.max_loss_tokens)
    return max(1.0, all_reduce_sum([local], ctx)[0])


# Metrics of an update that runs no optimizer step (every group had equal rewards).
_UPDATE_KEYS = ("loss", "grad_norm", "clip_fraction", "ratio_mean", "kl", "entropy")
_SKIPPED = {"sampler_logprob_gap": math.nan, "loss_tokens": 0.0, "skipped_update": 1.0}


def _checkpoint_to_resume(config: GRPOConfig, out: Path) -> Path | None:
    """The checkpoint ``resume`` continues, checked against ``config`` and read
    (:func:`~textgym.algos.checkpoints.checkpoint_to_resume`), else ``None``.

    Raises:
        CheckpointError: ``resume`` and ``out`` holds no checkpoint, or a damaged one.
        ValueError: the resume is refused (a changed config, a checkpoint past ``steps``).
    """
    return checkpoint_to_resume(out, config) if config.resume else None


def _finished(checkpoint: Path, config: GRPOConfig) -> bool:
    """Whether ``checkpoint`` ends a run that already wrote its final evaluation."""
    final_eval = Path(config.output_dir) / "final_eval.json"
    return checkpoint.name == f"checkpoint-{config.steps}" and final_eval.exists()


def _policies(learner: Learner, task: _TrainingEnv) -> tuple[HFPolicy, HFPolicy]:
    """The sampling policy of the rollouts and the evaluation policy, both on the learner's
    model (they see every update)."""
    config = learner.config
    common = {
        "max_new_tokens": config.max_new_tokens,
        "stop": list(task.stop),
        "batch_size": config.rollout_batch_size,
    }
    make: Any = HFPolicy
    model = learner.model
    if bf16_rollouts(learner):  # both sample a bfloat16 copy, refreshed after each update
        make = functools.partial(SnapshotPolicy, BF16Snapshot(learner.model))
        model = None
    policy = make(
        model,
        learner.tokenizer,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=config.seed,
        share_prefill=config.share_prefix,
        **common,
    )
    evaluator = make(
        model,
        learner.tokenizer,
        temperature=config.eval_temperature,
        seed=config.seed + 1,
        **common,
    )
    return policy, evaluator


def _restore(checkpoint: Path | None, learner: Learner, policy: HFPolicy) -> int:
    """Load ``checkpoint`` into the learner and the sampling policy; return its step (0 if
    there is none)."""
    if checkpoint is None:
        return 0
    state = load_checkpoint(
        checkpoint, model=learner.model, optimizer=learner.optimizer, scheduler=learner.scheduler
    )
    policy.set_sampling_state(state["extra"].get("sampling_state"))
    return int(state["step"])


def _save(learner: Learner, policy: HFPolicy, step: int) -> Path | None:
    """Checkpoint the learner and the sampling policy's RNG state after ``step`` (rank 0 only:
    the other ranks hold the same weights and optimizer state); return its path (``None`` on
    other ranks). Older checkpoints beyond ``save_total_limit`` go once it is complete.

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
    """
    if not learner.dist.is_main:
        return None
    return save_checkpoint(
        learner.config.output_dir,
        step,
        model=learner.model,
        tokenizer=learner.tokenizer,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        config=learner.config,
        extra={"sampling_state": policy.sampling_state()},
        save_total_limit=learner.config.save_total_limit,
    )


def check_world_size(config: GRPOConfig, ctx: DistributedContext) -> None:
    """ValueError unless the step's groups split evenly over the ranks."""
    if config.groups_per_step % ctx.world_size:
        raise ValueError(
            f"groups_per_step: expected a multiple of the {ctx.world_size} ranks (whole groups "
            f"per rank), got {config.groups_per_step}; change groups_per_step or --nproc-per-node"
        )


def _logger(out: Path, config: GRPOConfig, ctx: DistributedContext) -> Any:
    """Rank 0's metrics logger; one that writes nothing on the other ranks."""
    if not ctx.is_main:
        return NullLogger()
    return MetricsLogger(
        out,
        tensorboard=config.tensorboard,
        resume=config.resume,
        report_to=config.report_to,
        config=config,
    )


def _any_rank(flags: list[bool], ctx: DistributedContext) -> list[bool]:
    """Whether each of ``flags`` is true on any rank (so every rank takes the same branch); one
    collective for all of them."""
    if not ctx.distributed:
        return flags
    return [total > 0 for total in all_reduce_sum([float(f) for f in flags], ctx)]


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


def _report_progress(
    config: GRPOConfig, step: int, metrics: dict[str, float], ctx: DistributedContext
) -> None:
    """One line on stderr (``progress``, rank 0): loss, reward, step time, sampled tokens per
    second, and why no update ran when none did (every group had equal rewards; a non-finite
    loss or gradient norm)."""
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


def _evaluate(
    evaluator: HFPolicy, task: _TrainingEnv, config: GRPOConfig, step: int
) -> dict[str, float]:
    """:func:`evaluate` with the run's settings, after ``step`` optimizer steps (0: before
    training), its progress shown (``progress``: a bar in a terminal, else plain lines on
    stderr, :class:`~textgym.progress.EpisodeProgress`) and kept on the screen; frees the
    evaluator's cache afterwards."""
    when = f"after step {step} of {config.steps}" if step else "before training"
    with EpisodeProgress(
        f"evaluation {when} ({config.env_id})",
        enabled=config.progress,
        transient=False,
    ) as progress:
        metrics = evaluate(
            task.make,
            evaluator,
            episodes=config.eval_episodes,
            seed=config.seed,
            batch_size=config.rollout_batch_size,
            progress=progress,
        )
    evaluator.clear_cache()
    return metrics


@dataclass(frozen=True)
class _TrainingEnv:
    """How to build the training env, read once from a probe instance."""

    make: Callable[[], gym.Env]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)
    max_turns: int  # most agent turns per episode (the registered step limit, else 1)
    stratified: bool  # a StratifiedOpponent wrapper draws the opponent per task


def _env_factory(config: GRPOConfig) -> _TrainingEnv:
    """The training env through the one builder (:mod:`textgym.builder`).

    The opponent range stratifies only an env with a seeded opponent (``has_opponent``); for
    any other env it is ignored, so the default config trains GSM8K as it trains tic-tac-toe.

    Raises:
        ValueError: as :func:`textgym.builder.env_factory` (unknown id, kwargs the env rejects).
    """
    recipe = EnvRecipe(config.env_id, dict(config.env_kwargs), tuple(config.wrappers))
    _, probe = env_factory(recipe)
    stratified = config.opponent_random_move_prob is not None and probe.unwrapped.has_opponent
    if stratified:
        probe.close()
        recipe = dataclasses.replace(
            recipe,
            opponent_random_move_prob=tuple(config.opponent_random_move_prob),
            groups=config.groups_per_step,
        )
        _, probe = env_factory(recipe)
    steps = probe.spec.max_episode_steps if probe.spec is not None else None
    task = _TrainingEnv(recipe.make, probe.unwrapped.stop_strings, int(steps or 1), stratified)
    probe.close()
    return task


def _rollout_step(
    task: _TrainingEnv, policy: HFPolicy, config: GRPOConfig, step: int, ctx: DistributedContext
) -> list[Trajectory]:
    """Play step ``step``'s M tasks x G copies (``step`` counts from 0); a task's copies share
    seed and opponent stratum.

    With more than one rank, this rank plays its contiguous ``1 / world_size`` of the episodes
    (whole groups), its sampling RNG re-seeded from ``(seed, step, rank)``, so a checkpoint
    needs no per-rank sampling state and resumes on any number of ranks.
    """
    first = config.seed * 10**6 + step * config.groups_per_step
    seeds = [first + i // config.group_size for i in range(config.batch_size)]
    options = [{"episode_index": i // config.group_size} for i in range(config.batch_size)]
    mine = slice(None)
    if ctx.distributed:
        share = config.batch_size // ctx.world_size
        mine = slice(ctx.rank * share, (ctx.rank + 1) * share)
        policy.set_sampling_state(random.Random(f"{config.seed}/{step}/{ctx.rank}").getstate())
    # A bar for the step's rollouts in a terminal only (transient): in a log, the step's own
    # progress line follows within the step, and a line per 10% of every step would bury it.
    with EpisodeProgress(
        f"step {step + 1}/{config.steps}: rollouts",
        enabled=config.progress and ctx.is_main and sys.stderr.isatty(),
    ) as progress:
        progress.add_total(len(seeds[mine]))
        return rollout(
            task.make,
            policy,
            seeds[mine],
            batch_size=config.rollout_batch_size,
            options=options[mine] if task.stratified else None,
            token_level=True,
            env_workers=config.env_workers,
            on_episode_end=progress.episode_done,
            on_turn=progress.actions,
        )


def _finite_returns(trajectories: list[Trajectory]) -> list[float]:
    """The episode returns; ValueError naming the first that is NaN or inf."""
    returns = [t.episode_return for t in trajectories]
    bad = [(i, r) for i, r in enumerate(returns) if not math.isfinite(r)]
    if bad:
        i, value = bad[0]
        raise ValueError(
            f"Episode {i} of this step (task {trajectories[i].task_id!r}) returned {value}; "
            f"{len(bad)} of {len(returns)} returns are not finite, so no update was made. "
            "Rewards come from the env and its wrappers: check their reward components."
        )
    return returns


def _loss_mask(traj: Trajectory, mask_truncated: bool) -> list[int]:
    """The trajectory's loss mask, all zeros when it must not train (overlong filtering)."""
    if mask_truncated and "length" in traj.finish_reasons:
        return [0] * len(traj.loss_mask)
    return traj.loss_mask


_MicroBatches = list[tuple[TokenBatch, torch.Tensor]]  # (tokens, advantages [b]) on the device


@torch.no_grad()
def _fixed_log_probs(
    learner: Learner, micro: _MicroBatches
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Old log-probs (only when the batch is reused) and reference log-probs (only if beta > 0),
    ``[b, L-1]`` float32 per micro-batch."""
    config = learner.config
    old: list[torch.Tensor | None] = [None] * len(micro)
    ref: list[torch.Tensor | None] = [None] * len(micro)
    for i, (mb, _adv) in enumerate(micro):
        with autocast(learner.device, config.bf16, cpu_bf16=config.cpu_bf16):
            if config.num_iterations > 1:
                old[i] = _log_probs(learner.model, mb, config)[0]  # [b, L-1]
            if config.beta > 0:
                ref[i] = _reference_log_probs(learner, mb)  # [b, L-1]
    return old, ref


def _log_probs(
    model: Any, mb: TokenBatch, config: GRPOConfig, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return sequence_log_probs(
        model,
        mb,
        temperature=config.temperature,
        chunk_size=config.logprob_chunk_size,
        with_entropy=with_entropy,
        share_prefix=config.share_prefix,
        packed=config.micro_batch_tokens is not None,
    )


def _reference_log_probs(learner: Learner, mb: TokenBatch) -> torch.Tensor:
    if learner.reference is not None:
        return _log_probs(learner.reference, mb, learner.config)[0]
    with learner.model.disable_adapter():  # LoRA: the base weights are the reference policy
        return _log_probs(learner.model, mb, learner.config)[0]


def _optimizer_step(
    learner: Learner,
    micro: _MicroBatches,
    old: list[torch.Tensor | None],
    ref: list[torch.Tensor | None],
    normalizer: float,
    *,
    measure_gap: bool = False,
) -> dict[str, float]:
    """One optimizer step, gradients accumulated over the micro-batches; skipped (and counted
    in ``nonfinite_skipped``) when the loss or gradient norm is not finite. With
    ``measure_gap``, also ``sampler_logprob_gap``: mean |sampler - learner log-prob| per loss
    token, the learner's taken before this step changes it."""
    config, model = learner.config, learner.model
    learner.optimizer.zero_grad(set_to_none=True)
    names = ("loss", "clipped_tokens", "tokens", "ratio_sum", "kl_sum", "entropy_sum", "gap")
    # Sums stay on the device: one host read per optimizer step, not six per micro-batch.
    sums = torch.zeros(len(names) + 1, dtype=torch.float64, device=learner.device)
    for (mb, adv), old_logp, ref_logp in zip(micro, old, ref):
        with autocast(learner.device, config.bf16, cpu_bf16=config.cpu_bf16):
            logp, entropy = _log_probs(model, mb, config, with_entropy=True)  # [b, L-1] each
        old_logp = logp.detach() if old_logp is None else old_logp  # mu = 1: ratio is 1 in value
        loss, stats = policy_loss(
            logp,
            old_logp,
            adv,
            mb.loss_mask,
            loss_type=config.loss_type,
            normalizer=normalizer,
            epsilon_low=config.epsilon_low,
            epsilon_high=config.epsilon_high,
            ref_logp=ref_logp,
            beta=config.beta,
        )
        loss.backward()
        terms = [loss.detach(), *(stats[key] for key in names[1:5])]
        terms.append((entropy * mb.loss_mask).sum())
        gap = (mb.sampler_logprobs - logp.detach()).abs() * mb.loss_mask if measure_gap else 0.0
        terms.append(torch.as_tensor(gap).sum())
        sums[: len(names)] += torch.stack([torch.as_tensor(t).to(sums) for t in terms])
    params = [p for p in model.parameters() if p.requires_grad]
    if learner.dist.distributed:  # the whole batch's gradient and sums, before clipping
        all_reduce_gradients(params, learner.dist)
        values = all_reduce_sum(sums[: len(names)].tolist(), learner.dist)
        totals = dict(zip(names, values))
        norm, stepped = learner.guard.step(
            learner.optimizer, params, totals["loss"], config.max_grad_norm
        )
    else:
        sums[-1] = clip_gradients(params, config.max_grad_norm)
        *values, norm = sums.tolist()  # the one host read
        totals = dict(zip(names, values))
        norm, stepped = learner.guard.step(
            learner.optimizer, params, totals["loss"], config.max_grad_norm, grad_norm=norm
        )
    tokens = max(totals["tokens"], 1.0)
    gap = {"sampler_logprob_gap": totals["gap"] / tokens} if measure_gap else {}
    return gap | {
        "loss": totals["loss"],
        "grad_norm": norm,
        "nonfinite_skipped": 0.0 if stepped else 1.0,
        "clip_fraction": totals["clipped_tokens"] / tokens,
        "ratio_mean": totals["ratio_sum"] / tokens,
        "kl": totals["kl_sum"] / tokens,
        "entropy": totals["entropy_sum"] / tokens,
        "loss_tokens": totals["tokens"],
    }


def _sampler_gap(learner: Learner, micro: _MicroBatches, old: list[torch.Tensor | None]) -> float:
    """Mean |sampling log-prob - training log-prob| on loss tokens of the whole batch (NaN when
    not recomputed: ``num_iterations`` 1 with in-process rollouts)."""
    if any(o is None for o in old):
        return float("nan")
    gap = sum(
        float(((mb.sampler_logprobs - o).abs() * mb.loss_mask).sum())
        for (mb, _), o in zip(micro, old)
    )
    tokens = sum(float(mb.loss_mask.sum()) for mb, _ in micro)
    if learner.dist.distributed:
        gap, tokens = all_reduce_sum([gap, tokens], learner.dist)
    return gap / max(tokens, 1.0)


def _rollout_metrics(trajectories: list[Trajectory], ctx: DistributedContext) -> dict[str, float]:
    """Reward, its components, outcomes and invalid rate of the training rollouts (of every
    rank's: their episodes are gathered without their messages and token ids and log-probs)."""
    if ctx.distributed:
        light = [
            dataclasses.replace(t, messages=[], token_ids=[], token_logprobs=[])
            for t in trajectories
        ]
        trajectories = [t for share in all_gather_objects(light, ctx) for t in share]
    summary = summarize(trajectories)
    metrics = {
        "reward_mean": summary["mean_return"],
        "invalid_rate": summary["invalid_action_rate"],
        "length_truncated_rate": summary["length_truncated_rate"],
        "completion_tokens_mean": sum(sum(t.loss_mask) for t in trajectories) / len(trajectories),
    }
    metrics.update({f"reward/{k}": v for k, v in summary["reward_components"].items()})
    metrics.update({f"{k}_rate": v for k, v in summary["outcomes"].items()})
    return metrics


def evaluate(
    make_env: Callable[[], gym.Env],
    policy: HFPolicy,
    *,
    episodes: int,
    seed: int = 0,
    batch_size: int = 64,
    progress: EpisodeProgress | None = None,
) -> dict[str, float]:
    """Evaluate a policy in each of the env's named evaluation settings
    (``TextEnv.evaluation_settings``: tic-tac-toe's ``random`` and ``optimal`` opponents,
    ``random_move_prob`` 1 and 0), or once with the env's own settings (named ``eval``) for an
    env that names none.

    Evaluation seeds start at 10**9 + seed * 10**6, away from every training task.
    ``progress`` (if given) counts the episodes of every setting as they finish.

    Returns:
        ``{"<setting>/return_mean", "<setting>/invalid_rate"}`` per setting, plus
        ``"<setting>/<outcome>_rate"`` for each outcome in a named setting (e.g.
        ``"random/win_rate"``); rates in [0, 1].
    """
    seeds = [_EVAL_SEED_OFFSET + seed * 10**6 + i for i in range(episodes)]
    probe = make_env()
    settings: dict[str, Any] = dict(probe.unwrapped.evaluation_settings) or {"eval": None}
    probe.close()
    metrics: dict[str, float] = {}
    if progress is not None:
        progress.add_total(len(seeds) * len(settings))
    for name, options in settings.items():
        summary = summarize(
            rollout(
                make_env,
                policy,
                seeds,
                batch_size=batch_size,
                options=options,
                on_episode_end=progress.episode_done if progress is not None else None,
                on_turn=progress.actions if progress is not None else None,
            )
        )
        metrics[f"{name}/return_mean"] = summary["mean_return"]
        metrics[f"{name}/invalid_rate"] = summary["invalid_action_rate"]
        if options is not None:
            metrics.update({f"{name}/{k}_rate": v for k, v in summary["outcomes"].items()})
    return metrics
