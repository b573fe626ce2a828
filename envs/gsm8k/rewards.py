"""GSM8K reward terms: small pure functions, combined by the env as an explicit weighted sum.

``reward = correct_reward(answer, gold) + format_weight * format_reward(answer)``, where
``answer`` is :func:`textgym.envs.gsm8k.parsing.parse_final_answer` of the completion.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["correct_reward", "format_reward"]


def correct_reward(answer: Fraction | None, gold: Fraction) -> float:
    """1.0 if the parsed answer equals the gold answer exactly (as numbers), else 0.0.

    GSM8K's own metric: the final number is right or it is not (Cobbe et al., 2021).
    """
    return 1.0 if answer is not None and answer == gold else 0.0


def format_reward(answer: Fraction | None) -> float:
    """1.0 if a final answer was found and reads as a number, else 0.0 (before weighting)."""
    return 0.0 if answer is None else 1.0
