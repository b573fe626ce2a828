"""Fold a chain of LoRA adapters into one adapter on the chain's base, optionally truncated.

An adapter saved by ``textgym`` records its base in ``base_model_name_or_path``, which may
itself be an adapter (the GRPO adapter trained on the SFT one, see
:func:`textgym.models.adapter_base`), and :func:`textgym.models.load_model` merges the chain one
adapter at a time. Merging adds ``s_i B_i A_i`` (``s_i = lora_alpha / r``, ``B_i`` ``[out, r_i]``,
``A_i`` ``[r_i, in]``) to each wrapped linear layer's weight, so the whole chain adds

    dW = sum_i s_i B_i A_i = [s_1 B_1, ..., s_n B_n] @ [A_1; ...; A_n]

to each layer: exactly one LoRA adapter of rank ``sum_i r_i`` on the chain's base. Per layer
this tool writes that product in the SVD form ``dW = U S V^T`` computed from thin QR
factorisations of the two factors (never forming ``dW``), as ``B = U sqrt(S)``, ``A = sqrt(S)
V^T`` with ``lora_alpha = r`` (scaling 1); ``--rank r`` keeps the ``r`` largest singular values,
the best rank-``r`` approximation in the Frobenius norm (Eckart-Young). The factors are written
in ``--dtype`` (bfloat16 by default: half the bytes of float32; splitting ``S`` evenly between
the factors keeps their rounding balanced).

Run: ``python tools/compress_adapter.py ADAPTER OUTPUT [--rank R] [--dtype bfloat16]``. It prints
a JSON summary: the chain, the rank, the bytes written and per-layer relative Frobenius errors
of the written delta against the exact one (computed in float64 before the cast to ``--dtype``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import tyro
from safetensors.torch import load_file, save_file

from textgym.cli.usage import script_config
from textgym.model_files import ADAPTER_CONFIG
from textgym.models import MODEL_NAMES, adapter_base

__all__ = ["adapter_chain", "cast_adapter", "fold_chain", "write_adapter", "main"]

WEIGHTS = "adapter_model.safetensors"
#: Longest chain followed, as in textgym.models (a guard against a cycle of relative paths).
MAX_DEPTH = 8
_A, _B = ".lora_A.weight", ".lora_B.weight"


def _config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f"Expected {path / ADAPTER_CONFIG} to be a JSON LoRA config ({error})"
        ) from error
    unsupported = {
        "peft_type": config.get("peft_type") != "LORA",
        "use_dora": bool(config.get("use_dora")),
        "use_rslora": bool(config.get("use_rslora")),
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "bias": config.get("bias", "none") != "none",
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
    }
    bad = [key for key, flag in unsupported.items() if flag]
    if bad:
        raise ValueError(
            f"Expected a plain LoRA adapter in {path} (one rank and alpha, no DoRA, rsLoRA, bias "
            f"or saved modules), got {', '.join(f'{k}={config.get(k)!r}' for k in bad)}"
        )
    return config


def adapter_chain(
    adapter: str | os.PathLike[str], onto: str | os.PathLike[str] | None = None
) -> tuple[list[Path], str]:
    """The adapters from the chain's root (or from above ``onto``) to ``adapter``, and their base.

    Bases resolve as in :func:`textgym.models.load_model`: a built-in model name stops the
    chain, a relative path is taken beside the adapter directory that records it. ``onto``, an
    adapter directory in the chain, stops it there: the adapters above it are returned and
    ``onto`` is their base (to fold only the adapters trained on top of it).

    Returns:
        ``(chain, base)``: adapter directories, the one trained on the base first, and the base
        (a name of :data:`textgym.models.MODEL_NAMES`, a Hugging Face id, or a directory path).

    Raises:
        ValueError: an adapter config that is missing, not plain LoRA, names no base; a chain
            longer than :data:`MAX_DEPTH`; ``onto`` not below ``adapter`` in the chain.
    """
    chain, path = [], Path(adapter)
    stop = None if onto is None else Path(onto).resolve()
    if stop == path.resolve():
        raise ValueError(f"Expected onto to be an adapter below {adapter} in its chain, got itself")
    while True:
        if len(chain) >= MAX_DEPTH:
            raise ValueError(f"Expected at most {MAX_DEPTH} chained adapters from {adapter}")
        base = _config(path).get("base_model_name_or_path")
        if not isinstance(base, str) or not base:
            raise ValueError(f"{path / ADAPTER_CONFIG} names no base model")
        chain.append(path)
        beside = path / base
        if stop is not None and beside.exists() and beside.resolve() == stop:
            return chain[::-1], os.path.normpath(beside)
        if base in MODEL_NAMES or Path(base).is_absolute() or not beside.exists():
            if stop is not None:
                raise ValueError(f"Expected {onto} in the chain below {adapter}; it ends at {base}")
            return chain[::-1], base
        if not (beside / ADAPTER_CONFIG).is_file():  # a full model directory
            return chain[::-1], os.path.normpath(beside)
        path = Path(os.path.normpath(beside))


def fold_chain(chain: list[Path], rank: int | None = None) -> tuple[dict[str, Any], dict]:
    """Fold the adapters' deltas per layer into one SVD-form LoRA pair, keeping ``rank``.

    Args:
        chain: Adapter directories (peft ``save_pretrained``), all on the same layers or not.
        rank: Rank to keep per layer (``None``: all, ``sum_i r_i``; the fold is then exact).

    Returns:
        ``(tensors, errors)``: ``{"<module>.lora_A.weight": [r, in], "<module>.lora_B.weight":
        [out, r]}`` float64 tensors (scaling 1), and per module the relative Frobenius error
        ``||dW - dW_r|| / ||dW||`` of the kept rank (0 when nothing is cut).

    Raises:
        ValueError: ``rank`` below 1.
    """
    if rank is not None and rank < 1:
        raise ValueError(f"Expected a rank >= 1, got {rank}")
    factors: dict[str, tuple[list, list]] = {}
    for path in chain:
        config = _config(path)
        scaling = float(config["lora_alpha"]) / float(config["r"])
        tensors = load_file(path / WEIGHTS)
        for key, a in tensors.items():
            if key.endswith(_A):
                module = key.removesuffix(_A)
                b = tensors[module + _B]
                pair = factors.setdefault(module, ([], []))
                pair[0].append(a.double())  # [r_i, in]
                pair[1].append(b.double() * scaling)  # [out, r_i]
    out: dict[str, Any] = {}
    errors: dict[str, float] = {}
    for module, (a_list, b_list) in sorted(factors.items()):
        a, b = torch.cat(a_list), torch.cat(b_list, 1)  # [R, in], [out, R]
        q_b, r_b = torch.linalg.qr(b)  # [out, R], [R, R]
        q_a, r_a = torch.linalg.qr(a.T)  # [in, R], [R, R]
        u, s, vh = torch.linalg.svd(r_b @ r_a.T)  # dW = (q_b u) diag(s) (q_a vh^T)^T
        keep = len(s) if rank is None else min(rank, len(s))
        root = s[:keep].sqrt()
        out[module + _B] = (q_b @ u[:, :keep]) * root  # [out, keep]
        out[module + _A] = root[:, None] * (vh[:keep] @ q_a.T)  # [keep, in]
        total = float(s.square().sum())
        errors[module] = (float(s[keep:].square().sum()) / total) ** 0.5 if total else 0.0
    return out, errors


def _save(output: Path, tensors: dict[str, Any], config: dict[str, Any], dtype: Any) -> Path:
    """Write the weights, then the config, each replaced in one step; other files stay."""
    output.mkdir(parents=True, exist_ok=True)
    staged = output / f".{WEIGHTS}.tmp"
    save_file({k: t.to(dtype).contiguous() for k, t in tensors.items()}, staged)
    staged.chmod(0o644)
    os.replace(staged, output / WEIGHTS)
    staged = output / f".{ADAPTER_CONFIG}.tmp"
    staged.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    os.replace(staged, output / ADAPTER_CONFIG)
    return output


def write_adapter(
    tensors: dict[str, Any],
    output: str | os.PathLike[str],
    *,
    template: dict[str, Any],
    base: str,
    dtype: torch.dtype,
) -> Path:
    """Write ``tensors`` in ``dtype`` as a peft LoRA adapter on ``base`` in ``output``.

    ``template`` is the last adapter's config; ``r`` and ``lora_alpha`` become the folded rank
    (scaling 1), ``target_modules`` the layers written, ``base_model_name_or_path`` the base
    (a directory recorded relative to ``output``, as :func:`textgym.models.adapter_base` does).
    """
    output = Path(output)
    ranks = {t.shape[0] for k, t in tensors.items() if k.endswith(_A)}
    if len(ranks) != 1:
        raise ValueError(f"Expected one rank over all layers, got {sorted(ranks)}")
    (rank,) = ranks
    config = dict(template)
    config.update(
        r=rank,
        lora_alpha=rank,
        target_modules=sorted({k.removesuffix(_A).rsplit(".", 1)[-1] for k in tensors if _A in k}),
        base_model_name_or_path=(
            base if base in MODEL_NAMES or not Path(base).is_dir() else adapter_base(base, output)
        ),
        inference_mode=True,
    )
    return _save(output, tensors, config, dtype)


def cast_adapter(
    adapter: str | os.PathLike[str], output: str | os.PathLike[str], dtype: torch.dtype
) -> Path:
    """Write one adapter's own factors and config unchanged but for the tensors' ``dtype``.

    ``output`` may be ``adapter``; a relative base is recorded for ``output``'s place.
    """
    adapter, output = Path(adapter), Path(output)
    config = _config(adapter)
    base = config["base_model_name_or_path"]
    if base not in MODEL_NAMES and (adapter / base).is_dir():
        config["base_model_name_or_path"] = adapter_base(str(adapter / base), output)
    return _save(output, load_file(adapter / WEIGHTS), config, dtype)


@dataclass
class Config:
    """The command line of this tool."""

    adapter: tyro.conf.Positional[str]
    """The last adapter of the chain."""
    output: tyro.conf.Positional[str]
    """The directory to write the folded adapter to."""
    onto: str | None = None
    """Fold only the adapters above this one (default: all)."""
    rank: int | None = None
    """The rank kept (default: all)."""
    cast_only: bool = False
    """Write ADAPTER's own factors in --dtype, no fold (ADAPTER alone, no --rank/--onto)."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """The factors' dtype."""

    def __post_init__(self) -> None:
        if self.cast_only and (self.rank is not None or self.onto is not None):
            raise ValueError("--cast-only writes one adapter as it is: drop --rank and --onto")


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "compress_adapter.py", __doc__)
    if args.cast_only:
        written = cast_adapter(args.adapter, args.output, getattr(torch, args.dtype))
        print(
            json.dumps(
                {
                    "cast": args.adapter,
                    "dtype": args.dtype,
                    "bytes": (written / WEIGHTS).stat().st_size,
                }
            )
        )
        return 0
    try:
        chain, base = adapter_chain(args.adapter, args.onto)
        tensors, errors = fold_chain(chain, args.rank)
        # Resolve a directory base before the chain's own directory might be replaced.
        base = (
            str(Path(base).resolve()) if base not in MODEL_NAMES and Path(base).is_dir() else base
        )
        template = _config(chain[-1])
        source_ranks = [int(_config(p)["r"]) for p in chain]
        written = write_adapter(
            tensors, args.output, template=template, base=base, dtype=getattr(torch, args.dtype)
        )
    except ValueError as error:
        print(f"compress_adapter: error: {error}", file=sys.stderr)
        return 2
    values = sorted(errors.values())
    summary = {
        "chain": [str(p) for p in chain],
        "base": base,
        "rank": next(t.shape[0] for k, t in tensors.items() if k.endswith(_A)),
        "source_ranks": source_ranks,
        "dtype": args.dtype,
        "bytes": (written / WEIGHTS).stat().st_size,
        "relative_frobenius_error": {
            "mean": sum(values) / len(values),
            "median": values[len(values) // 2],
            "max": values[-1],
        },
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
