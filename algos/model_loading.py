"""Devices and the trained model, the same for ``textgym sft`` and ``textgym train``.

Both trainers load and prepare the model they train through one function
(:func:`load_trainable_model`: load, optional reference copy, gradient checkpointing, LoRA), so
an option such as ``lora_alpha`` means the same in both; :func:`resolve_device` and
:func:`autocast` pick where and in which precision it runs.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import torch

from textgym.errors import MissingExtraError

__all__ = [
    "adapter_start",
    "autocast",
    "load_trainable_model",
    "prepare_model",
    "resolve_device",
    "saved_base",
]


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
        MissingExtraError: ``lora_rank > 0`` without ``peft`` installed.
    """
    if gradient_checkpointing:
        _checkpoint_activations(model)
    if lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise MissingExtraError(
                f'LoRA needs peft ({error}); pip install "textgym[train]"'
            ) from error
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


def _checkpoint_activations(model: Any) -> None:
    """Recompute decoder activations in the backward pass (no KV cache while training)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


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
        MissingExtraError: LoRA without ``peft``.
    """
    from textgym.models import load_adapter_for_training, load_model

    if getattr(config, "continue_adapter", False):
        model, tokenizer, _base = load_adapter_for_training(config.model, device=device)
        ranks = {adapter.r for adapter in model.peft_config.values()}
        if ranks != {config.lora_rank}:
            raise ValueError(
                f"continue_adapter: the adapter in {config.model} has rank {sorted(ranks)}, "
                f"lora_rank is {config.lora_rank}; set lora_rank to the adapter's rank"
            )
        if config.gradient_checkpointing:
            _checkpoint_activations(model)
            model.enable_input_require_grads()
        return model, tokenizer, None
    model, tokenizer = load_model(config.model, device=device)
    frozen = copy.deepcopy(model).eval() if reference and config.lora_rank == 0 else None
    model = prepare_model(
        model,
        gradient_checkpointing=config.gradient_checkpointing,
        lora_rank=config.lora_rank,
        lora_alpha=config.lora_alpha,
    )
    return model, tokenizer, frozen


def adapter_start(model: Any) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s trainable weights (a LoRA adapter's: a few MB), so the policy it
    started from can be put back for a forward pass (:meth:`Learner.start_policy`)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def saved_base(config: Any) -> str:
    """The base model a LoRA adapter saved by this run applies to: ``config.model``, or with
    ``continue_adapter`` the base of the adapter it continues.

    Raises:
        ModelLoadError: as :func:`textgym.models.load_model` for a refused adapter folder.
    """
    if not getattr(config, "continue_adapter", False):
        return config.model
    from textgym.models import adapter_base_of

    return adapter_base_of(config.model)
