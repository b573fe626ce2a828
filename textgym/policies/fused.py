"""Fewer kernels per decode step for an inference-only copy of a causal LM.

A decode step at small batch is launch-bound: Gemma 3 270M runs about 1,650 kernels per step at
batch 1, and its 109 RMSNorms of about 10 kernels each are the largest share (issue 54). On a
model whose weights only the engine reads (the bfloat16 rollout copy of
:mod:`textgym.algos.rollout_weights`), :func:`fuse_for_decoding` rewrites three things in place:

* **Sibling projections**: ``q_proj``/``k_proj``/``v_proj`` of each attention and
  ``gate_proj``/``up_proj`` of each MLP become one matrix multiply over their concatenated
  weights; each sibling returns its slice of the output (a view, no copy).
* **RMSNorm** of the Gemma and Llama families becomes ``torch.nn.functional.rms_norm``
  (one fused kernel on CUDA), with Gemma's ``1 + weight`` scale computed once per weight
  version rather than at every call.

Written here because it is a few lines on modules this project already owns a copy of; a
library that patches whole model classes (``liger-kernel``) is CUDA-only and replaces the
training path as well.

The parameters stay where they were, with the same names, order and shapes: each sibling's
``weight`` is a view into the fused matrix, so writing it (``copy_`` at a rollout-weight
refresh, ``load_state_dict``) writes the fused weights. The rewritten model is for inference:
it keeps no autograd graph through the shared product and must not be trained.

Results equal the plain model's up to float rounding (the fused product's blocking may differ):
``tests/policies/test_fused.py`` holds logits and greedy tokens equal on the tiny Llama and a
tiny Gemma 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["FusionReport", "count_kernels", "fuse_for_decoding"]

#: RMSNorm classes by their scale convention: Gemma multiplies the float32 result by
#: ``1 + weight`` and then casts (transformers PR 29402); Llama casts first and multiplies by
#: ``weight``.
_GEMMA_NORMS = frozenset({"GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm"})
_LLAMA_NORMS = frozenset({"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"})
_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


@dataclass
class FusionReport:
    """What :func:`fuse_for_decoding` rewrote.

    Attributes:
        projection_groups: Groups of sibling projections now computed by one matrix multiply.
        norms: RMSNorm modules now computed by ``F.rms_norm``.
    """

    projection_groups: int = 0
    norms: int = 0


class _SharedProduct:
    """``x @ W_cat.T`` computed once for the siblings that read the same input tensor.

    The product is cached against the input's identity and version and dropped once every
    sibling has read it, so nothing outlives the forward pass; a sibling called with another
    input recomputes.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, readers: int) -> None:
        self.weight, self.bias, self.readers = weight, bias, readers
        self._key: tuple[int, int] | None = None
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None
        self._reads = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        key = (id(x), x._version)
        if self._input is not x or self._key != key:
            self._output = F.linear(x, self.weight, self.bias)
            self._input, self._key, self._reads = x, key, 0
        output = self._output
        self._reads += 1
        if self._reads >= self.readers:
            self._input = self._output = self._key = None
        return output


class _FusedPart(nn.Module):
    """One sibling projection: its slice of the shared product (a ``nn.Linear`` stand-in)."""

    def __init__(self, linear: nn.Linear, shared: _SharedProduct, start: int, stop: int):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.shared, self.start, self.stop = shared, start, stop
        self.weight = nn.Parameter(shared.weight[start:stop], requires_grad=False)
        bias = None if shared.bias is None else shared.bias[start:stop]
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(x)[..., self.start : self.stop]


class _FusedRMSNorm(nn.Module):
    """An RMSNorm of the Gemma (``1 + weight``, scale then cast) or Llama (cast then scale)
    convention as one ``F.rms_norm``."""

    def __init__(self, norm: nn.Module, gemma: bool):
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.eps if gemma else norm.variance_epsilon)
        self.gemma = gemma
        self._scale: torch.Tensor | None = None
        self._scale_key: tuple[int, int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        if not self.gemma:
            return self.weight * F.rms_norm(x.float(), shape, None, self.eps).to(x.dtype)
        key = (self.weight.data_ptr(), self.weight._version)
        if self._scale_key != key:
            self._scale = 1.0 + self.weight.float()
            self._scale_key = key
        return F.rms_norm(x.float(), shape, self._scale, self.eps).type_as(x)


def _fuse_siblings(parent: nn.Module, names: tuple[str, ...]) -> bool:
    parts = [getattr(parent, name, None) for name in names]
    if not all(type(p) is nn.Linear for p in parts):  # a LoRA layer or already fused: leave it
        return False
    if len({p.in_features for p in parts}) != 1 or len({p.bias is None for p in parts}) != 1:
        return False
    with torch.no_grad():
        weight = torch.cat([p.weight for p in parts])
        bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
    shared = _SharedProduct(weight, bias, readers=len(parts))
    start = 0
    for name, part in zip(names, parts, strict=True):
        setattr(parent, name, _FusedPart(part, shared, start, start + part.out_features))
        start += part.out_features
    return True


@torch.no_grad()
def fuse_for_decoding(model: nn.Module) -> FusionReport:
    """Rewrite ``model`` in place for fewer kernels per forward pass (module docstring).

    Args:
        model: An inference-only ``transformers`` causal LM (no LoRA layers: adapted
            projections are left as they are), on its final device and dtype.

    Returns:
        What was rewritten; an architecture with none of these modules is left unchanged.
    """
    report = FusionReport()
    for module in list(model.modules()):
        for names in _SIBLINGS:
            report.projection_groups += _fuse_siblings(module, names)
        for child_name, child in list(module.named_children()):
            kind = type(child).__name__
            if kind in _GEMMA_NORMS or kind in _LLAMA_NORMS:
                setattr(module, child_name, _FusedRMSNorm(child, gemma=kind in _GEMMA_NORMS))
                report.norms += 1
    return report


#: Operators that only make views, allocate or convert to the dtype a tensor has: not counted
#: as CPU kernels.
_NOT_KERNELS = frozenset(
    "aten::" + name
    for name in [
        "to",
        "_to_copy",
        "type_as",
        "as_strided",
        "empty_strided",
        "empty",
        "empty_like",
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "reshape",
        "alias",
        "resolve_conj",
        "resolve_neg",
        "result_type",
        "lift_fresh",
        "detach",
        "detach_",
        "t",
        "transpose",
        "expand",
        "expand_as",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "permute",
        "contiguous",
        "split",
        "narrow",
        "unflatten",
        "flatten",
        "view_as",
        "matmul",
        "linear",
        "dropout",
        "resize_",
    ]
)


def _is_kernel(event: Any) -> bool:
    return event.name.startswith("aten::") and event.name not in _NOT_KERNELS


def _computes_below(event: Any) -> bool:
    return any(_is_kernel(c) or _computes_below(c) for c in event.cpu_children)


def count_kernels(run: Any) -> int:
    """Kernels one call of ``run()`` launches, as ``torch.profiler`` records them.

    On CUDA: the CUDA kernels. On the CPU, which has no kernels as such: the innermost ``aten``
    operators that compute (an operator none of whose callees computes), leaving out views,
    allocations and conversions to the dtype a tensor already has, so a no-op ``.to()`` is
    not counted and a ``linear`` counts as its ``mm``.
    """
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    events = prof.events()
    cuda = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    if cuda:
        return len(cuda)
    return sum(1 for e in events if _is_kernel(e) and not _computes_below(e))
