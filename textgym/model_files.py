"""Loading a model folder or a LoRA adapter (``--model DIR``) safely and loudly: nothing from
the folder runs, nothing is downloaded, and a damaged or foreign folder is refused in one line.

:func:`load_folder` loads a local model folder (:mod:`textgym.models` also applies the checks
to adapters and Hugging Face ids): :func:`check_model_dir` before
``transformers`` sees a folder (``config.json`` and ``tokenizer_config.json`` readable and
without ``auto_map``, i.e. custom code; weights in safetensors whose headers read and whose
tensors are floating-point), :func:`check_loaded` after it (every tensor present, none left
over, every shape the config's, every weight finite), and :func:`check_adapter_dir` /
:func:`check_adapter_loaded` for an adapter. Each problem is a :class:`ModelLoadError` (a
``ValueError``, which the CLI prints as one ``textgym: error:`` line) naming the file, the
tensor and the fix.

Pickled weights (``pytorch_model.bin``, ``adapter_model.bin``) are refused unless
``TEXTGYM_ALLOW_PICKLE=1`` is set (:data:`ALLOW_PICKLE_ENV`); even then ``transformers`` and
``peft`` read them with ``torch.load(weights_only=True)``, which loads tensors and plain data
only, never arbitrary objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from textgym.checks import one_line
from textgym.errors import MissingExtraError, SetupError

__all__ = [
    "ADAPTER_CONFIG",
    "ALLOW_PICKLE_ENV",
    "SAFE_LOADING",
    "ModelLoadError",
    "check_adapter_dir",
    "check_adapter_loaded",
    "check_loaded",
    "check_model_dir",
    "guarded",
    "load_folder",
    "pickle_allowed",
    "quiet_loading",
    "read_json_object",
    "read_weight_header",
    "require_llm",
]

_LLM_HINT = 'install the LLM extra: pip install "textgym[llm]"'


def require_llm() -> None:
    """Check that the LLM extra (torch, transformers) is installed.

    Raises:
        MissingExtraError: (an ``ImportError``) naming the ``pip install`` that adds it.
    """
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        raise MissingExtraError(
            f"Local models need torch and transformers ({error}); {_LLM_HINT}"
        ) from error


#: The file that makes a folder a LoRA adapter (peft's ``adapter_config.json``).
ADAPTER_CONFIG = "adapter_config.json"
#: Set to ``1`` to let a folder whose weights are pickled (``*.bin``) load; see the module doc.
ALLOW_PICKLE_ENV = "TEXTGYM_ALLOW_PICKLE"
#: Names of pickled weight files that ``transformers`` or ``peft`` would load.
_PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "adapter_model.bin")
_INDEX = "model.safetensors.index.json"
_SHOWN = 3  # tensors named in one error line


class ModelLoadError(SetupError):
    """A model folder or adapter that textgym refuses to load; the message is one line naming
    the file, what is wrong and the fix."""


def pickle_allowed() -> bool:
    """Whether ``TEXTGYM_ALLOW_PICKLE=1`` is set (pickled ``*.bin`` weights may load)."""
    return os.environ.get(ALLOW_PICKLE_ENV, "").strip() == "1"


def read_json_object(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``.

    Raises:
        ModelLoadError: the file is missing, unreadable, or not a JSON object.
    """
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(
            f"{file.parent} holds no {file.name}; expected a folder written by save_pretrained "
            "(textgym sft or train output, or a downloaded Hugging Face model)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ModelLoadError(
            f"{file} does not read as JSON ({type(error).__name__}: {one_line(error, 200)}); "
            "the file is damaged: copy or save the model again"
        ) from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"Expected {file} to hold a JSON object, got {type(data).__name__}")
    return data


def _refuse_custom_code(file: Path, config: Mapping[str, Any]) -> None:
    if "auto_map" in config:
        raise ModelLoadError(
            f"{file} has an auto_map: the model needs custom code from its folder, which textgym "
            "never runs (trust_remote_code=False); use a model that transformers supports "
            "natively, or load it yourself if you trust its code"
        )


def _pickle_refusal(file: Path) -> ModelLoadError:
    return ModelLoadError(
        f"{file} holds pickled weights, which textgym does not load by default (unpickling can "
        "run code); convert the folder to safetensors (load it once with transformers and "
        "save_pretrained it, safe_serialization=True), or, if you trust its source, set "
        f"{ALLOW_PICKLE_ENV}=1 (then it is read with torch.load(weights_only=True))"
    )


def read_weight_header(file: Path) -> dict[str, tuple[str, list[int]]]:
    """``{tensor name: (safetensors dtype, shape)}`` of a safetensors file, reading no data.

    Raises:
        ModelLoadError: the file does not read (truncated, a bad header), or a tensor is not
            floating-point.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as weights:
            header = {}
            for name in weights.keys():  # noqa: SIM118  (safe_open is not a mapping)
                tensor = weights.get_slice(name)
                header[name] = (tensor.get_dtype(), list(tensor.get_shape()))
    except Exception as error:  # safetensors raises its own SafetensorError, OSError, ...
        raise ModelLoadError(
            f"{file} does not read as safetensors ({type(error).__name__}: "
            f"{one_line(error, 200)}); the file is damaged or incomplete (an interrupted copy "
            "or download): copy or save the model again"
        ) from None
    for name, (dtype, _) in header.items():
        if not (dtype.startswith("F") or dtype == "BF16"):
            raise ModelLoadError(
                f"{file}: tensor {name} is {dtype}, expected floating-point weights (F32, BF16 "
                "or F16); integer or quantized weights are not loaded: save the model again "
                "in floating point"
            )
    return header


def _weight_files(folder: Path, single: str, index: str | None) -> list[Path]:
    """The safetensors files that ``from_pretrained`` reads from ``folder`` ([] when pickled
    weights may load instead).

    Raises:
        ModelLoadError: no weights, a shard of the index missing, or only pickled weights.
    """
    if (folder / single).is_file():
        return [folder / single]
    if index is not None and (folder / index).is_file():
        weight_map = read_json_object(folder / index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{folder / index} has no weight_map; save the model again")
        shards = sorted({str(shard) for shard in weight_map.values()})
        for shard in shards:
            if Path(shard).name != shard or not (folder / shard).is_file():
                raise ModelLoadError(
                    f"{folder / index} names the shard {shard}, which {folder} does not hold; "
                    "copy the whole folder again"
                )
        return [folder / shard for shard in shards]
    pickled = [folder / name for name in _PICKLED if (folder / name).is_file()]
    if pickled and not pickle_allowed():
        raise _pickle_refusal(pickled[0])
    if pickled:
        return []
    raise ModelLoadError(
        f"{folder} holds no weights ({single}); expected a folder written by save_pretrained"
    )


def check_model_dir(folder: Path) -> dict[str, Path]:
    """Check a model folder before ``transformers`` reads it.

    Returns:
        ``{tensor name: the safetensors file holding it}`` (empty for pickled weights loaded
        with :data:`ALLOW_PICKLE_ENV`).

    Raises:
        ModelLoadError: ``config.json`` missing or not a JSON object; ``config.json`` or
            ``tokenizer_config.json`` asking for custom code (``auto_map``); no weights, a
            missing shard, pickled weights (without the opt-in), a safetensors file that does
            not read, or a tensor that is not floating-point.
    """
    _refuse_custom_code(folder / "config.json", read_json_object(folder / "config.json"))
    if (folder / "tokenizer_config.json").exists():
        tokenizer_file = folder / "tokenizer_config.json"
        _refuse_custom_code(tokenizer_file, read_json_object(tokenizer_file))
    owners: dict[str, Path] = {}
    for file in _weight_files(folder, "model.safetensors", _INDEX):
        owners |= dict.fromkeys(read_weight_header(file), file)
    return owners


def _names(names: Any) -> str:
    listed = sorted(names)
    more = f" and {len(listed) - _SHOWN} more" if len(listed) > _SHOWN else ""
    return ", ".join(listed[:_SHOWN]) + more


def _finite(tensor: Any) -> bool:
    """Whether a tensor holds no NaN or inf: its sum first (NaN and inf carry through it; 30x
    faster than ``isfinite`` over Gemma 3 270M's 168M-entry embedding on a 2-core CPU), the
    exact check only when the sum is not finite (it could also overflow)."""
    import torch

    if not tensor.is_floating_point():
        return True
    with torch.no_grad():
        return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def _nonfinite(model: Any) -> str | None:
    """The name of the first weight of ``model`` holding NaN or inf, else None."""
    for name, param in model.named_parameters():
        if not _finite(param):
            return name
    return None


def check_loaded(
    model: Any, info: Mapping[str, Any], owners: Mapping[str, Path], folder: str | Path
) -> None:
    """Check what ``from_pretrained(..., output_loading_info=True)`` loaded.

    Tied weights (``lm_head.weight`` with ``tie_word_embeddings``) are absent from the files
    by design; ``transformers`` leaves them out of ``missing_keys``.

    Args:
        model: The loaded model.
        info: Its loading info (``missing_keys``, ``unexpected_keys``, ``mismatched_keys``).
        owners: ``{tensor name: file}`` from :func:`check_model_dir` (names the file).
        folder: The model folder or id, named when no file is known.

    Raises:
        ModelLoadError: a tensor missing (it would be random), one the model does not have,
            one of another shape than the config's, or a weight holding NaN or inf.
    """
    files = sorted({file.name for file in owners.values()}) or ["the weights"]
    where = f"{folder}/{files[0]}" if len(files) == 1 else f"{folder} ({', '.join(files)})"
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda row: row[0])
    if mismatched:
        name, saved, wanted = mismatched[0][:3]
        raise ModelLoadError(
            f"{owners.get(name, where)}: tensor {name} has shape {list(saved)}, but config.json "
            f"gives the model {list(wanted)} ({len(mismatched)} tensor(s) of the wrong shape); "
            "the weights and config.json are from different models: copy or save the model again"
        )
    missing = info.get("missing_keys") or ()
    if missing:
        raise ModelLoadError(
            f"{where} lacks tensor(s) {_names(missing)} of the model config.json describes (they "
            "would be randomly initialised); the weights are incomplete or from another model: "
            "copy or save the model again"
        )
    unexpected = sorted(info.get("unexpected_keys") or ())
    if unexpected:
        raise ModelLoadError(
            f"{owners.get(unexpected[0], where)}: tensor(s) {_names(unexpected)} are not part of "
            "the model config.json describes; the weights and config.json are from different "
            "models: copy or save the model again"
        )
    bad = _nonfinite(model)
    if bad is not None:
        raise ModelLoadError(
            f"{owners.get(bad, where)}: tensor {bad} holds NaN or inf values, so every output "
            "would be NaN; the weights are damaged (a diverged run?): use an earlier checkpoint"
        )


def check_adapter_dir(folder: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """Check a LoRA adapter folder before ``peft`` reads it.

    Returns:
        ``(adapter config, {tensor name: file})`` (the mapping is empty for pickled weights
        loaded with :data:`ALLOW_PICKLE_ENV`).

    Raises:
        ModelLoadError: ``adapter_config.json`` missing or not a JSON object; no adapter
            weights, pickled ones (without the opt-in), a file that does not read, or a tensor
            that is not floating-point or holds NaN or inf.
    """
    from safetensors import safe_open

    config = read_json_object(folder / "adapter_config.json")
    files = _weight_files(folder, "adapter_model.safetensors", None)
    owners: dict[str, Path] = {}
    for file in files:
        owners |= dict.fromkeys(read_weight_header(file), file)
        with safe_open(str(file), framework="pt") as weights:  # adapters are small: read all
            for name in weights.keys():  # noqa: SIM118
                if not _finite(weights.get_tensor(name)):
                    raise ModelLoadError(
                        f"{file}: tensor {name} holds NaN or inf values, so the merged model "
                        "would output NaN; the adapter is damaged: use an earlier checkpoint"
                    )
    return config, owners


def check_adapter_loaded(model: Any, owners: Mapping[str, Path], folder: Path) -> None:
    """Check that the adapter's tensors are exactly the LoRA weights ``model`` (a
    ``PeftModel``) has: a tensor of no layer would be silently ignored, a layer without its
    tensors would keep its initialisation.

    Raises:
        ModelLoadError: the tensor names differ from the model's LoRA weights.
    """
    if not owners:  # pickled weights (opted in): peft's own load checked them
        return
    from peft import get_peft_model_state_dict

    # save_embedding_layers given: its default "auto" asks the hub for the base's config.json.
    # Without the embedding layers: what must be there; with them: what may be.
    needed = set(get_peft_model_state_dict(model, save_embedding_layers=False))
    allowed = set(get_peft_model_state_dict(model, save_embedding_layers=True))
    file = next(iter(owners.values()))
    unexpected = set(owners) - allowed
    if unexpected:
        raise ModelLoadError(
            f"{file}: tensor(s) {_names(unexpected)} match no LoRA layer that "
            f"{folder / 'adapter_config.json'} puts on the base model; the adapter was trained "
            "on another base model: point base_model_name_or_path at that one"
        )
    missing = needed - set(owners)
    if missing:
        raise ModelLoadError(
            f"{file} lacks tensor(s) {_names(missing)} of the LoRA layers that "
            f"{folder / 'adapter_config.json'} describes; the adapter is incomplete: save it "
            "again"
        )


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence ``transformers``' progress bars, load report and warnings for the block, so a
    refused load prints one line and a good one nothing; the checks here report instead."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


#: ``from_pretrained`` arguments of every load: no code from the model, all loading info.
SAFE_LOADING = {
    "trust_remote_code": False,
    "output_loading_info": True,
    "ignore_mismatched_sizes": True,
}


def guarded(what: str, fix: str, load: Callable[[], Any]) -> Any:
    """``load()``, any failure but a missing package or memory a one-line ModelLoadError."""
    try:
        return load()
    except (ImportError, MemoryError, ModelLoadError):
        raise
    except Exception as error:  # transformers raises OSError, ValueError, KeyError, ...
        raise ModelLoadError(
            f"{what} ({type(error).__name__}: {one_line(error, 300)}); {fix}"
        ) from None


def load_folder(folder: Path, *, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local model folder, offline, with no code from the folder
    (``trust_remote_code=False``), checked before and after ``from_pretrained``.

    Args:
        folder: The folder ``save_pretrained`` wrote.
        dtype: Optional torch dtype of the weights (``None``: the checkpoint's).

    Raises:
        ModelLoadError: the folder is refused (:func:`check_model_dir`, :func:`check_loaded`)
            or ``transformers`` fails on it (an unknown ``model_type``, no tokenizer files).
        ImportError: ``transformers`` needs a package that is not installed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    owners = check_model_dir(folder)
    kwargs = {} if dtype is None else {"dtype": dtype}
    # Pickled weights only with the opt-in, and then only if no safetensors file is there.
    kwargs["use_safetensors"] = None if not owners and pickle_allowed() else True
    offline = {"local_files_only": True}
    with quiet_loading():
        model, info = guarded(
            f"{folder} does not load as a causal language model",
            "check that config.json's model_type is one this transformers supports and that "
            "the folder is complete",
            lambda: AutoModelForCausalLM.from_pretrained(
                folder, **SAFE_LOADING, **offline, **kwargs
            ),
        )
        check_loaded(model, info, owners, folder)
        tokenizer = guarded(
            f"The tokenizer in {folder} does not load",
            "the folder needs the tokenizer files save_pretrained writes (tokenizer.json, "
            "tokenizer_config.json)",
            lambda: AutoTokenizer.from_pretrained(folder, trust_remote_code=False, **offline),
        )
    return model, tokenizer
