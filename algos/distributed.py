"""Data-parallel training on ``torch.distributed``: the rank context and the few collectives.

Both trainers run data-parallel when launched by ``torchrun`` (one process per device):

.. code-block:: bash

    torchrun --nproc-per-node 2 -m textgym.cli train --model tiny --device cpu ...
    torchrun --nproc-per-node 8 -m textgym.cli train --model gemma-3-270m ...
    torchrun --nproc-per-node 2 -m textgym.cli sft --data games.jsonl ...

``textgym.algos.grpo.train`` and ``textgym.algos.sft.train`` call :func:`init_distributed`
themselves: with ``WORLD_SIZE`` above 1 it joins the process group from torchrun's
environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), with the ``gloo`` backend on the CPU and ``nccl`` on CUDA (rank ``r`` uses
``cuda:LOCAL_RANK``). Without torchrun (``WORLD_SIZE`` unset or 1) there is no process group
and no collective, and the trainers run exactly as before.

What each rank does (every rank holds a full copy of the model, as in DDP):

* GRPO: each rank plays ``groups_per_step / world_size`` of the step's groups (a group never
  straddles ranks, so advantages stay group-relative; the rewards are all-gathered, so
  ``scale_rewards="batch"`` sees the whole batch). SFT: each rank takes its share of each
  step's conversations.
* The loss normaliser is global: the count it divides by (sequences, loss tokens or
  sequences x the token limit, per row of ``LOSS_VARIANTS``; each is a sum over sequences) is
  all-reduced before the backward pass, so the summed per-rank losses are the loss of one
  process over the whole batch, for every loss type.
* Gradients are all-reduced (sum) once per optimizer step, before clipping, so every rank
  clips by the same global norm and takes the same step. This is DDP's all-reduce done by
  hand: the trainers call the decoder and the LM head directly (chunked log-probs, prefix
  sharing), which ``DistributedDataParallel``'s forward hook would not see.
* Metrics are reduced to whole-batch values; only rank 0 writes logs, checkpoints, plots and
  evaluations. A checkpoint holds nothing rank-specific (the weights and optimizer state are
  the same on every rank, and with more than one rank each rank's sampling RNG is re-seeded
  every step from ``(seed, step, rank)``), so a run resumes on any number of ranks.

FSDP / DeepSpeed ZeRO are not built: they pay off only when the weights, gradients and AdamW
state (about 16 bytes per parameter in float32, plus activations) do not fit one device.
Gemma-3-270M needs about 4.5 GB for that and trains on one 24 GB GPU with room to spare; models
from about 1B parameters (16 GB of state before activations) need sharding on 24 GB GPUs, and
from about 4B on 80 GB GPUs.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from textgym.algos.model_loading import resolve_device

__all__ = [
    "SINGLE_PROCESS",
    "DistributedContext",
    "NullLogger",
    "all_gather_objects",
    "any_rank",
    "all_reduce_gradients",
    "all_reduce_sum",
    "barrier",
    "shutdown_distributed",
    "broadcast_parameters",
    "init_distributed",
    "rank_slice",
]


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands in a data-parallel run.

    Attributes:
        rank: This process's rank in ``[0, world_size)``.
        world_size: Number of processes (1: no process group, every collective is a no-op).
        device: Where this rank trains (``cuda:LOCAL_RANK`` on CUDA).
    """

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that writes logs, checkpoints and evaluations."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether there is more than one rank (and so a process group)."""
        return self.world_size > 1


#: The context of a run in one process.
SINGLE_PROCESS = DistributedContext()


def init_distributed(device: str = "auto") -> DistributedContext:
    """The rank context from torchrun's environment, joining the process group if needed.

    Args:
        device: The trainer's ``device`` setting (``auto``, ``cpu``, ``cuda``, ``cuda:i``);
            with more than one rank on CUDA each rank takes ``cuda:LOCAL_RANK``.

    Returns:
        ``DistributedContext(rank=0, world_size=1, device=resolve_device(device))`` when
        ``WORLD_SIZE`` is unset or 1 (no process group is made); else the rank's context, after
        ``torch.distributed.init_process_group`` (``gloo`` on the CPU, ``nccl`` on CUDA; the
        rendezvous reads ``MASTER_ADDR`` and ``MASTER_PORT``) unless a group already exists.

    Raises:
        ValueError: CUDA asked for and not available; an existing process group whose world
            size differs from ``WORLD_SIZE``.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    resolved = resolve_device(device)
    if world_size <= 1:
        return DistributedContext(device=resolved)
    rank = int(os.environ["RANK"])
    if resolved.type == "cuda":
        resolved = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(resolved)
    if not dist.is_initialized():
        backend = "nccl" if resolved.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world_size)
        atexit.register(_destroy)
    if dist.get_world_size() != world_size:
        raise ValueError(
            f"Expected a process group of WORLD_SIZE={world_size} ranks, got "
            f"{dist.get_world_size()}; launch with torchrun, which sets both"
        )
    return DistributedContext(rank=rank, world_size=world_size, device=resolved)


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shutdown_distributed() -> None:
    """Leave the process group together: a barrier, then ``destroy_process_group``.

    Call it once at the end of a script that trained under ``torchrun`` (``textgym train`` and
    ``textgym sft`` do). Without it every rank tears gloo down from an ``atexit`` hook on its
    own; a rank that left while another was still finishing aborted once in CI with
    ``terminate called without an active exception`` (SIGABRT), after all its work was done,
    which makes ``torchrun`` report the run as failed. Nothing happens without a group.
    """
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(values: Sequence[float], ctx: DistributedContext) -> list[float]:
    """Element-wise sum of ``values`` over the ranks, in float64 (exact for counts below 2**53).

    Args:
        values: ``[n]`` numbers, the same ``n`` on every rank.
        ctx: The rank context; with one rank the values come back unchanged.

    Returns:
        ``[n]`` Python floats, the same on every rank.
    """
    if not ctx.distributed:
        return [float(v) for v in values]
    tensor = torch.tensor(list(values), dtype=torch.float64, device=ctx.device)  # [n] float64
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_gather_objects(obj: Any, ctx: DistributedContext) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` with one rank."""
    if not ctx.distributed:
        return [obj]
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def all_reduce_gradients(params: Iterable[torch.Tensor], ctx: DistributedContext) -> None:
    """Sum each parameter's ``.grad`` over the ranks, in place (what DDP does, once per step).

    A parameter whose gradient is ``None`` on every rank keeps ``None`` (so the optimizer skips
    it, as it would in one process); one that has a gradient on some rank only (a rank whose
    share of the batch carried no loss) gets zeros on the others before the sum.

    Args:
        params: The trainable parameters, in the same order on every rank.
        ctx: The rank context; nothing happens with one rank.
    """
    if not ctx.distributed:
        return
    params = list(params)
    present = [float(p.grad is not None) for p in params]
    anywhere = all_reduce_sum(present, ctx)
    handles = []
    for param, count in zip(params, anywhere):
        if count == 0:
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        handles.append(dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, async_op=True))
    for handle in handles:
        handle.wait()


def broadcast_parameters(model: Any, ctx: DistributedContext) -> None:
    """Copy rank 0's trainable parameters to every rank (as DDP does at construction), so the
    ranks start from the same weights even if a random initialisation (LoRA) differed."""
    if not ctx.distributed:
        return
    for param in model.parameters():
        if param.requires_grad:
            dist.broadcast(param.data, src=0)


def barrier(ctx: DistributedContext) -> None:
    """Wait until every rank gets here; nothing with one rank."""
    if ctx.distributed:
        dist.barrier()


def any_rank(flags: Sequence[bool], ctx: DistributedContext) -> list[bool]:
    """Whether each of ``flags`` is true on any rank (so every rank takes the same branch); one
    collective for all of them."""
    if not ctx.distributed:
        return list(flags)
    return [total > 0 for total in all_reduce_sum([float(f) for f in flags], ctx)]


def rank_slice(count: int, ctx: DistributedContext) -> slice:
    """This rank's contiguous share of ``count`` items (ranks in order, each ``ceil(count /
    world_size)``, the last ones maybe short or empty); all of them on one process."""
    if not ctx.distributed:
        return slice(None)
    share = -(-count // ctx.world_size)
    return slice(ctx.rank * share, (ctx.rank + 1) * share)


class NullLogger:
    """Stands in for :class:`~textgym.algos.metrics.MetricsLogger` on ranks other than 0: the
    same calls, nothing written."""

    def __enter__(self) -> NullLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def log(self, *args: Any, **kwargs: Any) -> None:
        """Write nothing."""

    def truncate_after(self, *args: Any, **kwargs: Any) -> None:
        """Change nothing."""
