"""The learner state of a GRPO run (:class:`Learner`): what one update reads and changes.

The update itself is :func:`textgym.algos.grpo_update.update`; this module is below it so that the
rollout side (:mod:`textgym.algos.grpo_rollouts`) can ask how the learner samples without
importing the loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from textgym.algos.common import NonFiniteGuard, make_optimizer
from textgym.algos.distributed import SINGLE_PROCESS, DistributedContext, broadcast_parameters
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.model_loading import adapter_start, load_trainable_model, resolve_device

__all__ = ["Learner", "bf16_rollouts", "make_learner", "sampled_elsewhere"]


@dataclass(kw_only=True)
class Learner:
    """The learner state of a GRPO run: everything :func:`textgym.algos.grpo_update.update` reads or changes.

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
        start_adapter: With ``continue_adapter``, a copy of the adapter's weights as loaded
            (:func:`~textgym.algos.model_loading.adapter_start`): the start policy, since
            disabling the adapter would give its base instead.
        tokenizer: The model's tokenizer (``None`` when only :func:`textgym.algos.grpo_update.update` is needed).
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
    start_adapter: dict[str, torch.Tensor] | None = None
    tokenizer: Any = None
    pad_token_id: int = 0
    guard: NonFiniteGuard = field(default_factory=NonFiniteGuard)
    dist: DistributedContext = SINGLE_PROCESS

    def has_start_policy(self) -> bool:
        """Whether :meth:`start_policy` can give the policy the run started from for free: a
        reference model, a LoRA adapter to disable, or the copy of a continued adapter."""
        return (
            self.reference is not None
            or self.start_adapter is not None
            or hasattr(self.model, "disable_adapter")
        )

    @contextlib.contextmanager
    def start_policy(self) -> Iterator[Any]:
        """The model to forward as the start policy (no gradients): the reference model; with a
        continued adapter, the model with the adapter's start weights swapped in and the trained
        ones put back on exit; with LoRA, the model with its adapter disabled (the base).

        Only where no autograd graph over the weights is alive (the swap writes them in place).
        """
        if self.reference is not None:
            yield self.reference
        elif self.start_adapter is not None:
            params = dict(self.model.named_parameters())
            trained = {n: params[n].detach().clone() for n in self.start_adapter}
            with torch.no_grad():
                for name, weight in self.start_adapter.items():
                    params[name].copy_(weight)
            try:
                yield self.model
            finally:
                with torch.no_grad():
                    for name, weight in trained.items():
                        params[name].copy_(weight)
        else:
            with self.model.disable_adapter():
                yield self.model


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
