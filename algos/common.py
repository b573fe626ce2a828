"""Pieces shared by the SFT and GRPO trainers: devices, models, batches, log-probs, checkpoints.

Both trainers score token sequences with the same chunked log-prob function
(:func:`textgym.algos.losses.selected_log_probs`), so the warm-up and the RL stage see identical
numerics, and both save checkpoints in the same layout, so ``textgym train --model`` can start
from a ``textgym sft`` output directory:

``checkpoint-{step}/`` holds the model (``save_pretrained``: full weights and the model's own
``config.json``, or with LoRA the adapter), the tokenizer, ``trainer_state.pt`` (RNG states,
step, extra trainer state), ``optimizer.pt`` (optimizer and scheduler state; only in the newest
checkpoint) and ``trainer_config.json`` (the trainer's arguments, which :func:`check_resumable`
compares on resume). The ``.pt`` files hold tensors and plain data only and are loaded with
``torch.load(..., weights_only=True)``. Saves are atomic and bounded (:func:`save_checkpoint`:
a free-disk check, a temporary folder renamed when complete, then ``save_total_limit``), and a
checkpoint is read and checked (keys, whole files, finite weights) before a resumed run takes
any step; every problem is a :class:`CheckpointError` naming the file and the fix.

Both trainers also load and prepare the model they train through one function
(:func:`load_trainable_model`: load, optional reference copy, gradient checkpointing, LoRA), so
an option such as ``lora_alpha`` means the same in ``textgym sft`` and ``textgym train``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from textgym.algos.losses import selected_log_probs

__all__ = [
    "CheckpointError",
    "InsufficientDiskSpace",
    "NonFiniteGuard",
    "OptimizationConfig",
    "StopOnInterrupt",
    "TokenBatch",
    "TrainingInterrupted",
    "check_checkpoint_settings",
    "check_finite_floats",
    "check_free_disk",
    "check_positive_ints",
    "check_resumable",
    "check_weight_files",
    "checkpoint_bytes",
    "checkpoint_to_resume",
    "model_bytes",
    "prune_checkpoints",
    "read_trainer_state",
    "check_finite_parameters",
    "clip_gradients",
    "load_trainable_model",
    "make_optimizer",
    "shared_prefix_hidden",
    "shared_prefix_length",
    "autocast",
    "latest_checkpoint",
    "load_checkpoint",
    "make_token_batch",
    "prepare_model",
    "resolve_device",
    "rng_state",
    "save_checkpoint",
    "save_model",
    "sequence_log_probs",
    "set_rng_state",
]

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


@dataclass(kw_only=True)
class OptimizationConfig:
    """Arguments both trainers share: optimizer, memory, device and reporting settings."""

    learning_rate: float = 1e-5
    """AdamW learning rate (per optimizer step)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay (0 turns it off)."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up, in optimizer steps (0: the full rate from the start)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global L2 norm (0 turns it off)."""
    micro_batch_size: int = 16
    """Sequences per forward/backward pass; gradients are accumulated over the micro-batches of
    a step, and the update does not depend on this number (only memory and speed do)."""
    logprob_chunk_size: int = 1024
    """Token positions per LM-head chunk when computing log-probs (memory: chunk x vocabulary x
    4 bytes)."""
    device: str = "auto"
    """Where to train: auto (CUDA if available, else the CPU), cpu, or cuda / cuda:i."""
    bf16: bool = True
    """bf16 autocast for training forward passes on CUDA (see cpu-bf16 for the CPU)."""
    cpu_bf16: bool = False
    """bf16 autocast on CPUs that compute bf16 natively (AMX or AVX512-BF16; ignored elsewhere).
    Off by default so CPU runs stay float32. On a 2-core AMX Xeon, one Gemma-3-270M step of 8
    sequences x 150 tokens took 6.5 s instead of 9 s (full fine-tuning) and 3.5 s instead of
    5.1 s (LoRA rank 16); master weights, gradients and optimizer state stay float32."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in the backward pass (less memory, about 30% more time)."""
    lora_rank: int = 0
    """0: full fine-tuning; above 0: LoRA adapters of this rank on every linear layer (peft),
    the base weights frozen."""
    lora_alpha: int = 16
    """LoRA scaling numerator: the adapter's output is scaled by lora_alpha / lora_rank."""
    tensorboard: bool = True
    """Also write TensorBoard scalars (under output_dir/tensorboard)."""
    report_to: tuple[Literal["tensorboard", "wandb", "trackio", "none"], ...] = ()
    """Also send every metric to these experiment trackers, each through its own library, as
    TRL's report_to (space-separated): wandb (WANDB_MODE=offline logs without an account), trackio
    (local); tensorboard is --tensorboard; none or nothing: only metrics.jsonl and TensorBoard.
    Needs pip install "textgym[wandb]" or "textgym[trackio]"."""
    progress: bool = True
    """Print one line per optimizer step to stderr while training: step, loss, reward (GRPO),
    step time in seconds and tokens per second."""

    def __post_init__(self) -> None:
        check_finite_floats(self)
        check_positive_ints(self, ("micro_batch_size", "logprob_chunk_size"))
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate: expected > 0, got {self.learning_rate}")
        for name in ("weight_decay", "max_grad_norm", "warmup_steps", "lora_rank"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if self.lora_rank > 0 and self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha: expected > 0 with LoRA, got {self.lora_alpha}")


def check_finite_floats(config: Any) -> None:
    """Raise ValueError naming the first float field of a config dataclass that is NaN or inf.

    Checked before any range check: NaN fails no ``x < 0`` test (a NaN ``max_grad_norm`` or
    clipping epsilon would silently turn clipping off) and an infinite learning rate passes
    ``> 0``. Floats inside tuples and lists (``opponent_random_move_prob``) are checked too.

    Raises:
        ValueError: ``"{field}: expected a finite number, got {value!r}"``.
    """
    for field in fields(config):
        value = getattr(config, field.name, None)  # init=False fields may not be set yet
        values = value if isinstance(value, (tuple, list)) else (value,)
        for item in values:
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"{field.name}: expected a finite number, got {value!r}")


def check_positive_ints(config: Any, names: Sequence[str]) -> None:
    """Raise ValueError naming the first of ``config``'s fields ``names`` that is not an int >= 1.

    Raises:
        ValueError: ``"{field}: expected an int >= 1, got {value!r}"``.
    """
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def make_optimizer(model: Any, config: OptimizationConfig) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the trainable parameters and a linear warm-up schedule (then constant)."""
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused CUDA kernel updates every parameter in a few launches instead of a chain of
    # foreach kernels per step; the maths is AdamW's either way.
    fused = bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)
    optimizer = torch.optim.AdamW(
        params, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused or None
    )
    warmup = config.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    return optimizer, scheduler


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; anything else as ``torch.device``.

    Raises:
        ValueError: CUDA was asked for and is not available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"Expected a CUDA device for device={device!r}, but CUDA is not available; use device='cpu'"
        )
    return resolved


class NonFiniteGuard:
    """Steps the optimizer only when the loss and the gradient norm are finite.

    One batch whose loss or gradients overflow costs one skipped update (gradients dropped)
    instead of weights that are NaN from then on; ``limit`` skipped steps in a row stop the run
    with :class:`FloatingPointError` before anything non-finite can be saved.

    Attributes:
        skipped: Steps skipped so far.
    """

    def __init__(self, limit: int = 3):
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"Expected limit to be an int >= 1, got {limit!r}")
        self.limit = limit
        self.skipped = 0
        self._in_a_row = 0

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        params: Sequence[torch.Tensor],
        loss: float,
        max_grad_norm: float,
        *,
        grad_norm: float | None = None,
    ) -> tuple[float, bool]:
        """Clip gradients to ``max_grad_norm`` (0: no clipping) and step if all is finite.

        Args:
            optimizer: Stepped when ``loss`` and the gradient norm are finite.
            params: The trainable parameters (their ``.grad`` is clipped).
            loss: The step's loss (host float).
            max_grad_norm: Clipping threshold; 0 turns clipping off.
            grad_norm: The norm when the caller already clipped with :func:`clip_gradients`
                (it reads the norm with its other sums in one host sync); ``None`` clips here.

        Returns:
            ``(grad_norm, stepped)``: the norm before clipping, and whether the step was taken.

        Raises:
            FloatingPointError: the ``limit``-th non-finite step in a row.
        """
        norm = grad_norm
        if norm is None:
            norm = float(clip_gradients(params, max_grad_norm))
        if math.isfinite(loss) and math.isfinite(norm):
            optimizer.step()
            self._in_a_row = 0
            return norm, True
        optimizer.zero_grad(set_to_none=True)
        self.skipped += 1
        self._in_a_row += 1
        if self._in_a_row >= self.limit:
            raise FloatingPointError(
                f"{self._in_a_row} optimizer steps in a row had a non-finite loss ({loss}) or "
                f"gradient norm ({norm}); stopped with the weights of the last finite step (no "
                "checkpoint was written). Lower the learning rate or check the rewards and data."
            )
        return norm, False


def clip_gradients(params: Sequence[torch.Tensor], max_grad_norm: float) -> torch.Tensor:
    """Clip the gradients' global L2 norm to ``max_grad_norm`` (0: no clipping), on the device.

    Returns:
        The norm before clipping, a 0-dim float32 tensor on the gradients' device (reading it is
        the caller's host sync).
    """
    return torch.nn.utils.clip_grad_norm_(
        params, max_grad_norm if max_grad_norm > 0 else float("inf")
    )


def check_finite_parameters(model: Any) -> None:
    """Raise :class:`FloatingPointError` naming the first NaN/inf parameter of ``model``."""
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise FloatingPointError(
                f"Parameter {name} holds NaN or inf values; refusing to save non-finite weights"
            )


def autocast(device: torch.device, bf16: bool, *, cpu_bf16: bool = False) -> Any:
    """bf16 autocast on CUDA when ``bf16``, on a CPU with native bf16 when ``cpu_bf16``; else a
    no-op context (float32)."""
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if cpu_bf16 and device.type == "cpu":
        from textgym.models import cpu_has_fast_bf16

        if cpu_has_fast_bf16():
            return torch.autocast("cpu", dtype=torch.bfloat16)
    return nullcontext()


def prepare_model(
    model: Any,
    *,
    gradient_checkpointing: bool = False,
    lora_rank: int = 0,
    lora_alpha: int = 16,
    lora_dropout: float = 0.0,
) -> Any:
    """Make a loaded causal LM trainable: optional gradient checkpointing and LoRA (``peft``).

    Args:
        model: A ``transformers`` causal LM.
        gradient_checkpointing: Recompute decoder activations in the backward pass.
        lora_rank: 0 trains every weight; > 0 wraps the model with LoRA adapters of this rank
            on all linear projections (Hu et al., 2021), the base weights frozen.
        lora_alpha: LoRA scaling numerator (scale = alpha / rank).
        lora_dropout: Dropout on the LoRA input.

    Returns:
        The model to train (a ``peft`` model when ``lora_rank > 0``), in train mode.

    Raises:
        ImportError: ``lora_rank > 0`` without ``peft`` installed.
    """
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(f"LoRA needs peft ({error}); pip install peft") from error
        config = LoraConfig(
            r=lora_rank,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, config)
        if gradient_checkpointing:
            model.enable_input_require_grads()
    model.train()
    return model


def load_trainable_model(
    config: Any, device: torch.device, *, reference: bool = False
) -> tuple[Any, Any, Any | None]:
    """Load ``config.model`` and make it trainable as the config says; the one way both trainers
    get the model they train.

    Loads with :func:`textgym.models.load_model` (float32 weights; bf16 is autocast at run
    time, see ``bf16`` and ``cpu_bf16``), optionally keeps a frozen copy as the reference
    policy, then applies :func:`prepare_model` with the config's ``gradient_checkpointing``,
    ``lora_rank`` and ``lora_alpha``.

    Args:
        config: A trainer config: an :class:`OptimizationConfig` with a ``model`` field.
        device: Where the model goes.
        reference: Also return a frozen copy of the loaded weights for a KL penalty. With LoRA
            none is made (``None``): the base model with its adapter disabled is the reference.

    Returns:
        ``(model, tokenizer, reference)``: the model in train mode (a ``peft`` model when
        ``lora_rank > 0``), its tokenizer, and the reference model in eval mode or ``None``.

    Raises:
        ValueError, OSError: from :func:`~textgym.models.load_model` (unknown model, no files).
        ImportError: LoRA without ``peft``.
    """
    from textgym.models import load_model

    model, tokenizer = load_model(config.model, device=device)
    frozen = copy.deepcopy(model).eval() if reference and config.lora_rank == 0 else None
    model = prepare_model(
        model,
        gradient_checkpointing=config.gradient_checkpointing,
        lora_rank=config.lora_rank,
        lora_alpha=config.lora_alpha,
    )
    return model, tokenizer, frozen


class TokenBatch:
    """Right-padded next-token batch built from token sequences.

    Attributes:
        input_ids: ``[B, L-1]`` long, tokens ``0..L-2`` of each sequence (L = longest).
        attention_mask: ``[B, L-1]`` long, 1 on real tokens.
        targets: ``[B, L-1]`` long, tokens ``1..L-1``: what each position predicts.
        loss_mask: ``[B, L-1]`` float32, 1 where the target carries loss.
        sampler_logprobs: ``[B, L-1]`` float32, the rollout's log-probs of the targets (0 where
            unknown).
    """

    def __init__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        targets: torch.Tensor,
        loss_mask: torch.Tensor,
        sampler_logprobs: torch.Tensor,
    ) -> None:
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.targets = targets
        self.loss_mask = loss_mask
        self.sampler_logprobs = sampler_logprobs

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: torch.Tensor | Sequence[int] | slice) -> TokenBatch:
        """The sub-batch of ``rows``, trimmed of columns that are padding in all of them."""
        parts = [t[rows] for t in self._tensors()]
        width = int(parts[1].sum(dim=1).max().item()) if parts[1].numel() else 0
        return TokenBatch(*(t[:, :width] for t in parts))

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in self._tensors()))

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.input_ids,
            self.attention_mask,
            self.targets,
            self.loss_mask,
            self.sampler_logprobs,
        )


def make_token_batch(
    sequences: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None = None,
    *,
    pad_token_id: int = 0,
) -> TokenBatch:
    """Right-pad token sequences into a next-token batch.

    Args:
        sequences: ``B`` sequences of token ids ``[L_i]``, each of length >= 2.
        loss_masks: ``B`` masks ``[L_i]`` (1 on tokens that carry loss).
        logprobs: Optional ``B`` lists ``[L_i]`` of sampling log-probs.
        pad_token_id: Id written in padding (never attended to, never scored).

    Raises:
        ValueError: lengths disagree or a sequence is shorter than 2 tokens.
    """
    if len(sequences) != len(loss_masks) or (
        logprobs is not None and len(logprobs) != len(sequences)
    ):
        raise ValueError("Expected one loss mask (and one log-prob list) per sequence")
    for i, (ids, mask) in enumerate(zip(sequences, loss_masks)):
        if (
            len(ids) < 2
            or len(mask) != len(ids)
            or (logprobs is not None and len(logprobs[i]) != len(ids))
        ):
            raise ValueError(
                f"Sequence {i}: expected >= 2 tokens and a mask (and log-probs) of the same "
                f"length, got {len(ids)} tokens, {len(mask)} mask entries"
            )
    width = max(len(ids) for ids in sequences) - 1
    batch = len(sequences)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)  # [B, L-1]
    targets = torch.full((batch, width), pad_token_id, dtype=torch.long)  # [B, L-1]
    attention = torch.zeros((batch, width), dtype=torch.long)  # [B, L-1]
    loss_mask = torch.zeros((batch, width), dtype=torch.float32)  # [B, L-1]
    sampled = torch.zeros((batch, width), dtype=torch.float32)  # [B, L-1]
    for i, ids in enumerate(sequences):
        n = len(ids) - 1
        row = torch.as_tensor(list(ids), dtype=torch.long)
        input_ids[i, :n], targets[i, :n] = row[:-1], row[1:]
        attention[i, :n] = 1
        loss_mask[i, :n] = torch.as_tensor(list(loss_masks[i][1:]), dtype=torch.float32)
        if logprobs is not None:
            sampled[i, :n] = torch.as_tensor(list(logprobs[i][1:]), dtype=torch.float32)
    return TokenBatch(input_ids, attention, targets, loss_mask, sampled)


def _decoder_and_head(model: Any) -> tuple[Any, Any]:
    """The decoder stack and the LM head of a causal LM (through a ``peft`` wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def sequence_log_probs(
    model: Any,
    batch: TokenBatch,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    share_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the loss tokens under ``model``, without full-vocabulary logits.

    Runs the decoder once, then the LM head only at positions whose target carries loss
    (``batch.loss_mask > 0``), chunk by chunk (:func:`~textgym.algos.losses.selected_log_probs`):
    at most ``chunk_size * V`` float32 logits exist at a time, in the forward and the backward
    pass, and prompt, observation and padding positions cost no LM-head work (for Gemma's
    262,144-entry vocabulary the head dominates the step otherwise).

    Args:
        model: A causal LM (or a ``peft`` wrapper of one).
        batch: The token batch (on the model's device).
        temperature: Logits are divided by it, as when sampling (> 0).
        chunk_size: Positions per LM-head chunk.
        with_entropy: Also return the per-position entropy (detached).
        share_prefix: Run the prompt that rows share once (:func:`shared_prefix_hidden`): the
            same numbers up to float rounding, fewer FLOPs when rows come in GRPO groups.

    Returns:
        ``(logp, entropy)``: ``[B, L-1]`` float32 each, 0.0 where ``loss_mask`` is 0 (entropy
        ``None`` unless asked for).
    """
    decoder, head = _decoder_and_head(model)
    shared = shared_prefix_hidden(decoder, batch) if share_prefix else None
    if shared is None:
        hidden = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state  # [B, L-1, H]
        start = 0
    else:
        hidden, start = shared  # [B, L-1-start, H]: no loss position lies before start
    scored = batch.loss_mask > 0  # [B, L-1] bool
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    picked, entropy = selected_log_probs(
        hidden[scored[:, start:]][None],  # [1, N, H], N = loss positions
        head,
        batch.targets[scored][None],  # [1, N]
        temperature=temperature,
        chunk_size=chunk_size,
        softcap=softcap,
        with_entropy=with_entropy,
    )
    logp = torch.zeros(scored.shape, dtype=torch.float32, device=hidden.device)  # [B, L-1]
    logp = logp.masked_scatter(scored, picked[0])
    if entropy is not None:
        entropy = torch.zeros_like(logp).masked_scatter(scored, entropy[0])  # [B, L-1]
    return logp, entropy


def shared_prefix_length(batch: TokenBatch) -> int:
    """Columns before the first loss target of any row: ``min_b`` of row b's first scored column.

    Every row is all real tokens there (right padding), and no position there is scored, so a
    prefix of this length can be run without its logits. Rows with no loss token count with
    their length.

    Returns:
        The number of columns ``P`` (``0 <= P <= L-1``; 0 for an empty batch).
    """
    scored = batch.loss_mask > 0  # [B, L-1] bool
    lengths = batch.attention_mask.sum(dim=1)  # [B] long
    first = torch.where(scored.any(dim=1), scored.int().argmax(dim=1), lengths)  # [B] long
    return int(first.min().item()) if len(batch) else 0


def shared_prefix_hidden(decoder: Any, batch: TokenBatch) -> tuple[torch.Tensor, int] | None:
    """Decoder hidden states with each distinct prompt prefix run once (prefix sharing).

    The G rollouts of a GRPO group start with the same prompt (often most of the tokens), and
    a plain forward pass runs it G times. Here the first :func:`shared_prefix_length` columns
    are deduplicated across rows, run once per distinct prefix with a KV cache, the cache is
    gathered back to every row (an index into the autograd graph, so gradients through the
    prompt's keys and values are summed over the rows that share it), and the rest of each row
    attends to it. The idea is that of Prefix Grouper (Liu et al., 2025, arXiv:2506.05433);
    written here on the ``transformers`` cache API because no library offers it for training.

    Args:
        decoder: The decoder stack of a causal LM (``model.get_decoder()``).
        batch: The right-padded token batch.

    Returns:
        ``(hidden, P)``: the hidden states ``[B, L-1-P, H]`` of columns ``P..L-2`` (the prefix
        columns carry no loss, so they are not returned) and ``P``; or ``None`` when nothing
        would be saved (no row shares its prefix, an empty prefix) or the decoder fills no cache
        (gradient checkpointing); then run the plain pass.
    """
    if decoder.training and any(
        getattr(m, "gradient_checkpointing", False) for m in decoder.modules()
    ):
        return None  # checkpointed layers do not fill a cache (transformers drops use_cache)
    prefix = shared_prefix_length(batch)
    if prefix < 1 or prefix >= batch.input_ids.shape[1]:
        return None
    unique, rows = torch.unique(batch.input_ids[:, :prefix], dim=0, return_inverse=True)
    if unique.shape[0] == len(batch):  # [U, P] long; rows: [B] long, index into unique
        return None
    cache = decoder(input_ids=unique, use_cache=True).past_key_values  # keys [U, h, P, d]
    if cache is None or cache.get_seq_length() != prefix:
        return None
    cache.batch_select_indices(rows)  # keys [B, h, P, d], still in the graph
    suffix = decoder(
        input_ids=batch.input_ids[:, prefix:],  # [B, L-1-P]
        attention_mask=batch.attention_mask,  # [B, L-1]: prefix columns are all real tokens
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # [B, L-1-P, H]
    return suffix, prefix


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) global RNG states, as tensors and plain data only (so a
    checkpoint loads with ``torch.load(..., weights_only=True)``)."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["kind"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointError(ValueError):
    """A checkpoint or model directory that cannot be resumed from or loaded: damaged or
    incomplete files, weights of another shape, NaN/inf weights, pickled objects, or nothing to
    resume. The message names the file and the fix; the CLI prints it as one line."""


class InsufficientDiskSpace(OSError):
    """Too little free disk for the next save; nothing of it was written, and the checkpoints
    already on disk are intact."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a training run after its last completed step was saved.

    Attributes:
        step: The last completed (and saved) step.
        checkpoint: Where it was saved (``output_dir/checkpoint-{step}``).
    """

    def __init__(self, step: int, checkpoint: Path):
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(
            f"interrupted after step {step}; saved {checkpoint} (continue with --resume)"
        )


class StopOnInterrupt:
    """Ctrl-C (SIGINT) handling of a training loop, as a context manager.

    The first Ctrl-C asks the loop to stop (:attr:`requested`): the loop finishes the step in
    progress, saves it and raises :class:`TrainingInterrupted`. Inside :meth:`abandonable`
    blocks (an evaluation, which changes no training state) it raises ``KeyboardInterrupt`` at
    once instead, and so does a second Ctrl-C anywhere: a user who cannot wait loses at most
    the step in progress (the last checkpoint on disk is intact: saves are atomic). Outside the
    main thread, where no signal handler can be set, it does nothing.

    Attributes:
        requested: A Ctrl-C arrived.
    """

    _UNSET = object()

    def __init__(self) -> None:
        self.requested = False
        self._abandon = False
        self._previous: Any = self._UNSET

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not self._UNSET:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = self._UNSET

    def _handle(self, signum: int, frame: Any) -> None:
        first, self.requested = not self.requested, True
        if not first or self._abandon:
            raise KeyboardInterrupt
        # os.write, not print: a handler that prints while a progress line is being printed
        # would fail with "reentrant call".
        os.write(
            sys.stderr.fileno(),
            b"textgym: Ctrl-C: stopping after this step with a checkpoint "
            b"(Ctrl-C again stops at once, without one)\n",
        )

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """A block that a Ctrl-C stops at once (``KeyboardInterrupt``) instead of at its end."""
        self._abandon = True
        try:
            yield
        finally:
            self._abandon = False


def save_model(
    model: Any, tokenizer: Any, path: str | Path, *, base: str, final_dir: str | Path | None = None
) -> None:
    """``save_pretrained`` of the model and tokenizer; a LoRA model saves only its adapter.

    Raises :class:`FloatingPointError` (and writes nothing) if a weight is NaN or inf.
    The adapter's ``base_model_name_or_path`` is set to ``base`` (the name or directory the run
    started from, as :func:`textgym.models.adapter_base` writes it relative to ``final_dir``,
    default ``path``), so :func:`textgym.models.load_model` can load the adapter directory alone
    and stack it on the right base: a few MB instead of the full weights. The files get the
    user's umask (``safetensors`` writes ``0o600``; :func:`textgym.results.apply_umask`).
    """
    from textgym.models import adapter_base
    from textgym.results import apply_umask

    check_finite_parameters(model)
    peft_config = getattr(model, "peft_config", None)
    with _no_progress_bars():
        if peft_config:
            recorded = adapter_base(base, final_dir if final_dir is not None else path)
            for adapter in peft_config.values():
                adapter.base_model_name_or_path = recorded
            # No embedding layer is adapted ("all-linear"), and peft would look for the base's
            # config.json relative to the working directory to decide.
            model.save_pretrained(path, save_embedding_layers=False)
        else:
            model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    apply_umask(Path(path))


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Turn off ``transformers``' progress bars for the block ("Writing model shards" would
    fill the training log at every checkpoint)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


#: Files of a checkpoint: the resumable state without the optimizer, and the optimizer and
#: scheduler state (kept only in the newest checkpoint, see :func:`save_checkpoint`).
TRAINER_STATE = "trainer_state.pt"
OPTIMIZER_STATE = "optimizer.pt"
_DISK_MARGIN = 1.1  # the estimate of the next checkpoint's size, times this ...
_DISK_SLACK = 64 * 2**20  # ... plus this many bytes (a tokenizer; file system overhead)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def check_free_disk(directory: str | Path, needed: int, *, what: str, keeps: str) -> None:
    """Raise :class:`InsufficientDiskSpace` unless ``directory`` has ``needed`` bytes free.

    Args:
        directory: Where the file or folder will be written.
        needed: Bytes it needs (an estimate with a margin).
        what: What is about to be saved, for the message (``"checkpoint-8"``).
        keeps: What stays good when the save is refused, for the message.

    Raises:
        InsufficientDiskSpace: naming the directory, the bytes needed and free, and the fix.
    """
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise InsufficientDiskSpace(
            f"not enough free disk in {directory} to save {what}: needs about {needed:,} bytes "
            f"({_mb(needed)}), {free:,} free ({_mb(free)}); nothing was written and {keeps}. "
            "Free some space (or lower --save-total-limit), then continue with --resume"
        )


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _tensor_bytes(tensors: Any) -> int:
    """Bytes of the distinct tensors in ``tensors`` (tied weights counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def checkpoint_bytes(output_dir: str | Path, model: Any, optimizer: torch.optim.Optimizer) -> int:
    """An estimate of the size of the next checkpoint in ``output_dir``, in bytes.

    The size of the newest full checkpoint (with optimizer state) when there is one; else what
    is saved counted from memory: the weights ``save_pretrained`` writes (the trainable
    adapter's with LoRA, all of them otherwise) plus the optimizer state (its tensors, or two
    float32 moments per trainable weight, AdamW's, before its first step).
    """
    last = latest_checkpoint(output_dir)
    if last is not None and (last / OPTIMIZER_STATE).is_file():
        return _dir_bytes(last)
    trainable = [p for p in model.parameters() if p.requires_grad]
    moments = [t for s in optimizer.state.values() for t in s.values()]
    state = _tensor_bytes(moments) or 2 * 4 * sum(p.numel() for p in trainable)
    return model_bytes(model) + state


def model_bytes(model: Any) -> int:
    """Bytes of the weights :func:`save_model` writes: the trainable adapter's with LoRA, every
    distinct weight otherwise (tied weights once)."""
    if getattr(model, "peft_config", None):
        return _tensor_bytes(p for p in model.parameters() if p.requires_grad)
    return _tensor_bytes(model.parameters())


def _remove_dir(path: Path) -> None:
    """Delete a directory so that it vanishes at once: renamed to a hidden name, then removed
    (a run killed while removing leaves a hidden folder, never a half checkpoint)."""
    doomed = path.with_name(f".{path.name}.deleting")
    shutil.rmtree(doomed, ignore_errors=True)
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _clear_scratch(root: Path) -> None:
    """Remove what a killed save or prune left behind (hidden ``.checkpoint-*`` folders)."""
    for leftover in root.glob(".checkpoint-*"):
        if leftover.is_dir() and leftover.name.endswith((".tmp", ".deleting")):
            shutil.rmtree(leftover, ignore_errors=True)


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    config: Any,
    extra: Mapping[str, Any] | None = None,
    save_total_limit: int | None = None,
) -> Path:
    """Write ``output_dir/checkpoint-{step}`` (see the module docstring); return its path.

    In order: the free disk is checked against :func:`checkpoint_bytes` times 1.1 plus 64 MiB;
    the checkpoint is written under a temporary name and renamed when complete (a run killed
    while saving never leaves a checkpoint that looks complete); then, and only then, the
    checkpoints beyond the newest ``save_total_limit`` are deleted (the meaning of TRL's and
    ``transformers``' ``save_total_limit``) and the optimizer state (``optimizer.pt``) is
    removed from every checkpoint but the new one: it is as large as the weights twice over,
    and a resume starts from the newest checkpoint.

    Args:
        save_total_limit: Most ``checkpoint-*`` folders kept (>= 1); ``None`` keeps all.

    Raises:
        InsufficientDiskSpace: too little free disk; nothing was written or deleted.
        FloatingPointError: a weight is NaN or inf; nothing was written or deleted.
    """
    root = Path(output_dir)
    final = root / f"checkpoint-{step}"
    root.mkdir(parents=True, exist_ok=True)
    _clear_scratch(root)
    last = latest_checkpoint(root)
    keeps = f"{last} is the last good checkpoint" if last else "no checkpoint was saved yet"
    needed = int(checkpoint_bytes(root, model, optimizer) * _DISK_MARGIN) + _DISK_SLACK
    check_free_disk(root, needed, what=final.name, keeps=keeps)
    scratch = root / f".checkpoint-{step}.tmp"
    scratch.mkdir()
    save_model(model, tokenizer, scratch, base=config.model, final_dir=final)
    state = {"step": step, "rng": rng_state(), "extra": dict(extra or {})}
    torch.save(state, scratch / TRAINER_STATE)
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
        scratch / OPTIMIZER_STATE,
    )
    (scratch / "trainer_config.json").write_text(
        json.dumps(asdict(config), indent=2, default=str) + "\n"
    )
    if final.exists():
        _remove_dir(final)
    scratch.rename(final)
    prune_checkpoints(root, save_total_limit, keep=final)
    return final


def prune_checkpoints(output_dir: str | Path, limit: int | None, *, keep: Path) -> list[Path]:
    """Delete the oldest ``checkpoint-*`` folders beyond ``limit`` and the optimizer state of
    every checkpoint but ``keep`` (the one just written, never deleted).

    Returns:
        The checkpoints deleted.
    """
    others = [p for _, p in _checkpoints(output_dir) if p != keep]  # oldest first
    doomed = others[: max(0, len(others) - (limit - 1))] if limit is not None else []
    for path in doomed:
        _remove_dir(path)
    for path in others[len(doomed) :]:
        (path / OPTIMIZER_STATE).unlink(missing_ok=True)
    return doomed


def check_checkpoint_settings(config: Any) -> None:
    """Validate the checkpoint and evaluation settings a trainer config has.

    ``save_every`` and ``eval_every`` (intervals in steps; 0 has its documented meaning) must
    be ints >= 0, ``eval_episodes`` an int >= 1, ``save_total_limit`` ``None`` or an int >= 1
    (a limit of 0 would delete the checkpoint just written).

    Raises:
        ValueError: naming the field, the value and what is expected.
    """
    for name in ("save_every", "eval_every"):
        value = getattr(config, name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{name}: expected an int >= 0 (an interval in steps; 0 turns it off), got "
                f"{value!r}"
            )
    if hasattr(config, "eval_episodes"):
        check_positive_ints(config, ("eval_episodes",))
    limit = getattr(config, "save_total_limit", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"save_total_limit: expected None (keep every checkpoint) or an int >= 1, got {limit!r}"
        )


#: Config fields a resumed run may change: how long it runs and how it reports, not what it
#: learns (changing those would make the saved config describe a run that did not happen).
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",
        "epochs",
        "resume",
        "time_limit_minutes",
        "env_workers",
        "save_every",
        "save_total_limit",
        "eval_every",
        "eval_episodes",
        "log_every",
        "tensorboard",
        "report_to",
        "progress",
        "device",
        "output_dir",
    }
)


def check_resumable(checkpoint: str | Path, config: Any) -> None:
    """Raise ValueError if ``checkpoint`` (``checkpoint-{step}``) is past ``config.steps``, or if
    ``config`` differs from the checkpoint's saved config in a field outside
    :data:`RESUME_MAY_CHANGE` (a new learning rate would otherwise be silently overridden by the
    restored optimizer and scheduler while the new config is recorded)."""
    done = int(Path(checkpoint).name.rsplit("-", 1)[1])
    steps = getattr(config, "steps", None)
    if steps is not None and done > steps:
        raise ValueError(
            f"Cannot resume from {checkpoint} with steps={steps}: the run is already past it; "
            f"pass steps >= {done}"
        )
    saved_file = Path(checkpoint) / "trainer_config.json"
    if not saved_file.exists():
        return
    try:
        saved = json.loads(saved_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{saved_file} does not read as JSON ({error}); it is damaged: restore it from the "
            "run's record (run.json holds the config) or start a new --output-dir"
        ) from None
    now = json.loads(json.dumps(asdict(config), default=str))
    changed = [
        f"{key}: {saved[key]!r} -> {value!r}"
        for key, value in now.items()
        if key not in RESUME_MAY_CHANGE and key in saved and saved[key] != value
    ]
    if changed:
        raise ValueError(
            f"Cannot resume from {checkpoint} with a different config ({'; '.join(changed)}); "
            f"only {', '.join(sorted(RESUME_MAY_CHANGE))} may change on resume. Use the saved "
            "values or start a new output_dir."
        )


def _checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint-{step}`` directory, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name))]
    return sorted(p for p in found if p[1].is_dir())


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The ``checkpoint-{step}`` directory with the largest step, or ``None``."""
    found = _checkpoints(output_dir)
    return found[-1][1] if found else None


def checkpoint_to_resume(output_dir: str | Path, config: Any) -> Path:
    """The checkpoint ``--resume`` continues: the newest in ``output_dir``, checked against
    ``config`` (:func:`check_resumable`) and read (:func:`read_trainer_state`) before anything
    else happens.

    Raises:
        CheckpointError: ``output_dir`` holds no checkpoint (nothing to resume), or its newest
            one is damaged.
        ValueError: the resume is refused by :func:`check_resumable`.
    """
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        held = "does not exist" if not Path(output_dir).exists() else "holds no checkpoint-*"
        raise CheckpointError(
            f"resume: nothing to resume: {output_dir} {held}; run without --resume to start a "
            "new run, or pass the --output-dir of the run to continue"
        )
    check_resumable(checkpoint, config)
    read_trainer_state(checkpoint)
    check_weight_files(checkpoint)
    return checkpoint


def _damaged(file: Path, problem: str) -> CheckpointError:
    """The error for a checkpoint file that does not load, with the fix."""
    return CheckpointError(
        f"{file} {problem}; the checkpoint is damaged (a run killed while copying it, or a full "
        f"disk): delete {file.parent} and resume from the one before, or start a new "
        "--output-dir (--model can start from an earlier checkpoint's weights)"
    )


def _load_data(file: Path) -> Any:
    """``torch.load(file, weights_only=True)``, every failure a :class:`CheckpointError`."""
    try:
        # weights_only: a checkpoint is data, never code (a pickled object could run anything).
        with warnings.catch_warnings():  # a foreign pickle protocol: refused below, in one line
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(file, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{file} holds objects other than tensors and plain data, so it was not loaded "
            f"(unpickling them could run code); it was not written by this version of textgym: "
            f"use a checkpoint that textgym wrote ({str(error).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise _damaged(file, f"does not load ({type(error).__name__}: {error})") from None


def read_trainer_state(path: str | Path) -> dict[str, Any]:
    """The saved trainer state of a checkpoint: ``step``, ``rng``, ``extra``, ``optimizer`` and
    ``scheduler`` (from ``optimizer.pt``, or from ``trainer_state.pt`` in checkpoints written
    before the optimizer state got its own file), checked for every key.

    Raises:
        CheckpointError: a file is missing, truncated, not data (pickled objects), or lacks a
            key; or the checkpoint holds no optimizer state (only the newest keeps it).
    """
    path = Path(path)
    state_file = path / TRAINER_STATE
    if not state_file.is_file():
        raise CheckpointError(
            f"Expected a checkpoint directory with {TRAINER_STATE}, got {path} without one; "
            "resume from a checkpoint-* folder that textgym train or sft wrote"
        )
    state = _load_data(state_file)
    needed = ("step", "rng", "extra")
    if not isinstance(state, dict) or any(key not in state for key in needed):
        seen = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise _damaged(state_file, f"lacks keys (expected {', '.join(needed)}, got {seen})")
    if "optimizer" not in state:
        optimizer_file = path / OPTIMIZER_STATE
        if not optimizer_file.is_file():
            raise CheckpointError(
                f"{path} holds no optimizer state ({OPTIMIZER_STATE}): only the newest "
                "checkpoint of a run keeps it (--save-total-limit), so resume continues the "
                f"newest; to start a new run from {path.name}'s weights pass --model {path}"
            )
        extra = _load_data(optimizer_file)
        if not isinstance(extra, dict) or {"optimizer", "scheduler"} - set(extra):
            raise _damaged(optimizer_file, "lacks keys (expected optimizer, scheduler)")
        state |= extra
    if not isinstance(state["step"], int) or not isinstance(state["extra"], dict):
        raise _damaged(state_file, "holds a step or extra state of the wrong type")
    return state


def check_weight_files(path: str | Path) -> None:
    """Read every ``*.safetensors`` file of a model or checkpoint directory, one tensor at a
    time, and check that it is whole and finite.

    Raises:
        CheckpointError: no weights file, a file that does not read (truncated, a bad header),
            or a tensor holding NaN or inf (naming the file and the tensor).
    """
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{path} holds no *.safetensors weights; resume from a checkpoint-* folder that "
            "textgym train or sft wrote"
        )
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as weights:
                for name in weights.keys():  # noqa: SIM118  (safe_open is not a mapping)
                    tensor = weights.get_tensor(name)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        raise CheckpointError(
                            f"{file}: tensor {name} holds NaN or inf values, so training from "
                            "it would be NaN from the first step; resume from an earlier "
                            "checkpoint or start a new --output-dir"
                        )
        except CheckpointError:
            raise
        except Exception as error:  # safetensors raises its own SafetensorError, OSError, ...
            raise _damaged(file, f"does not read ({type(error).__name__}: {error})") from None


def load_checkpoint(
    path: str | Path, *, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any
) -> dict[str, Any]:
    """Load weights, optimizer, scheduler and RNG states from a checkpoint into live objects.

    Returns:
        The saved trainer state (``step``, ``extra``).

    Raises:
        CheckpointError: (a ValueError) ``path`` is not a complete checkpoint, a file is
            truncated or lacks a key, ``trainer_state.pt`` holds anything but tensors and plain
            data (it is loaded with ``weights_only=True`` and never unpickled as arbitrary
            objects), or the weights do not fit ``model`` or are not finite.
    """
    path = Path(path)
    state = read_trainer_state(path)
    _load_weights(model, path)
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as error:
        raise _damaged(
            path / OPTIMIZER_STATE, f"does not fit this run ({type(error).__name__}: {error})"
        ) from None
    return state


def _load_weights(model: Any, path: Path) -> None:
    """Copy saved weights (full model or LoRA adapter) into ``model`` in place, then check
    that every weight is finite.

    Raises:
        CheckpointError: the files do not read, do not fit ``model`` (other names or shapes),
            or hold NaN or inf.
    """
    try:
        if hasattr(model, "load_adapter") and (path / "adapter_config.json").exists():
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
        else:
            from safetensors.torch import load_file

            saved: dict[str, torch.Tensor] = {}
            for file in sorted(path.glob("*.safetensors")):  # model.safetensors, or its shards
                saved |= load_file(str(file))
            own = model.state_dict()
            wrong = [
                f"{name} {tuple(tensor.shape)} (the model's {tuple(own[name].shape)})"
                for name, tensor in saved.items()
                if name in own and own[name].shape != tensor.shape
            ]
            if wrong:
                raise CheckpointError(
                    f"{path} holds weights of another shape than the model's: "
                    f"{'; '.join(wrong[:3])}; resume with the --model the run was started with"
                )
            missing, unexpected = model.load_state_dict(saved, strict=False)
            if unexpected or [m for m in missing if "lm_head" not in m]:
                raise CheckpointError(
                    f"Checkpoint {path} does not match the model: missing {missing}, unexpected "
                    f"{unexpected}; resume with the --model the run was started with"
                )
    except CheckpointError:
        raise
    except Exception as error:  # safetensors' own errors, peft's size mismatch, ...
        raise CheckpointError(
            f"The weights in {path} do not load into the model "
            f"({type(error).__name__}: {' '.join(str(error).split())[:300]}); resume with the "
            "--model the run was started with, or start a new --output-dir"
        ) from None
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise CheckpointError(
                f"{path}: weight {name} holds NaN or inf values after loading, so training "
                "from it would be NaN from the first step; resume from an earlier checkpoint "
                "or start a new --output-dir"
            )
