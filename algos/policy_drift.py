"""How far a GRPO policy has moved from where the run started, measured on each step's samples.

:func:`start_policy_drift` gives ``kl_to_start``: the k3 estimate of ``KL(policy || start
policy)`` (nats per generated token, :func:`~textgym.algos.losses.k3_kl`) on the tokens the
step sampled, on evaluation steps (``eval_every``) and the last step only: it costs one forward
pass without gradients over the step's episodes. The policy's log-probs are the sampler's own (recorded during the rollout, so
no forward pass of the trained weights is needed); the start policy's come from one forward
pass without gradients over the step's episodes, and only where a start policy is held for
free:

- with LoRA, the model with its adapter disabled (peft's ``disable_adapter()``): the base
  weights, which the adapter starts from (its B matrix is zero at initialisation);
- with ``continue_adapter``, the adapter's weights as loaded, swapped in for the pass;
- with ``beta > 0``, the frozen reference model the KL penalty already keeps.

A full fine-tune with ``beta == 0`` holds no copy of its start, and keeping one would double the
weights in memory, so there it is not measured (the key is absent); the per-step change of
``sampled_entropy`` (:func:`~textgym.algos.grpo_rollouts.rollout_metrics`) still shows the
sampler moving. Where the samples come from other weights than the learner's (a bfloat16 copy,
a quantized llama-server), their log-prob gap (``sampler_logprob_gap``) is part of the number.
"""

from __future__ import annotations

from typing import Any

import torch

from textgym.algos.batches import make_token_batch, micro_batch_rows, sequence_log_probs
from textgym.algos.distributed import all_reduce_sum
from textgym.algos.losses import k3_kl
from textgym.algos.model_loading import autocast
from textgym.rollout import Trajectory

__all__ = ["start_policy_drift"]


@torch.no_grad()
def start_policy_drift(learner: Any, trajectories: list[Trajectory]) -> dict[str, float]:
    """``{"kl_to_start": k3 KL(policy || start) per generated token}`` over this step's
    episodes (all ranks'), or ``{}`` when the learner holds no start policy (see the module
    docstring).

    Args:
        learner: The :class:`~textgym.algos.learner.Learner`.
        trajectories: The step's token-level episodes (this rank's share).
    """
    if not learner.has_start_policy():
        return {}
    config = learner.config
    rows = [t for t in trajectories if sum(t.loss_mask) and len(t.token_ids) >= 2]
    total, tokens = 0.0, 0.0
    if rows:
        batch = make_token_batch(
            [t.token_ids for t in rows],
            [t.loss_mask for t in rows],
            [t.token_logprobs for t in rows],
            pad_token_id=learner.pad_token_id,
        )
        for picked in micro_batch_rows(batch, config):
            mb = batch.select(picked).to(learner.device)
            start = _start_log_probs(learner, mb)  # [b, L-1] float32
            kl = k3_kl(mb.sampler_logprobs, start) * mb.loss_mask  # [b, L-1]
            total += float(kl.sum())
            tokens += float(mb.loss_mask.sum())
    if learner.dist.distributed:
        total, tokens = all_reduce_sum([total, tokens], learner.dist)
    return {"kl_to_start": total / tokens} if tokens else {}


def _start_log_probs(learner: Any, mb: Any) -> torch.Tensor:
    """The start policy's log-probs of ``mb``'s loss tokens, ``[b, L-1]`` float32."""
    config = learner.config
    settings = {
        "temperature": config.temperature,
        "chunk_size": config.logprob_chunk_size,
        "share_prefix": config.share_prefix,
        "packed": config.micro_batch_tokens is not None,
    }
    mixed = autocast(learner.device, config.bf16, cpu_bf16=config.cpu_bf16)
    with mixed, learner.start_policy() as start:
        return sequence_log_probs(start, mb, **settings)[0]
