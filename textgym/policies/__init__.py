"""Policies: the random baseline, gold answers, local Hugging Face models, OpenAI-compatible
endpoints, a human at the terminal.

See :class:`Policy` for the protocol and :mod:`textgym.types` for the messages and completions
it exchanges. The name table (:func:`textgym.builder.make_policy`) is in
the assembly layer, beside the env-specific experts (:class:`textgym.envs.tictactoe.MinimaxPolicy`).
"""

from __future__ import annotations

from textgym.policies.base import Policy, conversation_start
from textgym.policies.gold import GoldPolicy
from textgym.policies.scripted import RandomPolicy

__all__ = [
    "GoldPolicy",
    "Policy",
    "RandomPolicy",
    "conversation_start",
]
