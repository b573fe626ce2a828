"""What the SFT and GRPO trainers share beyond models, batches and checkpoints: the optimizer
settings (:class:`OptimizationConfig`, :func:`make_optimizer`), config checks, the guards of an
optimizer step (:class:`NonFiniteGuard`, :func:`clip_gradients`, :func:`check_finite_parameters`)
and Ctrl-C handling (:class:`StopOnInterrupt`, :class:`TrainingInterrupted`).

The other shared jobs have their own modules: :mod:`textgym.algos.model_loading` (devices and the
trained model), :mod:`textgym.algos.batches` (token batches and log-probs) and
:mod:`textgym.algos.checkpoints` (save, check, resume).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, NoReturn

import torch

from textgym.errors import NonFiniteError, SetupError

__all__ = [
    "NonFiniteGuard",
    "NonFiniteLossError",
    "OptimizationConfig",
    "StopOnInterrupt",
    "TrainingInterrupted",
    "check_finite_floats",
    "check_finite_parameters",
    "check_positive_ints",
    "clip_gradients",
    "exit_at_once",
    "make_optimizer",
]


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
    a step, and the update does not depend on this number (only memory and speed do). Ignored
    with micro_batch_tokens."""
    micro_batch_tokens: int | None = None
    """None: micro-batches of micro_batch_size right-padded sequences. A number: pack sequences
    without padding into rows of at most this many tokens (first-fit decreasing), one row per
    forward/backward pass, each sequence attending only to itself at its own positions (the
    same loss and gradients up to float rounding). A sequence of L tokens takes L-1 (its last
    token is only a target); one longer than the budget runs in a row of its own. With sdpa or
    eager attention a row's mask is dense (its cost grows with the row's length squared). In
    GRPO it replaces share_prefix's shared-prompt pass in the update (rollouts still share
    prefills)."""
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
    continue_adapter: bool = False
    """When model is a LoRA adapter folder: train that adapter itself further (lora_rank must be
    its rank; its own lora_alpha applies) instead of merging it and stacking a new one, so the
    result is one adapter on the adapter's base, as small as the one it started from. The start
    policy (reference of the KL penalty, kl_to_start) is then the adapter as loaded, not the
    base."""
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
        if self.micro_batch_tokens is not None:
            check_positive_ints(self, ("micro_batch_tokens",))
        if self.learning_rate <= 0:
            raise SetupError(f"learning_rate: expected > 0, got {self.learning_rate}")
        for name in ("weight_decay", "max_grad_norm", "warmup_steps", "lora_rank"):
            if getattr(self, name) < 0:
                raise SetupError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if self.lora_rank > 0 and self.lora_alpha <= 0:
            raise SetupError(f"lora_alpha: expected > 0 with LoRA, got {self.lora_alpha}")
        if self.continue_adapter and self.lora_rank <= 0:
            raise SetupError("continue_adapter trains a LoRA adapter: set lora_rank to its rank")


def check_finite_floats(config: Any) -> None:
    """Raise SetupError naming the first float field of a config dataclass that is NaN or inf.

    Checked before any range check: NaN fails no ``x < 0`` test (a NaN ``max_grad_norm`` or
    clipping epsilon would silently turn clipping off) and an infinite learning rate passes
    ``> 0``. Floats inside tuples and lists (``opponent_random_move_prob``) are checked too.

    Raises:
        SetupError: ``"{field}: expected a finite number, got {value!r}"``.
    """
    for field in fields(config):
        value = getattr(config, field.name, None)  # init=False fields may not be set yet
        values = value if isinstance(value, (tuple, list)) else (value,)
        for item in values:
            if isinstance(item, float) and not math.isfinite(item):
                raise SetupError(f"{field.name}: expected a finite number, got {value!r}")


def check_positive_ints(config: Any, names: Sequence[str]) -> None:
    """Raise SetupError naming the first of ``config``'s fields ``names`` that is not an int >= 1.

    Raises:
        SetupError: ``"{field}: expected an int >= 1, got {value!r}"``.
    """
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SetupError(f"{name}: expected an int >= 1, got {value!r}")


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


class NonFiniteLossError(NonFiniteError, FloatingPointError):
    """Several optimizer steps in a row had a non-finite loss or gradient norm."""


class NonFiniteGuard:
    """Steps the optimizer only when the loss and the gradient norm are finite.

    One batch whose loss or gradients overflow costs one skipped update (gradients dropped)
    instead of weights that are NaN from then on; ``limit`` skipped steps in a row stop the run
    with :class:`NonFiniteLossError` before anything non-finite can be saved.

    Attributes:
        skipped: Steps skipped so far.
    """

    def __init__(self, limit: int = 3):
        if not isinstance(limit, int) or limit < 1:
            raise SetupError(f"Expected limit to be an int >= 1, got {limit!r}")
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
            NonFiniteLossError: the ``limit``-th non-finite step in a row.
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
            raise NonFiniteLossError(
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


def _signal_name(signum: int) -> str:
    return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def exit_at_once(signum: int) -> NoReturn:
    """End the process now, for a second Ctrl-C or SIGTERM: one line on stderr, exit code 128 +
    the signal's number (130, 143), whatever Python code runs at that moment.

    ``os._exit``, not an exception: a ``KeyboardInterrupt`` raised from a signal handler lands
    wherever the interpreter is, and there it could be swallowed (a ``__del__``, a library's
    ``except BaseException``) and the run go on, or end in a traceback. Nothing is lost that a
    clean exit would keep: checkpoints and JSONL rows are written whole or not at all, the
    output directory's ``flock`` goes with the process, and the next run of the directory
    clears a half-written checkpoint folder.
    """
    what = _signal_name(signum)
    _say(
        f"textgym: {what} again: stopped at once; the step in progress is lost, the last "
        "checkpoint is intact (continue with --resume)"
    )
    os._exit(128 + signum)


def _say(line: str) -> None:
    """``line`` on stderr from a signal handler: ``os.write``, not ``print`` (a handler that
    prints while a progress line is being printed fails with "reentrant call"); through
    ``sys.stderr`` where it has no file descriptor (a test's captured stream)."""
    with contextlib.suppress(OSError, ValueError):  # stderr closed: the exit code says it
        try:
            fd = sys.stderr.fileno()
        except (OSError, ValueError):  # io.UnsupportedOperation is both
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        else:
            os.write(fd, (line + "\n").encode())


class StopOnInterrupt:
    """Ctrl-C (SIGINT) handling of a training loop, as a context manager.

    The first Ctrl-C asks the loop to stop (:attr:`requested`): the loop finishes the step in
    progress (its loops, such as dynamic sampling's rounds, read :attr:`requested` and give
    the step up), saves the last completed step and raises :class:`TrainingInterrupted`.
    Inside :meth:`abandonable` blocks (an evaluation, which changes no training state) it
    raises ``KeyboardInterrupt`` at once instead. A second Ctrl-C anywhere ends the process at
    once (:func:`exit_at_once`: one line, exit code 130, or 143 for SIGTERM): a user who cannot
    wait loses at most the step in progress (the last checkpoint on disk is intact: saves are
    atomic, and the next save clears a half-written one). Outside the main thread, where no
    signal handler can be set, it does nothing.

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
        if self.requested:  # the second one: the user cannot wait
            exit_at_once(signum)
        self.requested = True
        if self._abandon:
            raise KeyboardInterrupt
        # SIGTERM arrives here too when the caller forwards it (textgym.cli._trainer).
        what = _signal_name(signum)
        _say(
            f"textgym: {what}: stopping after this step with a checkpoint ({what} again stops "
            "at once, without one)"
        )

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """A block that a Ctrl-C stops at once (``KeyboardInterrupt``) instead of at its end."""
        self._abandon = True
        try:
            yield
        finally:
            self._abandon = False
