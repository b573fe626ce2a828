"""What ``textgym sft`` measures besides its training loss: the held-out loss of ``eval_data``
after each epoch (with early stopping on it), and the greedy evaluation in ``eval_env``.

The held-out loss is the training loss's definition (mean NLL per assistant token, nats, the
normaliser counted over the whole set) on conversations the run does not train on, computed
without gradients through the same micro-batching and log-prob function as a step
(:func:`textgym.algos.batches.sequence_log_probs`), so the two curves are comparable. Early
stopping follows the usual rule (``transformers``' ``EarlyStoppingCallback``): stop once
``patience`` evaluations in a row have not improved on the best so far.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from textgym.algos.batches import make_token_batch, micro_batch_log_probs
from textgym.algos.common import StopOnInterrupt, TrainingInterrupted
from textgym.algos.grpo_rollouts import evaluate
from textgym.builder import EnvRecipe, env_factory
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress

__all__ = [
    "check_eval_env",
    "evaluate_in_env",
    "final_evaluation",
    "heldout_loss",
    "stops_early",
]


@torch.no_grad()
def heldout_loss(run: Any, sequences: Sequence[tuple[list[int], list[int]]]) -> float:
    """Mean NLL per assistant token (nats) of ``sequences`` under ``run.model``.

    Args:
        run: The :class:`~textgym.algos.sft.SFTRun` (model, device, config's micro-batching).
        sequences: Tokenized ``(ids, loss_mask)`` conversations, as the training ones.

    Returns:
        The token mean over all of ``sequences`` (NaN when they hold no assistant token); the
        model is back in training mode after.
    """
    config = run.config
    total, count = 0.0, 0.0
    run.model.eval()
    try:
        for first in range(0, len(sequences), config.batch_size):
            part = sequences[first : first + config.batch_size]
            tokens = make_token_batch(
                [ids for ids, _ in part], [mask for _, mask in part], pad_token_id=run.pad_token_id
            )
            count += float(tokens.loss_mask.sum())
            for micro, logp in micro_batch_log_probs(run.model, tokens, config, run.device):
                total -= float((logp * micro.loss_mask).sum())
    finally:
        run.model.train()
    return total / count if count else math.nan


def stops_early(losses: Sequence[float], patience: int) -> bool:
    """Whether the last ``patience`` held-out losses (oldest first in ``losses``) all failed to
    improve on the best before them (0: never stop)."""
    if patience <= 0 or len(losses) <= patience:
        return False
    best_before = min(losses[:-patience])
    return all(not loss < best_before for loss in losses[-patience:])


def check_eval_env(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Build ``env_id`` once, so a wrong id or kwargs fail before any training.

    Raises:
        SetupError: as :func:`textgym.builder.env_factory` (unknown id, kwargs the env rejects).
    """
    _, probe = env_factory(EnvRecipe(env_id, dict(env_kwargs), ()))
    probe.close()


def final_evaluation(run: Any, step: int, stop: StopOnInterrupt, save: Any) -> dict[str, float]:
    """The evaluation after the last step, which a Ctrl-C abandons at once; if it fails or is
    abandoned, ``save(run, step)`` checkpoints the last step first (then the error is re-raised,
    a Ctrl-C as :class:`TrainingInterrupted`), so a resume only evaluates."""
    try:
        with stop.abandonable():
            return evaluate_in_env(run, step)
    except BaseException as exc:
        checkpoint = save(run, step)
        if isinstance(exc, KeyboardInterrupt):
            raise TrainingInterrupted(step, checkpoint) from None
        raise


def evaluate_in_env(run: Any, step: int) -> dict[str, float]:
    """Greedy evaluation of the model being trained in ``config.eval_env`` after ``step``
    optimizer steps (:func:`textgym.algos.grpo_rollouts.evaluate`: the same settings, seeds and
    metric names as ``textgym train``'s evaluations); the model is back in training mode after.
    """
    config = run.config
    make, probe = env_factory(EnvRecipe(config.eval_env or "", dict(config.eval_env_kwargs), ()))
    stop_strings = list(probe.unwrapped.stop_strings)
    probe.close()
    policy = HFPolicy(
        run.model,
        run.tokenizer,
        max_new_tokens=config.eval_max_new_tokens,
        temperature=0.0,
        batch_size=config.batch_size,
        stop=stop_strings,
        seed=config.seed + 1,
    )
    run.model.eval()
    try:
        with EpisodeProgress(
            f"evaluation after step {step} of {run.total_steps} ({config.eval_env})",
            enabled=config.progress,
            transient=False,
        ) as progress:
            return evaluate(
                make,
                policy,
                episodes=config.eval_episodes,
                seed=config.seed,
                batch_size=config.batch_size,
                progress=progress,
            )
    finally:
        policy.clear_cache()
        run.model.train()
