"""DAPO's dynamic sampling: a step's batch filled with groups whose rewards differ.

A group whose ``G`` episodes all earn the same reward has zero advantage everywhere and gives
no gradient. When most groups are like that (a policy that wins or draws every game of a group,
docs/mastery_study.md measured 70-88% of tic-tac-toe groups), the step learns from the one or
two groups left. Dynamic sampling (Yu et al. 2025, *DAPO*, section 3.2) plays more groups until
the batch holds ``M`` informative ones, so every update has a full batch of signal.

:func:`sample_groups` plays the step's ``M`` groups, then up to ``dynamic_sampling_rounds``
more rounds of ``M`` groups while fewer than ``M`` informative groups have been found. The
update's batch keeps the first ``M`` informative groups and fills any shortfall with flat ones
(their advantages are zero, so they change nothing but keep the batch at ``M x G`` episodes),
in the order they were played. Extra rounds draw their tasks from their own band of seeds
(:func:`round_seed`), so they never replay a task of another step. A step plays at most
:data:`MAX_DYNAMIC_SAMPLING_ROUNDS` extra rounds, and the trainer's ``check`` runs before each
one, so a Ctrl-C, a SIGTERM or the time limit ends the sampling within one round.

Of the episodes that cannot enter the batch (past the first ``M`` informative and the first
``M`` flat groups), only what the step's metrics read is kept (:func:`_light`): their prompts,
messages and prompt log-probs went with every round, and a long step's memory grew with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from textgym.algos.advantages import zero_variance_groups
from textgym.rollout import Trajectory

__all__ = [
    "EXTRA_ROUND_SEEDS",
    "MAX_DYNAMIC_SAMPLING_ROUNDS",
    "SampledGroups",
    "round_seed",
    "sample_groups",
]

#: Offset, inside a run's band of ``10**6`` task seeds (``seed * 10**6``), of the extra rounds'
#: tasks; a run's own steps use the seeds below it.
EXTRA_ROUND_SEEDS = 500_000

#: Most extra rounds a step may play (``dynamic_sampling_rounds``): a step then plays up to
#: 101 times its groups. DAPO's recipe caps its generation batches at 10 per step; past this
#: many rounds a policy whose groups are all flat needs another task or temperature, not more
#: rounds.
MAX_DYNAMIC_SAMPLING_ROUNDS = 100


def round_seed(seed: int, step: int, round_: int, groups: int, rounds: int) -> int:
    """The first task seed of rollout round ``round_`` of step ``step`` (both from 0).

    Round 0 is the step's own tasks, ``seed * 10**6 + step * groups``; extra round ``r >= 1``
    takes ``groups`` seeds from ``seed * 10**6 + EXTRA_ROUND_SEEDS + (step * rounds + r - 1) *
    groups``.

    Args:
        seed: The run's seed.
        step: The step, from 0.
        round_: The rollout round of the step, ``0 <= round_ <= rounds``.
        groups: Groups per round, ``M``.
        rounds: Extra rounds a step may play (``dynamic_sampling_rounds``).
    """
    if round_ == 0:
        return seed * 10**6 + step * groups
    return seed * 10**6 + EXTRA_ROUND_SEEDS + (step * rounds + round_ - 1) * groups


@dataclass(frozen=True)
class SampledGroups:
    """One step's rollouts under dynamic sampling.

    Attributes:
        played: Every episode played this step, round after round (``R x M x G``).
        opponents: The opponent style of each played group, or ``None`` (no league).
        batch: The update's ``M x G`` episodes: the first ``M`` informative groups played and,
            for any shortfall, the first flat ones, in play order.
        rounds: Rollout rounds played, ``R`` (1: the step's own groups sufficed).
        informative: Groups with unequal rewards among those played.
    """

    played: list[Trajectory]
    opponents: list[str] | None
    batch: list[Trajectory]
    rounds: int
    informative: int

    def metrics(self, group_size: int) -> dict[str, float]:
        """``rollout_rounds``, ``groups_played`` and ``zero_variance_fraction_played`` (the
        share of flat groups among all played; the update's ``zero_variance_fraction`` is the
        batch's)."""
        groups = len(self.played) // group_size
        return {
            "rollout_rounds": float(self.rounds),
            "groups_played": float(groups),
            "zero_variance_fraction_played": 1.0 - self.informative / groups,
        }


def sample_groups(
    play: Callable[[int], tuple[list[Trajectory], list[str] | None]],
    groups: int,
    group_size: int,
    rounds: int,
    *,
    check: Callable[[], None] | None = None,
) -> SampledGroups:
    """Play round 0, then up to ``rounds`` extra rounds until ``groups`` informative groups.

    Args:
        play: ``play(r)`` plays round ``r``: ``groups x group_size`` episodes, consecutive
            runs of ``group_size`` forming a group, and each group's opponent style (or
            ``None``).
        groups: Groups per round and in the batch, ``M >= 1``.
        group_size: Episodes per group, ``G >= 2``.
        rounds: Most extra rounds, ``>= 0`` (0: only round 0, whatever its groups).
        check: Called before each extra round; what it raises (the trainer's stop on a
            Ctrl-C or the time limit) ends the sampling and goes to the caller.

    Raises:
        ValueError: a round that is not ``groups x group_size`` episodes, or whose opponents
            are not one per group; an episode return that is NaN or infinite (from
            :func:`~textgym.algos.advantages.zero_variance_groups`).
    """
    played: list[Trajectory] = []
    opponents: list[str] = []
    with_league = False
    informative: list[int] = []
    flat: list[int] = []
    played_rounds = 0
    while played_rounds <= rounds and (played_rounds == 0 or len(informative) < groups):
        if played_rounds and check is not None:
            check()
        episodes, styles = play(played_rounds)
        if len(episodes) != groups * group_size or (styles is not None and len(styles) != groups):
            raise ValueError(
                f"Expected round {played_rounds} to play {groups} groups of {group_size} "
                f"episodes with one opponent each, got {len(episodes)} episodes and "
                f"{None if styles is None else len(styles)} opponents"
            )
        episodes = list(episodes)  # its flat or surplus groups are made light below
        returns = torch.tensor([t.episode_return for t in episodes], dtype=torch.float64)
        first = len(played) // group_size
        for g, is_flat in enumerate(zero_variance_groups(returns, group_size).tolist()):
            kind = flat if is_flat else informative
            kind.append(first + g)
            if len(kind) > groups:  # never in the batch: keep what the metrics read
                for i in range(g * group_size, (g + 1) * group_size):
                    episodes[i] = _light(episodes[i])
        played += episodes
        with_league = styles is not None
        opponents += styles or []
        played_rounds += 1
    chosen = sorted(informative[:groups] + flat[: max(0, groups - len(informative))])
    batch = [t for g in chosen for t in played[g * group_size : (g + 1) * group_size]]
    return SampledGroups(
        played=played,
        opponents=opponents if with_league else None,
        batch=batch,
        rounds=played_rounds,
        informative=len(informative),
    )


def _light(episode: Trajectory) -> Trajectory:
    """``episode`` without what no metric of the step reads: its messages, prompt and
    environment tokens (the generated tokens' log-probs stay, with a loss mask of ones, so
    ``sampled_entropy`` and ``completion_tokens_mean`` are the same numbers). Anything other
    than a :class:`~textgym.rollout.Trajectory` is returned as it is."""
    if not isinstance(episode, Trajectory):
        return episode
    generated = [lp for lp, m in zip(episode.token_logprobs, episode.loss_mask) if m]
    return dataclasses.replace(
        episode, messages=[], token_ids=[], token_logprobs=generated, loss_mask=[1] * len(generated)
    )
