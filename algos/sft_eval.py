"""What ``textgym sft`` measures besides its training loss: the held-out loss of ``eval_data``
after each epoch (with early stopping on it), and the greedy evaluation in ``eval_env``.

The held-out loss is the training loss's definition (mean NLL per assistant token, nats, the
normaliser counted over the whole set) on conversations the run does not train on, computed
without gradients through the same micro-batching and log-prob function as a step
(:func:`textgym.algos.batches.sequence_log_probs`), so the two curves are comparable. Early
stopping follows the usual rule (``transformers``' ``EarlyStoppingCallback``): stop once
``patience`` evaluations in a row have not improved on the best so far; and, as
``load_best_model_at_end`` does there, the model saved is the epoch with the lowest held-out
loss (:class:`BestEpoch`), not the last one, which early stopping keeps for ``patience`` epochs
past the best and an epoch cap may keep past an overfit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from textgym.algos.batches import make_token_batch, micro_batch_log_probs
from textgym.algos.common import StopOnInterrupt, TrainingInterrupted
from textgym.algos.grpo_rollouts import evaluate
from textgym.builder import EnvRecipe, env_factory
from textgym.policies.hf import HFPolicy
from textgym.progress import EpisodeProgress

__all__ = [
    "BestEpoch",
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


@dataclass
class BestEpoch:
    """The epoch with the lowest held-out loss so far and, when this process trained it, a
    copy of its trainable weights on the CPU (a LoRA adapter's few MB; the whole model's bytes
    when every weight trains).

    Attributes:
        epoch: The best epoch, from 0 as in metrics.jsonl (``None``: none measured).
        loss: Its held-out loss (nats per assistant token).
        weights: Its trainable weights by name, or ``None`` when it ended before this process
            started (a resumed run); :meth:`restore` then reads them from its checkpoint.
    """

    epoch: int | None = None
    loss: float = math.inf
    weights: dict[str, torch.Tensor] | None = None

    @classmethod
    def of(cls, losses: Sequence[float]) -> BestEpoch:
        """The best of the held-out losses a resumed run read back (their weights not held)."""
        finite = [(loss, epoch) for epoch, loss in enumerate(losses) if math.isfinite(loss)]
        if not finite:
            return cls()
        loss, epoch = min(finite)
        return cls(epoch, loss)

    def offer(self, model: Any, epoch: int, loss: float) -> None:
        """Keep ``model``'s trainable weights if ``loss`` is below the best so far."""
        if math.isfinite(loss) and loss < self.loss:
            self.epoch, self.loss = epoch, loss
            self.weights = {
                name: param.detach().to("cpu", copy=True)
                for name, param in model.named_parameters()
                if param.requires_grad
            }

    def restore(self, run: Any, last_epoch: int, steps_per_epoch: int) -> str | None:
        """Put the best epoch's weights back into ``run.model`` when it is not ``last_epoch``;
        ``None``, or a one-line note when they are gone (a resumed run whose best epoch ended
        between checkpoints: the last epoch's weights stay).

        Raises:
            CheckpointError: the best epoch's checkpoint does not load.
        """
        if self.epoch is None or self.epoch == last_epoch:
            return None
        if self.weights is not None:
            params = dict(run.model.named_parameters())
            with torch.no_grad():
                for name, saved in self.weights.items():
                    params[name].copy_(saved)
            return None
        from textgym.algos.resume import load_checkpoint

        step = (self.epoch + 1) * steps_per_epoch
        checkpoint = Path(run.config.output_dir) / f"checkpoint-{step}"
        if not checkpoint.is_dir():
            return (
                f"the best held-out epoch ({self.epoch}) ended at step {step}, which this "
                "resumed run has no checkpoint of; the last epoch's weights are saved"
            )
        load_checkpoint(
            checkpoint,
            model=run.model,
            optimizer=run.optimizer,
            scheduler=run.scheduler,
            optimizer_needed=False,
        )
        return None


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
