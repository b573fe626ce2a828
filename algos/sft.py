"""Supervised fine-tuning on chat records (``textgym sft``): the warm-up before GRPO.

Reads the JSONL that ``textgym collect`` writes (one ``{"messages": [...]}`` record per
episode, e.g. minimax games; :mod:`textgym.algos.sft_data`), builds each conversation's token sequence turn by turn exactly as
a token-in / token-out rollout would (:class:`textgym.tokens.ChatTokenizer`: an assistant turn
is its content followed by the end-of-turn token), and minimises the negative log-likelihood of
the assistant tokens only; system, user, tool and template tokens carry no loss.

The loss is the token mean over each optimizer batch, with the normaliser counted over the
whole batch before it is split into micro-batches, so gradient accumulation does not change the
update. Log-probs come from the same chunked function as GRPO's
(:func:`textgym.algos.batches.sequence_log_probs`). We write this loop instead of using TRL's
``SFTTrainer`` for that reason: the warm-up and the RL stage then share masks, numerics and the
checkpoint layout, and TRL stays a benchmark-only dependency.
"""

from __future__ import annotations

import functools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from textgym.algos.batches import make_token_batch, micro_batch_log_probs
from textgym.algos.checkpoints import (
    check_disk_for_run,
    save_final_model,
    save_trainer_checkpoint,
)
from textgym.algos.common import (
    NonFiniteGuard,
    StopOnInterrupt,
    TrainingInterrupted,
    make_optimizer,
)
from textgym.algos.distributed import (
    SINGLE_PROCESS,
    DistributedContext,
    all_reduce_gradients,
    all_reduce_sum,
    any_rank,
    barrier,
    broadcast_parameters,
    init_distributed,
    rank_slice,
)
from textgym.algos.metric_plots import plot_metrics
from textgym.algos.metric_rows import HELDOUT_LOSS, read_metrics
from textgym.algos.metric_summaries import progress_line
from textgym.algos.metrics import MetricsLogger, rank_logger, write_run_record
from textgym.algos.model_loading import load_trainable_model
from textgym.algos.resume import check_epochs_left, load_checkpoint, run_to_continue
from textgym.algos.sft_config import SFTConfig
from textgym.algos.sft_data import (
    covering_conversations,
    read_conversations,
    tokenize_conversations,
)
from textgym.algos.sft_eval import (
    BestEpoch,
    evaluate_in_env,
    final_evaluation,
    heldout_loss,
    stops_early,
)
from textgym.results import write_json
from textgym.tokens import ChatTokenizer

__all__ = ["SFTRun", "sft_step", "train"]


@dataclass(kw_only=True)
class SFTRun:
    """The state of an SFT run that its steps read or change (the config is never changed)."""

    config: SFTConfig
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    device: torch.device
    pad_token_id: int
    total_steps: int  # epochs x optimizer steps per epoch
    tokenizer: Any = None  # saved with each checkpoint
    guard: NonFiniteGuard = field(default_factory=NonFiniteGuard)
    dist: DistributedContext = SINGLE_PROCESS  # this process's rank in a data-parallel run
    heldout: list[tuple[list[int], list[int]]] | None = None  # eval_data, tokenized
    heldout_losses: list[float] = field(default_factory=list)  # one per epoch ended
    best: BestEpoch = field(default_factory=BestEpoch)  # load_best_model_at_end


def train(config: SFTConfig) -> dict[str, Any]:
    """Fine-tune ``config.model`` on ``config.data``; save it to ``config.output_dir``.

    Returns:
        Summary: ``conversations``, ``dropped_too_long``, ``steps``, ``final_loss`` (mean NLL per
        assistant token over the last logged steps, nats: the mean of the per-step losses the
        progress lines showed), ``final_loss_steps`` (``[first, last]``, the steps it averages),
        ``elapsed_s``, and with ``eval_env`` ``eval``, the evaluation after the last step
        (``"<setting>/<metric>"`` as :func:`textgym.algos.grpo_rollouts.evaluate` returns, also
        a ``stage="eval"`` row of metrics.jsonl); on ranks other than 0 of a data-parallel run only ``steps`` and
        ``final_loss``.

    The model is written to a scratch directory and moved into ``output_dir`` when complete;
    ``sft_summary.json`` is written last and marks a finished run. Resumable checkpoints
    (``checkpoint-{step}``, the layout of :mod:`textgym.algos.checkpoints`) are saved every
    ``save_every`` steps, and on Ctrl-C: the step in progress finishes, is saved, and
    :class:`~textgym.algos.common.TrainingInterrupted` names the checkpoint (a second Ctrl-C
    stops at once). ``resume`` continues the newest checkpoint to the weights an uninterrupted
    run reaches (the shuffles are replayed from ``seed``).

    Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel
    (:mod:`textgym.algos.distributed`): each rank trains on its share of each step's
    conversations with the whole step's token normaliser and all-reduced gradients, and only
    rank 0 writes.

    Raises:
        ValueError: a malformed record
            (:func:`~textgym.algos.sft_data.read_conversations`, with its record number),
            no conversation that fits ``max_length``, an ``output_dir`` that already holds
            an SFT run (without ``resume``), a resume with another config, or one whose
            checkpoint is past the run's last step (fewer ``epochs``:
            :func:`~textgym.algos.resume.check_epochs_left`).
        CheckpointError: ``resume`` with no checkpoint in ``output_dir``, or one that does not
            load (damaged files, missing keys, NaN/inf or wrongly shaped weights).
        InsufficientDiskSpace: too little free disk for a checkpoint or the model (checked
            before the first step too: :func:`~textgym.algos.checkpoints.check_disk_for_run`).
        TrainingInterrupted: Ctrl-C; the last completed step was saved.
        FloatingPointError: optimizer steps keep having a non-finite loss or gradient norm.
    """
    torch.manual_seed(config.seed)  # the LoRA adapter's initial weights, as in GRPO
    ctx, out = init_distributed(config.device), Path(config.output_dir)
    if config.resume and (out / "sft_summary.json").exists():
        print(f"{out} already finished its SFT run; nothing to do")
        return json.loads((out / "sft_summary.json").read_text())
    checkpoint = run_to_continue(out, config, "sft_summary.json")
    barrier(ctx)  # every rank has checked before rank 0 writes anything
    conversations = read_conversations(config.data)
    read = len(conversations)
    if config.cover:
        conversations = covering_conversations(conversations)
    if ctx.is_main:
        write_run_record(out, config)
    run, sequences, dropped = _start_run(config, ctx, conversations)
    check_epochs_left(checkpoint, run.total_steps, config.epochs)
    start = _restore(run, checkpoint)
    if ctx.is_main:
        check_disk_for_run(run, final_model=not config.save_every)
    began = time.perf_counter()
    logger = rank_logger(out, config, ctx, resume=config.resume)
    with logger, StopOnInterrupt() as stop:
        if config.resume:  # rows after the checkpoint (all rows: resumed from scratch) go
            logger.truncate_after(start)
            run.heldout_losses = [
                row[HELDOUT_LOSS]
                for row in read_metrics(out / "metrics.jsonl")
                if HELDOUT_LOSS in row
            ]
            run.best = BestEpoch.of(run.heldout_losses)
        steps, final_loss, averaged = _epochs(run, sequences, logger, start=start, stop=stop)
        kept = _keep_best(run)
        if ctx.is_main and config.eval_env is not None:
            evaluation = final_evaluation(run, steps, stop, _save_checkpoint)
            logger.log(steps, evaluation, stage="eval")
    if not ctx.is_main:
        barrier(ctx)  # returns once rank 0 has written the model
        return {"steps": steps, "final_loss": final_loss}
    summary = {
        "conversations_read": read,
        "conversations": len(sequences),
        "dropped_too_long": dropped,
        "steps": steps,
        "final_loss": final_loss,
        "final_loss_steps": averaged,
    }
    if config.eval_env is not None:
        summary["eval"] = evaluation
    if config.eval_data is not None:
        summary["heldout_losses"] = run.heldout_losses
        summary["stopped_early"] = steps < run.total_steps
        summary["saved_epoch"] = kept
    return _finish_run(run, summary, began)


def _keep_best(run: SFTRun) -> int | None:
    """With held-out losses and ``load_best_model_at_end``, the best epoch's weights put back
    into the model (:class:`~textgym.algos.sft_eval.BestEpoch`); the epoch the saved model is
    (from 0), ``None`` without held-out data."""
    if run.heldout is None or not run.heldout_losses:
        return None
    last = len(run.heldout_losses) - 1
    if not run.config.load_best_model_at_end or run.best.epoch is None:
        return last
    note = run.best.restore(run, last, run.total_steps // run.config.epochs)
    if note is not None:
        print(f"textgym sft: {note}", file=sys.stderr)
        return last
    return run.best.epoch


def _start_run(
    config: SFTConfig, ctx: DistributedContext, conversations: list[list[dict[str, Any]]]
) -> tuple[SFTRun, list[tuple[list[int], list[int]]], int]:
    """The model (rank 0's weights on every rank), the tokenized conversations that fit and
    how many were dropped, the optimizer and its schedule, as one :class:`SFTRun`."""
    model, tokenizer, _ = load_trainable_model(config, ctx.device)
    broadcast_parameters(model, ctx)
    chat = ChatTokenizer(tokenizer)
    tokenize = functools.partial(
        tokenize_conversations, chat, max_length=config.max_length, progress=config.progress
    )
    sequences, dropped = tokenize(conversations, config.data)
    heldout = None
    if config.eval_data is not None:
        heldout, _ = tokenize(read_conversations(config.eval_data), config.eval_data)
    optimizer, scheduler = make_optimizer(model, config)
    run = SFTRun(
        config=config,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        device=ctx.device,
        pad_token_id=tokenizer.pad_token_id or 0,
        total_steps=config.epochs * -(-len(sequences) // config.batch_size),
        tokenizer=tokenizer,
        dist=ctx,
        heldout=heldout,
    )
    return run, sequences, dropped


def _restore(run: SFTRun, checkpoint: Path | None) -> int:
    """Load ``checkpoint`` (weights, optimizer, scheduler and RNG states) into the run; return
    its step (0 if there is none)."""
    if checkpoint is None:
        return 0
    state = load_checkpoint(
        checkpoint, model=run.model, optimizer=run.optimizer, scheduler=run.scheduler
    )
    return int(state["step"])


def _finish_run(run: SFTRun, summary: dict[str, Any], began: float) -> dict[str, Any]:
    """Rank 0 saves the model, plots the loss and writes ``sft_summary.json`` (``summary`` and
    ``elapsed_s``, the run's seconds since ``began``) last; every rank waits for it."""
    out = Path(run.config.output_dir)
    save_final_model(run.model, run.tokenizer, run.config)
    if read_metrics(out / "metrics.jsonl"):  # none when a resume had no step left to log
        plot_metrics(out / "metrics.jsonl", out / "plots")  # loss.png
    summary["elapsed_s"] = time.perf_counter() - began
    write_json(out / "sft_summary.json", summary)  # in one step: never half a summary
    barrier(run.dist)
    return summary


def _epochs(
    run: SFTRun,
    sequences: list[tuple[list[int], list[int]]],
    logger: MetricsLogger,
    *,
    start: int = 0,
    stop: StopOnInterrupt | None = None,
) -> tuple[int, float, list[int] | None]:
    """Train ``config.epochs`` shuffled passes from optimizer step ``start`` (the steps before
    it are skipped, their shuffles replayed); return the steps taken, the last logged loss
    (mean NLL per assistant token over the last ``log_every`` steps, nats; NaN when none was
    logged) and ``[first, last]``, the steps it averages (``None`` when none). Each step prints
    a progress line; one that logs adds the mean it logs, with its steps. Checkpoints every
    ``save_every`` steps; on a Ctrl-C (``stop``), after the step in progress.

    Raises:
        TrainingInterrupted: after saving the last completed step, when ``stop`` was requested.
    """
    config = run.config
    order = random.Random(config.seed)
    losses, step = _LossLog(began=time.perf_counter()), 0
    for epoch in range(config.epochs):
        indices = list(range(len(sequences)))
        order.shuffle(indices)
        for start_index in range(0, len(indices), config.batch_size):
            step += 1
            if step <= start:  # done before the resumed checkpoint
                continue
            step_began = time.perf_counter()
            batch = [sequences[i] for i in indices[start_index : start_index + config.batch_size]]
            loss, tokens = sft_step(run, batch[rank_slice(len(batch), run.dist)])
            run.scheduler.step()
            _log_step(
                run,
                logger,
                losses,
                step=step,
                epoch=epoch,
                loss=loss,
                tokens=tokens,
                step_began=step_began,
                epoch_end=start_index + config.batch_size >= len(indices),
            )
            stopping = stop is not None and any_rank([stop.requested], run.dist)[0]
            if (
                not stopping
                and config.eval_env is not None
                and config.eval_every
                and step % config.eval_every == 0
                and step < run.total_steps  # the last step's evaluation follows the loop
                and run.dist.is_main
            ):
                logger.log(step, evaluate_in_env(run, step), stage="eval")
            if stopping or (config.save_every and step % config.save_every == 0):
                checkpoint = _save_checkpoint(run, step)
                if stopping:
                    raise TrainingInterrupted(step, checkpoint)
        if step >= start and _epoch_ends_training(run, logger, step, epoch):
            break
    return step, losses.final_loss, losses.averaged


def _epoch_ends_training(run: SFTRun, logger: MetricsLogger, step: int, epoch: int) -> bool:
    """At the end of ``epoch`` (its last ``step``), the held-out loss of ``eval_data``, logged
    (not again for an epoch a resumed run had already measured); return whether early stopping
    ends the training here."""
    if run.heldout is None:
        return False
    if len(run.heldout_losses) <= epoch:
        loss = heldout_loss(run, run.heldout)
        run.heldout_losses.append(loss)
        logger.log(step, {HELDOUT_LOSS: loss, "epoch": epoch}, stage="eval")
        if run.config.load_best_model_at_end:
            run.best.offer(run.model, epoch, loss)
    return stops_early(run.heldout_losses[: epoch + 1], run.config.early_stopping_patience)


@dataclass
class _LossLog:
    """The losses of the steps since the last logged one, and what the last log averaged."""

    began: float  # time.perf_counter() when training began (elapsed_s)
    window: list[float] = field(default_factory=list)
    final_loss: float = float("nan")
    averaged: list[int] | None = None  # [first, last] steps of final_loss


def _log_step(
    run: SFTRun,
    logger: MetricsLogger,
    losses: _LossLog,
    *,
    step: int,
    epoch: int,
    loss: float,
    tokens: float,
    step_began: float,
    epoch_end: bool = False,
) -> None:
    """The step's progress line (rank 0, ``progress``); every ``log_every`` steps, at the last
    and, with held-out data, at each epoch's end, the mean loss of the window written to the
    log."""
    config, window = run.config, losses.window
    window.append(loss)
    logs = (
        step % config.log_every == 0
        or step == run.total_steps
        or (epoch_end and run.heldout is not None)
    )
    if config.progress and run.dist.is_main:
        seconds = time.perf_counter() - step_began
        mean = (
            f"mean of steps {step - len(window) + 1}-{step}: {sum(window) / len(window):.4g}"
            if logs and len(window) > 1
            else None
        )
        line = progress_line(
            step, run.total_steps, loss=loss, seconds=seconds, tokens=tokens, note=mean
        )
        print(line, file=sys.stderr, flush=True)
    if logs:
        logger.log(
            step,
            {
                "loss": sum(window) / len(window),
                "epoch": epoch,
                "tokens": tokens,
                "lr": run.scheduler.get_last_lr()[0],
                "elapsed_s": time.perf_counter() - losses.began,
                "nonfinite_skipped": run.guard.skipped,
            },
        )
        losses.final_loss, losses.averaged = (
            sum(window) / len(window),
            [step - len(window) + 1, step],
        )
        losses.window = []


def _save_checkpoint(run: SFTRun, step: int) -> Path:
    """Save ``output_dir/checkpoint-{step}`` (rank 0 writes; every rank returns its path).

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
    """
    config = run.config
    if run.dist.is_main:
        save_trainer_checkpoint(run, step)
    barrier(run.dist)
    return Path(config.output_dir) / f"checkpoint-{step}"


def sft_step(run: SFTRun, batch: list[tuple[list[int], list[int]]]) -> tuple[float, float]:
    """One optimizer step on ``batch``; returns (mean NLL per assistant token, token count).

    With more than one rank, ``batch`` is this rank's share (maybe empty) and the normaliser,
    the gradients and the returned numbers are the whole step's (summed over the ranks).
    """
    config, ctx = run.config, run.dist
    tokens = None
    if batch:
        tokens = make_token_batch(
            [ids for ids, _ in batch], [mask for _, mask in batch], pad_token_id=run.pad_token_id
        )
    if not ctx.distributed:
        normalizer = max(float(tokens.loss_mask.sum()), 1.0)  # the whole batch: exact accumulation
    else:
        local = 0.0 if tokens is None else float(tokens.loss_mask.sum())
        normalizer = max(all_reduce_sum([local], ctx)[0], 1.0)  # the whole step's, every rank
    run.optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for micro, logp in micro_batch_log_probs(run.model, tokens, config, run.device):
        loss = -(logp * micro.loss_mask).sum() / normalizer
        loss.backward()
        total += float(loss.detach())
    params = [p for p in run.model.parameters() if p.requires_grad]
    if ctx.distributed:
        all_reduce_gradients(params, ctx)
        total = all_reduce_sum([total], ctx)[0]
    run.guard.step(run.optimizer, params, total, config.max_grad_norm)
    return total, normalizer
