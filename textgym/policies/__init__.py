"""Policies: scripted experts, gold answers, local Hugging Face models, OpenAI-compatible
endpoints, a human at the terminal.

:func:`make_policy` builds one by name; see :class:`Policy` for the protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textgym.policies.base import Completion, Message, Policy, conversation_start
from textgym.policies.gold import GoldPolicy
from textgym.policies.scripted import MinimaxPolicy, RandomPolicy

__all__ = [
    "POLICY_NAMES",
    "Completion",
    "GoldPolicy",
    "Message",
    "MinimaxPolicy",
    "Policy",
    "RandomPolicy",
    "conversation_start",
    "make_policy",
]


def _hf(**kwargs: Any) -> Policy:
    from textgym.policies.hf import HFPolicy  # torch/transformers only when asked for

    return HFPolicy.from_name(**kwargs)


def _openai(**kwargs: Any) -> Policy:
    from textgym.policies.openai_compat import OpenAIPolicy  # the openai client only when asked for

    return OpenAIPolicy(**kwargs)


def _human(**kwargs: Any) -> Policy:
    from textgym.policies.human import HumanPolicy

    return HumanPolicy(**kwargs)


_FACTORIES: dict[str, Callable[..., Policy]] = {
    "random": RandomPolicy,
    "minimax": MinimaxPolicy,
    "gold": GoldPolicy,
    "hf": _hf,
    "openai": _openai,
    "human": _human,
}
POLICY_NAMES = tuple(_FACTORIES)


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a policy by name: ``random``, ``minimax``, ``gold``, ``hf``, ``openai`` or ``human``.

    Raises:
        ValueError: for an unknown name.
    """
    if name not in _FACTORIES:
        raise ValueError(f"Unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
    return _FACTORIES[name](**kwargs)
