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

import json
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from textgym.algos.batches import make_token_batch, micro_batch_log_probs
from textgym.algos.checkpoints import (
    check_checkpoint_settings,
    check_disk_for_run,
    check_free_disk,
    model_bytes,
    save_model,
    save_trainer_checkpoint,
    tokenizer_bytes,
    with_margin,
)
from textgym.algos.common import (
    NonFiniteGuard,
    OptimizationConfig,
    StopOnInterrupt,
    TrainingInterrupted,
    check_positive_ints,
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
from textgym.algos.model_loading import load_trainable_model, saved_base
from textgym.algos.resume import check_epochs_left, load_checkpoint, run_to_continue
from textgym.algos.sft_data import (
    conversation_tokens,
    covering_conversations,
    read_conversations,
)
from textgym.algos.sft_eval import (
    BestEpoch,
    check_eval_env,
    evaluate_in_env,
    final_evaluation,
    heldout_loss,
    stops_early,
)
from textgym.checks import check_seed
from textgym.errors import SetupError
from textgym.progress import EpisodeProgress
from textgym.results import saving_into, write_json
from textgym.tokens import ChatTokenizer

__all__ = ["SFTConfig", "SFTRun", "sft_step", "train"]


@dataclass(kw_only=True)
class SFTConfig(OptimizationConfig):
    """Arguments of textgym sft; every field is an option of the command."""

    data: str
    """JSONL file of chat records, each with a messages list (what textgym collect writes)."""
    model: str = "gemma-3-270m"
    """Model to fine-tune: gemma-3-270m, tiny (a small random model for tests), a local
    directory or a Hugging Face model id."""
    output_dir: str = "runs/sft"
    """Directory for the fine-tuned model (full weights, or with lora-rank above 0 only the
    LoRA adapter, which textgym loads on top of its base), metrics.jsonl and plots."""
    epochs: int = 1
    """Passes over the data."""
    batch_size: int = 16
    """Conversations per optimizer step."""
    learning_rate: float = 1e-4
    """AdamW learning rate (per optimizer step)."""
    max_length: int = 4096
    """Longest token sequence; longer conversations are dropped (and counted), never cut."""
    cover: bool = False
    """Train on a covering subset of the data: the fewest records, by greedy set cover, in
    which every prompt of the file still appears (textgym.collect.covering_records), e.g.
    expert games against mostly random opponents, whose common openings repeat."""
    seed: int = 0
    """Seed of the shuffling of the conversations; an integer in [0, 2**32 - 1], as for every
    command."""
    log_every: int = 10
    """Write metrics.jsonl every this many optimizer steps (the loss is averaged over them)."""
    save_every: int = 0
    """Also save a resumable checkpoint (output_dir/checkpoint-N) every this many optimizer
    steps (0: only on Ctrl-C or SIGTERM); the finished model is saved in output_dir itself."""
    save_total_limit: int | None = 2
    """Most checkpoint-* folders kept in output_dir (TRL's save_total_limit): the oldest are
    deleted once a new one is complete, and only the newest keeps the optimizer state. None
    keeps all."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (refused when it holds none)."""
    eval_env: str | None = None
    """Env id to evaluate the fine-tuned model in, greedily, after training (and every
    eval_every steps), as textgym train evaluates: each of the env's evaluation settings
    (tic-tac-toe: the random and the optimal opponent), eval_episodes each, no wrappers. None:
    no evaluation."""
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of eval_env (JSON on the command line)."""
    eval_episodes: int = 100
    """Episodes per evaluation setting."""
    eval_every: int = 0
    """Also evaluate every this many optimizer steps (0: only after the last)."""
    eval_max_new_tokens: int = 256
    """Most tokens the model generates per turn in an evaluation."""
    eval_data: str | None = None
    """JSONL of held-out chat records (the format of data), none of them trained on: their
    mean NLL per assistant token, the training loss's definition, is computed after each epoch
    (a stage="eval" row with heldout/loss, drawn on loss.png). None: no held-out loss."""
    early_stopping_patience: int = 0
    """With eval_data: stop after this many epochs in a row whose held-out loss is not below
    the best before them (transformers' EarlyStoppingCallback rule). 0: train every epoch."""
    load_best_model_at_end: bool = True
    """With eval_data: the model saved is the epoch with the lowest held-out loss
    (transformers' option of this name, on eval_loss); False: the last epoch's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed("seed", self.seed)
        check_positive_ints(
            self, ("epochs", "batch_size", "max_length", "log_every", "eval_episodes")
        )
        check_positive_ints(self, ("eval_max_new_tokens",))
        if self.eval_every < 0:
            raise SetupError(
                f"eval_every: expected >= 0 (0: only at the end), got {self.eval_every}"
            )
        if self.eval_env is not None:
            check_eval_env(self.eval_env, self.eval_env_kwargs)
        check_checkpoint_settings(self)
        for key in ("data", "eval_data"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise SetupError(
                    f"{key}: expected a JSONL file, got {path!r} (not found); make one with "
                    "`textgym collect`"
                )
        patience = self.early_stopping_patience
        if patience < 0 or (patience and self.eval_data is None):
            why = "" if patience < 0 else " without eval_data"
            raise SetupError(
                "early_stopping_patience: expected 0, or >= 1 with eval_data (the held-out "
                f"loss it watches), got {patience}{why}"
            )


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
    sequences, dropped = _tokenize(config, chat, conversations, config.data)
    heldout = None
    if config.eval_data is not None:
        heldout, _ = _tokenize(config, chat, read_conversations(config.eval_data), config.eval_data)
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
    _save_final(run.model, run.tokenizer, run.config)
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


def _save_final(model: Any, tokenizer: Any, config: SFTConfig) -> None:
    """Save the model into ``output_dir`` through a scratch directory, so a run killed while
    saving never leaves a model that looks complete.

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written.
        OutputWriteError: a file could not be written all the same (a full disk): one line;
            the scratch directory is removed.
    """
    out = Path(config.output_dir)
    scratch = out / ".model.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    needed = with_margin(model_bytes(model) + tokenizer_bytes(tokenizer))
    check_free_disk(out, needed, what="the model", keeps="the checkpoints in it are intact")
    with saving_into(scratch, out, "the checkpoints in it are intact"):
        save_model(model, tokenizer, scratch, base=saved_base(config), final_dir=out)
    for item in scratch.iterdir():
        item.replace(out / item.name)
    scratch.rmdir()


def _tokenize(
    config: SFTConfig,
    chat: ChatTokenizer,
    conversations: list[list[dict[str, Any]]],
    source: str,
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Tokenized ``(ids, mask)`` of every conversation (read from the file ``source``), and how
    many were too long to keep (progress shown as for played episodes when it takes over a
    second: ``progress``).

    Raises:
        SetupError: no conversation fits ``max_length``.
    """
    sequences, dropped = [], 0
    with EpisodeProgress(
        f"sft: tokenizing {source}", len(conversations), enabled=config.progress
    ) as progress:
        for messages in conversations:
            ids, mask = conversation_tokens(chat, messages)
            progress.episode_done()
            if len(ids) > config.max_length:
                dropped += 1
                continue
            sequences.append((ids, mask))
    if not sequences:
        raise SetupError(
            f"No conversation of {source} fits max_length={config.max_length} ({dropped} dropped)"
        )
    return sequences, dropped


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
