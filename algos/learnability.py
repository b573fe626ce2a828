"""Why a GRPO step does not learn, in one line: a small table of rules from a step's metrics
row to the knob worth turning.

GRPO learns only from groups whose episodes earned different rewards (a group of equal rewards
has zero advantage everywhere). When most groups are flat the cause is usually one of a few
measured states, and each has its remedy:

========================================  =====================================================
measured state                            hint
========================================  =====================================================
invalid-action rate >= 50%                SFT first (``textgym sft``) or a format reward
every episode returned 0 (or less)        too hard for this policy: SFT warm-up, an easier
                                          setting
every episode returned the same value     nothing to compare: an easier or harder setting, a
                                          reward with more resolution
per-token entropy < 0.1 nats              samples are near copies: raise ``--temperature``
groups flat, the batch's rewards mixed    larger ``--group-size``, higher ``--temperature``,
                                          ``--dynamic-sampling-rounds``, or (an env with an
                                          expert) ``--expert-guidance``
========================================  =====================================================

The rules apply to a step whose update was skipped (every group flat) or whose share of flat
groups is at least :data:`FLAT_SHARE`; they run in the order above and the first that matches
gives the hint. :func:`learnability_hint` is pure: the trainer prints its line after the step's
progress line (:func:`textgym.algos.grpo.train`) and ``textgym train --dry-run`` prints it after
one step's rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FLAT_SHARE",
    "INVALID_RATE",
    "LOW_ENTROPY",
    "hint_rule",
    "learnability_hint",
    "member_hint_rules",
]

#: Share of zero-variance groups from which a step counts as barely learning.
FLAT_SHARE = 0.75
#: Invalid-action rate from which the policy is said to rarely act validly.
INVALID_RATE = 0.5
#: Per-token entropy (nats) below which the samples of a group are near copies.
LOW_ENTROPY = 0.1


def _number(row: Mapping[str, Any], key: str) -> float:
    """``row[key]`` as a float; NaN when missing, null or not a number."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _entropy(row: Mapping[str, Any]) -> float:
    """The update's per-token entropy, else the sampler's estimate (``sampled_entropy``: the
    update measures none when it is skipped)."""
    entropy = _number(row, "entropy")
    return entropy if math.isfinite(entropy) else _number(row, "sampled_entropy")


def hint_rule(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """The rule that matches a step's metrics row and its hint, ``(rule, hint)``, or ``None``.

    Args:
        row: A GRPO step's metrics (a ``metrics.jsonl`` train row): ``skipped_update``,
            ``zero_variance_fraction``, ``reward_mean``, ``reward_std``, ``invalid_rate``,
            ``entropy`` or ``sampled_entropy``; missing or null values match no rule that
            needs them.

    Returns:
        The rule's name (``"invalid"``, ``"all_zero"``, ``"all_equal"``, ``"low_entropy"``,
        ``"flat_groups"``) and the line to print; ``None`` when the step learns (an update ran
        on more than a quarter of the groups) or no rule matches.
    """
    flat = _number(row, "zero_variance_fraction")
    skipped = row.get("skipped_update") == 1.0
    if not skipped and not flat >= FLAT_SHARE:
        return None
    share = 1.0 if skipped else flat
    state = f"{share:.0%} of groups had equal rewards"
    invalid = _number(row, "invalid_rate")
    if invalid >= INVALID_RATE:
        return "invalid", (
            f"{state} and {invalid:.0%} of actions were invalid: the policy rarely acts "
            "validly; SFT first (textgym sft) or add a format reward (--wrappers format_reward)"
        )
    mean, spread = _number(row, "reward_mean"), _number(row, "reward_std")
    if spread == 0.0 and mean <= 0.0:
        return "all_zero", (
            f"{state}: every episode returned {mean:g}, the task is too hard for this policy; "
            "SFT warm-up (textgym sft) or an easier setting (e.g. a weaker opponent)"
        )
    if spread == 0.0:
        return "all_equal", (
            f"{state}: every episode returned {mean:g}, nothing to compare; an easier or "
            "harder setting, or a reward with more resolution (e.g. --wrappers format_reward)"
        )
    entropy = _entropy(row)
    if entropy < LOW_ENTROPY:
        return "low_entropy", (
            f"{state} and the policy's entropy is {entropy:.3g} nats/token: a group's samples "
            "are near copies; raise --temperature"
        )
    if spread > 0.0:
        return "flat_groups", (
            f"{state} though the batch's rewards differ (std {spread:.3g}): larger "
            "--group-size, higher --temperature, or --dynamic-sampling-rounds to fill the "
            "batch with groups that differ; where the env has an expert, --expert-guidance 1 "
            "shows one better episode in each flat group"
        )
    return None


def member_hint_rules(row: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The rule and hint of each mixture member (``textgym/Mixture-v0``) whose own episodes
    in a step barely learn, by member name.

    A member is judged on its own metrics (:func:`textgym.algos.grpo_rollouts.member_metrics`:
    ``NAME/flat_group_rate``, ``NAME/reward_mean``, ``NAME/reward_std``,
    ``NAME/invalid_rate``) by the rules of :func:`hint_rule`, so one task stuck at zero is
    named even while the others keep the step learning. Entropy is not measured per member,
    so the low-entropy rule never matches here.
    """
    rules = {}
    for key in row:
        if not key.endswith("/flat_group_rate"):
            continue
        name = key.removesuffix("/flat_group_rate")
        member = {
            "zero_variance_fraction": row[key],
            **{k: row.get(f"{name}/{k}") for k in ("reward_mean", "reward_std", "invalid_rate")},
        }
        rule = hint_rule(member)
        if rule is not None:
            rules[name] = rule
    return rules


def learnability_hint(row: Mapping[str, Any]) -> str | None:
    """The hint of :func:`hint_rule` for a step's metrics row, or ``None``.

    Example:
        >>> learnability_hint({"skipped_update": 1.0, "invalid_rate": 0.92, "reward_std": 0.0})
        ... # doctest: +ELLIPSIS
        '100% of groups had equal rewards and 92% of actions were invalid: ...'
        >>> learnability_hint({"skipped_update": 0.0, "zero_variance_fraction": 0.25}) is None
        True
    """
    rule = hint_rule(row)
    return None if rule is None else rule[1]
