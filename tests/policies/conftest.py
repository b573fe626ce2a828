"""Fixtures shared by the local-model policy tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sharp():
    """The tiny model with weights ~N(0, 0.5): greedy outputs depend on the prompt.

    With the default init (std 0.02) every prompt greedily yields the same token, which would
    make batched-vs-single comparisons vacuous.
    """
    torch = pytest.importorskip("torch")
    from textgym.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model, tokenizer
