"""Group Relative Policy Optimization for LLM policies on textgym envs (``textgym train``).

GRPO (Shao et al., 2024, "DeepSeekMath") drops PPO's value network: each task is played by a
*group* of ``G`` episodes that share the seed (same task, same opponent), and an episode's
advantage is its return measured against its group. One training step:

1. **Rollout** ``M`` tasks x ``G`` copies with :func:`textgym.rollout.rollout`, token-in /
   token-out, so every trajectory carries its token ids, sampling log-probs and a loss mask
   that covers only the policy's own tokens (multi-turn episodes included).
2. **Advantages** per group (:func:`~textgym.algos.losses.group_advantages`); groups whose
   rewards are all equal carry no signal and are left out of the backward pass.
3. **Update**: ``num_iterations`` optimizer steps on the batch with the clipped surrogate of
   the chosen ``loss_type`` (:func:`~textgym.algos.losses.policy_loss`), gradients accumulated
   over micro-batches with a normaliser of the whole batch, so the update does not depend on
   the micro-batch size.

Evaluation, metrics (JSONL + TensorBoard), plots and checkpoints happen every few steps. The
same code runs on CPU (float32) and CUDA (bf16 autocast, optional gradient checkpointing and
LoRA).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import textgym  # noqa: F401  (registers the envs)
from textgym.algos.common import (
    NonFiniteGuard,
    OptimizationConfig,
    TokenBatch,
    autocast,
    check_positive_ints,
    check_resumable,
    latest_checkpoint,
    load_checkpoint,
    make_optimizer,
    make_token_batch,
    prepare_model,
    resolve_device,
    save_checkpoint,
    sequence_log_probs,
)
from textgym.algos.losses import (
    LossType,
    ScaleRewards,
    group_advantages,
    loss_normalizer,
    policy_loss,
    zero_variance_groups,
)
from textgym.algos.metrics import MetricsLogger, plot_metrics, write_run_record
from textgym.evaluation import summarize
from textgym.models import load_model
from textgym.policies.hf import HFPolicy
from textgym.rollout import Trajectory, rollout
from textgym.wrappers import REWARD_WRAPPERS, OpponentSkill

__all__ = ["GRPOConfig", "evaluate", "train"]

# Clip ranges when none is given: PPO's 0.2; DAPO's clip-higher 0.28 (Yu et al., 2025); GSPO's
# sequence-level 3e-4 / 4e-4 (Zheng et al., 2025); CISPO truncates the IS weight at 1 + 5.0
# in practice (MiniMax, 2025) and has no lower bound.
_DEFAULT_EPSILONS: dict[str, tuple[float, float]] = {
    "grpo": (0.2, 0.2),
    "dapo": (0.2, 0.28),
    "dr_grpo": (0.2, 0.2),
    "gspo": (3e-4, 4e-4),
    "cispo": (0.0, 5.0),
}
_EVAL_SEED_OFFSET = 10**9  # evaluation seeds never collide with training tasks


@dataclass(kw_only=True)
class GRPOConfig(OptimizationConfig):
    """Arguments of :func:`train`; every field is a ``textgym train`` flag."""

    model: str = "tiny"
    """Policy to train: ``tiny``, ``gemma-3-270m``, a local directory (e.g. ``textgym sft``'s
    output) or a Hugging Face id."""
    output_dir: str = "runs/grpo"
    """Where checkpoints, ``metrics.jsonl``, TensorBoard logs and plots go."""
    env_id: str = "textgym/TicTacToe-v0"
    """Registered env to train on."""
    env_kwargs: dict[str, bool | int | float | str] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make``."""
    wrappers: tuple[str, ...] = ("invalid_action_penalty",)
    """Reward wrappers applied in order (``format_reward``, ``invalid_action_penalty``)."""
    opponent_skill: tuple[float, float] | None = (0.5, 1.0)
    """TicTacToe only: the opponent's ``random_move_prob`` is drawn per task from this range,
    stratified over the tasks of a step (:class:`textgym.wrappers.OpponentSkill`); ``None``
    keeps the env's own setting."""
    seed: int = 0
    """Seed of tasks, sampling and initialisation."""
    steps: int = 100
    """Training steps (rollout + update)."""
    tasks_per_step: int = 8
    """Tasks (groups) per step, M."""
    group_size: int = 8
    """Episodes per task, G (>= 2: a group of one has no baseline)."""
    rollout_batch_size: int = 64
    """Largest number of episodes generated at once."""
    max_new_tokens: int = 32
    """Most tokens per completion (per turn)."""
    temperature: float = 1.0
    """Sampling temperature; training log-probs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 turns it off; the surrogate assumes unmodified sampling)."""
    num_iterations: int = 1
    """Optimizer steps per rollout batch (mu); > 1 reuses the batch with stored old log-probs."""
    loss_type: LossType = "dapo"
    """Surrogate: ``grpo``, ``dapo``, ``dr_grpo``, ``gspo`` or ``cispo`` (see ``losses.py``)."""
    scale_rewards: ScaleRewards | None = None
    """Advantage scaling ``group``, ``batch`` or ``none``; default ``none`` for ``dr_grpo``
    (Dr. GRPO removes the std division), else ``group``."""
    epsilon_low: float | None = None
    """Lower clip range; default per loss type (0.2; gspo 3e-4)."""
    epsilon_high: float | None = None
    """Upper clip range; default per loss type (grpo 0.2, dapo 0.28, gspo 4e-4, cispo 5.0)."""
    beta: float = 0.0
    """Weight of the k3 KL penalty to the initial policy; 0 loads no reference model."""
    share_prefix: bool = True
    """Run the prompt a group's rows share once: in the rollout's prefill
    (``HFPolicy(share_prefill=...)``) and per micro-batch in the update's forward pass
    (:func:`textgym.algos.common.shared_prefix_hidden`). The same samples and loss up to float
    rounding, fewer FLOPs; the update ignores it under gradient checkpointing."""
    mask_truncated: bool = False
    """Give no loss to episodes with a completion cut by ``max_new_tokens`` (DAPO's overlong
    filtering); they still count in their group's statistics."""
    eval_every: int = 10
    """Evaluate every this many steps (0: only at the end)."""
    eval_episodes: int = 100
    """Episodes per evaluation opponent."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation; 0 decodes greedily."""
    save_every: int = 0
    """Checkpoint every this many steps (0: only at the end)."""
    resume: bool = False
    """Continue from the latest checkpoint in ``output_dir``."""
    time_limit_minutes: float | None = None
    """Wall-clock budget of this invocation: after the step that crosses it, save a checkpoint
    and return (a later run with ``resume`` goes on). For preemptible jobs and the GPU suite's
    parts of under 9 minutes. ``None``: no limit."""

    # Derived in __post_init__.
    batch_size: int = field(init=False)
    """M x G episodes per step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(
            self,
            ("steps", "tasks_per_step", "rollout_batch_size", "max_new_tokens", "num_iterations"),
        )
        if self.group_size < 2:
            raise ValueError(
                f"Expected group_size >= 2, got {self.group_size}: a group of one episode has "
                "no baseline, so every advantage would be 0"
            )
        if self.loss_type not in _DEFAULT_EPSILONS:
            raise ValueError(
                f"Unknown loss_type {self.loss_type!r}; expected one of {', '.join(_DEFAULT_EPSILONS)}"
            )
        if self.scale_rewards is None:
            self.scale_rewards = "none" if self.loss_type == "dr_grpo" else "group"
        if self.loss_type == "dr_grpo" and self.scale_rewards != "none":
            raise ValueError(
                f"dr_grpo removes the std division (Liu et al., 2025), got scale_rewards="
                f"{self.scale_rewards!r}; use scale_rewards='none' or another loss_type"
            )
        low, high = _DEFAULT_EPSILONS[self.loss_type]
        self.epsilon_low = low if self.epsilon_low is None else self.epsilon_low
        self.epsilon_high = high if self.epsilon_high is None else self.epsilon_high
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError(
                f"Expected clip ranges >= 0, got {self.epsilon_low}, {self.epsilon_high}"
            )
        if self.eval_temperature < 0:
            raise ValueError(f"Expected eval_temperature >= 0, got {self.eval_temperature}")
        if self.temperature <= 0:
            raise ValueError(f"Expected temperature > 0 for GRPO sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"Expected top_p in (0, 1], got {self.top_p}")
        if self.time_limit_minutes is not None and self.time_limit_minutes <= 0:
            raise ValueError(
                f"Expected time_limit_minutes > 0 or None, got {self.time_limit_minutes}"
            )
        if self.beta < 0:
            raise ValueError(f"Expected beta >= 0, got {self.beta}")
        unknown = [w for w in self.wrappers if w not in REWARD_WRAPPERS]
        if unknown:
            raise ValueError(
                f"Unknown wrappers {unknown}; expected any of {', '.join(REWARD_WRAPPERS)}"
            )
        if (
            self.opponent_skill is not None
            and not 0 <= self.opponent_skill[0] <= self.opponent_skill[1] <= 1
        ):
            raise ValueError(
                f"Expected opponent_skill (low, high) with 0 <= low <= high <= 1, got {self.opponent_skill}"
            )
        self.batch_size = self.tasks_per_step * self.group_size


def train(config: GRPOConfig) -> dict[str, Any]:
    """Run GRPO as ``config`` says; return the last evaluation's metrics.

    With ``resume``, the latest checkpoint in ``output_dir`` is continued; a run that already
    finished its ``steps`` returns its ``final_eval.json`` untouched.

    Raises:
        ValueError: an env or model that cannot be used (see the messages); a resume whose
            config differs in what the run learns (:func:`~textgym.algos.common.check_resumable`)
            or whose checkpoint is past ``steps``; an episode return that is NaN or inf.
        FloatingPointError: optimizer steps keep having a non-finite loss or gradient norm
            (:class:`~textgym.algos.common.NonFiniteGuard`); nothing non-finite is saved.
    """
    torch.manual_seed(config.seed)
    device = resolve_device(config.device)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Resume checks come first, so a refused resume leaves the run's records untouched.
    checkpoint = latest_checkpoint(out) if config.resume else None
    if checkpoint is not None:
        check_resumable(checkpoint, config)
        if checkpoint.name == f"checkpoint-{config.steps}" and (out / "final_eval.json").exists():
            print(f"{out} already finished its {config.steps} steps; nothing to do")
            return json.loads((out / "final_eval.json").read_text())
    write_run_record(out, config)
    task = _env_factory(config)

    model, tokenizer = load_model(config.model, device=device)
    reference = copy.deepcopy(model).eval() if config.beta > 0 and config.lora_rank == 0 else None
    model = prepare_model(
        model,
        gradient_checkpointing=config.gradient_checkpointing,
        lora_rank=config.lora_rank,
        lora_alpha=config.lora_alpha,
    )
    policy = HFPolicy(
        model,
        tokenizer,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        stop=list(task.stop),
        batch_size=config.rollout_batch_size,
        seed=config.seed,
        share_prefill=config.share_prefix,
    )
    evaluator = HFPolicy(
        model,
        tokenizer,
        max_new_tokens=config.max_new_tokens,
        temperature=config.eval_temperature,
        stop=list(task.stop),
        batch_size=config.rollout_batch_size,
        seed=config.seed + 1,
    )
    optimizer, scheduler = make_optimizer(model, config)

    start = 0
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model=model, optimizer=optimizer, scheduler=scheduler)
        start = int(state["step"])
        policy.set_sampling_state(state["extra"].get("sampling_state"))
    logger = MetricsLogger(out, tensorboard=config.tensorboard, resume=config.resume)
    if checkpoint is not None:
        logger.truncate_after(start)
    max_loss_tokens = config.max_new_tokens * task.max_turns
    guard = NonFiniteGuard()

    def run_eval() -> dict[str, float]:
        metrics = evaluate(
            task.make,
            evaluator,
            episodes=config.eval_episodes,
            seed=config.seed,
            batch_size=config.rollout_batch_size,
        )
        evaluator.clear_cache()
        return metrics

    eval_metrics: dict[str, Any] = {}

    deadline = (
        time.perf_counter() + 60 * config.time_limit_minutes
        if config.time_limit_minutes is not None
        else math.inf
    )
    with logger:
        if start == 0:
            eval_metrics = run_eval()
            logger.log(0, eval_metrics, stage="eval")
        for step in range(start, config.steps):
            began = time.perf_counter()
            trajectories = _rollout_step(task, policy, config, step)
            policy.clear_cache()  # the update needs the memory; new weights void the cache anyway
            rolled = time.perf_counter()
            metrics = _train_on(
                trajectories,
                model,
                reference,
                optimizer,
                scheduler,
                config,
                device,
                tokenizer.pad_token_id or 0,
                max_loss_tokens,
                guard,
            )
            metrics.update(_rollout_metrics(trajectories))
            metrics.update(
                rollout_time_s=rolled - began,
                update_time_s=time.perf_counter() - rolled,
                step_time_s=time.perf_counter() - began,
                lr=scheduler.get_last_lr()[0],
            )
            if device.type == "cuda":
                metrics["cuda_max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            logger.log(step + 1, metrics)
            done = step + 1 == config.steps
            if done or (config.eval_every and (step + 1) % config.eval_every == 0):
                eval_metrics = run_eval()
                logger.log(step + 1, eval_metrics, stage="eval")
            out_of_time = time.perf_counter() > deadline
            if done or out_of_time or (config.save_every and (step + 1) % config.save_every == 0):
                save_checkpoint(
                    out,
                    step + 1,
                    model=model,
                    tokenizer=tokenizer,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    config=config,
                    extra={"sampling_state": policy.sampling_state()},
                )
            if out_of_time and not done:
                print(
                    f"time limit of {config.time_limit_minutes} min reached after step "
                    f"{step + 1}; resume to go on"
                )
                break
    plot_metrics(out / "metrics.jsonl", out / "plots")
    (out / "final_eval.json").write_text(json.dumps(eval_metrics, indent=2) + "\n")
    return eval_metrics


@dataclass(frozen=True)
class _Task:
    """How to build the training env, read once from a probe instance."""

    make: Callable[[], gym.Env]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)
    max_turns: int  # most agent turns per episode (the registered step limit, else 1)
    stratified: bool  # an OpponentSkill wrapper draws the opponent per task


def _env_factory(config: GRPOConfig) -> _Task:
    if config.env_id not in gym.registry:
        raise ValueError(f"Unknown env id {config.env_id!r}; see `textgym list`")

    def make() -> gym.Env:
        env = gym.make(config.env_id, **config.env_kwargs)
        if config.opponent_skill is not None and _has_opponent(env):
            low, high = config.opponent_skill
            env = OpponentSkill(env, low=low, high=high, groups=config.tasks_per_step)
        for name in config.wrappers:
            env = REWARD_WRAPPERS[name](env)
        return env

    probe = make()
    steps = probe.spec.max_episode_steps if probe.spec is not None else None
    task = _Task(
        make,
        tuple(getattr(probe.unwrapped, "stop_strings", ())),
        int(steps or 1),
        config.opponent_skill is not None and _has_opponent(probe),
    )
    probe.close()
    return task


def _has_opponent(env: gym.Env) -> bool:
    return hasattr(env.unwrapped, "random_move_prob")


def _rollout_step(task: _Task, policy: HFPolicy, config: GRPOConfig, step: int) -> list[Trajectory]:
    """Play step ``step``'s M tasks x G copies; a task's copies share seed and opponent stratum."""
    first = config.seed * 10**6 + step * config.tasks_per_step
    seeds = [first + i // config.group_size for i in range(config.batch_size)]
    options = [{"episode_index": i // config.group_size} for i in range(config.batch_size)]
    return rollout(
        task.make,
        policy,
        seeds,
        batch_size=config.rollout_batch_size,
        options=options if task.stratified else None,
        token_level=True,
    )


def _train_on(
    trajectories: list[Trajectory],
    model: Any,
    reference: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    config: GRPOConfig,
    device: torch.device,
    pad_token_id: int,
    max_loss_tokens: int,
    guard: NonFiniteGuard | None = None,
) -> dict[str, float]:
    """Advantages, then ``num_iterations`` optimizer steps on the groups that carry signal.

    Raises:
        ValueError: an episode return is NaN or inf (an env or wrapper bug; nothing is updated).
        FloatingPointError: from ``guard`` when steps keep having a non-finite loss or gradient.
    """
    guard = guard if guard is not None else NonFiniteGuard()
    returns = [t.episode_return for t in trajectories]
    bad = [(i, r) for i, r in enumerate(returns) if not math.isfinite(r)]
    if bad:
        i, value = bad[0]
        raise ValueError(
            f"Episode {i} of this step (task {trajectories[i].task_id!r}) returned {value}; "
            f"{len(bad)} of {len(returns)} returns are not finite, so no update was made. "
            "Rewards come from the env and its wrappers: check their reward components."
        )
    rewards = torch.tensor(returns)  # [B] float32
    advantages = group_advantages(rewards, config.group_size, config.scale_rewards)  # [B]
    flat = zero_variance_groups(rewards, config.group_size)  # [M] bool
    keep = (~flat).repeat_interleave(config.group_size)  # [B] bool
    metrics = {
        "zero_variance_fraction": float(flat.float().mean()),
        "advantage_abs_mean": float(advantages.abs().mean()),
    }
    if (
        not keep.any()
    ):  # same keys every step (NaN is written as null), so plots have no gaps in kind
        skipped = (
            "loss",
            "grad_norm",
            "clip_fraction",
            "ratio_mean",
            "kl",
            "entropy",
            "sampler_logprob_gap",
        )
        return (
            metrics
            | dict.fromkeys(skipped, float("nan"))
            | {"loss_tokens": 0.0, "skipped_update": 1.0}
        )

    kept = [t for t, k in zip(trajectories, keep.tolist()) if k]
    masks = [_loss_mask(t, config.mask_truncated) for t in kept]
    batch = make_token_batch(
        [t.token_ids for t in kept],
        masks,
        [t.token_logprobs for t in kept],
        pad_token_id=pad_token_id,
    )
    normalizer = loss_normalizer(config.loss_type, batch.loss_mask, max_loss_tokens)
    micro = [
        (
            batch.select(slice(i, i + config.micro_batch_size)).to(device),
            advantages[keep][i : i + config.micro_batch_size].to(device),
        )
        for i in range(0, len(batch), config.micro_batch_size)
    ]
    old, ref = _fixed_log_probs(model, reference, micro, config, device)
    for iteration in range(config.num_iterations):
        stats = _optimizer_step(
            model, optimizer, micro, old, ref, normalizer, config, device, guard
        )
        scheduler.step()
        if iteration == 0:
            metrics.update(stats)
    metrics["skipped_update"] = 0.0
    metrics["sampler_logprob_gap"] = _sampler_gap(micro, old)
    return metrics


def _loss_mask(traj: Trajectory, mask_truncated: bool) -> list[int]:
    """The trajectory's loss mask, all zeros when it must not train (overlong filtering)."""
    if mask_truncated and "length" in traj.finish_reasons:
        return [0] * len(traj.loss_mask)
    return traj.loss_mask


@torch.no_grad()
def _fixed_log_probs(
    model: Any,
    reference: Any,
    micro: list[tuple[TokenBatch, torch.Tensor]],
    config: GRPOConfig,
    device: torch.device,
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Old log-probs (only when the batch is reused) and reference log-probs (only if beta > 0)."""
    old: list[torch.Tensor | None] = [None] * len(micro)
    ref: list[torch.Tensor | None] = [None] * len(micro)
    for i, (mb, _adv) in enumerate(micro):
        with autocast(device, config.bf16, cpu_bf16=config.cpu_bf16):
            if config.num_iterations > 1:
                old[i] = _log_probs(model, mb, config)[0]  # [b, L-1]
            if config.beta > 0:
                ref[i] = _reference_log_probs(model, reference, mb, config)  # [b, L-1]
    return old, ref


def _log_probs(
    model: Any, mb: TokenBatch, config: GRPOConfig, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return sequence_log_probs(
        model,
        mb,
        temperature=config.temperature,
        chunk_size=config.logprob_chunk_size,
        with_entropy=with_entropy,
        share_prefix=config.share_prefix,
    )


def _reference_log_probs(
    model: Any, reference: Any, mb: TokenBatch, config: GRPOConfig
) -> torch.Tensor:
    if reference is not None:
        return _log_probs(reference, mb, config)[0]
    with model.disable_adapter():  # LoRA: the base weights are the reference policy
        return _log_probs(model, mb, config)[0]


def _optimizer_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    micro: list[tuple[TokenBatch, torch.Tensor]],
    old: list[torch.Tensor | None],
    ref: list[torch.Tensor | None],
    normalizer: float,
    config: GRPOConfig,
    device: torch.device,
    guard: NonFiniteGuard,
) -> dict[str, float]:
    """One optimizer step, gradients accumulated over the micro-batches; skipped (and counted
    in ``nonfinite_skipped``) when the loss or gradient norm is not finite."""
    optimizer.zero_grad(set_to_none=True)
    totals = {
        "loss": 0.0,
        "clipped_tokens": 0.0,
        "tokens": 0.0,
        "ratio_sum": 0.0,
        "kl_sum": 0.0,
        "entropy_sum": 0.0,
    }
    for (mb, adv), old_logp, ref_logp in zip(micro, old, ref):
        with autocast(device, config.bf16, cpu_bf16=config.cpu_bf16):
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
        totals["loss"] += float(loss.detach())
        totals["entropy_sum"] += float((entropy * mb.loss_mask).sum())
        for key in ("clipped_tokens", "tokens", "ratio_sum", "kl_sum"):
            totals[key] += float(stats[key])
    params = [p for p in model.parameters() if p.requires_grad]
    norm, stepped = guard.step(optimizer, params, totals["loss"], config.max_grad_norm)
    tokens = max(totals["tokens"], 1.0)
    return {
        "loss": totals["loss"],
        "grad_norm": norm,
        "nonfinite_skipped": 0.0 if stepped else 1.0,
        "clip_fraction": totals["clipped_tokens"] / tokens,
        "ratio_mean": totals["ratio_sum"] / tokens,
        "kl": totals["kl_sum"] / tokens,
        "entropy": totals["entropy_sum"] / tokens,
        "loss_tokens": totals["tokens"],
    }


def _sampler_gap(
    micro: list[tuple[TokenBatch, torch.Tensor]], old: list[torch.Tensor | None]
) -> float:
    """Mean |sampling log-prob - training log-prob| on loss tokens (NaN when not recomputed)."""
    if old[0] is None:
        return float("nan")
    gap = sum(
        float(((mb.sampler_logprobs - o).abs() * mb.loss_mask).sum())
        for (mb, _), o in zip(micro, old)
    )
    tokens = sum(float(mb.loss_mask.sum()) for mb, _ in micro)
    return gap / max(tokens, 1.0)


def _rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Reward, its components, outcomes and invalid rate of the training rollouts."""
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
) -> dict[str, float]:
    """Evaluate a policy: win/draw/loss and invalid rates against the random and the optimal
    opponent (``random_move_prob`` 1 and 0) for envs with an opponent, else mean return.

    Evaluation seeds start at 10**9 + seed * 10**6, away from every training task.

    Returns:
        ``{"random/win_rate": ..., "optimal/invalid_rate": ..., ...}`` (rates in [0, 1]) or
        ``{"eval/return_mean": ..., "eval/invalid_rate": ...}``.
    """
    seeds = [_EVAL_SEED_OFFSET + seed * 10**6 + i for i in range(episodes)]
    probe = make_env()
    opponents = {"random": 1.0, "optimal": 0.0} if _has_opponent(probe) else {"eval": None}
    probe.close()
    metrics: dict[str, float] = {}
    for name, prob in opponents.items():
        options = {"random_move_prob": prob} if prob is not None else None
        summary = summarize(
            rollout(make_env, policy, seeds, batch_size=batch_size, options=options)
        )
        metrics[f"{name}/return_mean"] = summary["mean_return"]
        metrics[f"{name}/invalid_rate"] = summary["invalid_action_rate"]
        if prob is not None:
            metrics.update({f"{name}/{k}_rate": v for k, v in summary["outcomes"].items()})
    return metrics
