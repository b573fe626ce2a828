"""Prioritised opponent sampling for GRPO: each group's opponent style drawn by how often the
policy has been losing to it lately.

The tic-tac-toe env takes a list of opponent styles (``env_kwargs={"opponent": [...]}``) and
``reset(options={"opponent": style})``. With ``opponent_priority="loss"`` the trainer draws one
style per group (the group's episodes share it, as they share the seed) with probability
proportional to ``floor + loss rate``, the loss rate measured on the policy's own training
episodes against that style: an exponential moving average of losses and games per style
(``decay`` per step, so about the last ``1 / (1 - decay)`` steps count), with a prior of half a
loss in one game, so a style not played yet weighs as a coin flip. This is prioritised
fictitious self-play's "hard" weighting (Vinyals et al., 2019, *Grandmaster level in StarCraft
II*; there ``(1 - P[win])^p`` over past agents), here over scripted styles, measured at every
step from the rollouts the step already played (no extra games). ``floor`` keeps every style in
the mix, so a style the policy has stopped losing to is still checked.

:class:`OpponentLeague` is small state a checkpoint keeps (``state_dict``), so a resumed run
draws what an uninterrupted one would.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpponentLeague"]

#: The prior of each style's loss rate: ``PRIOR_LOSSES`` losses in ``PRIOR_GAMES`` games.
PRIOR_LOSSES, PRIOR_GAMES = 0.5, 1.0


@dataclass
class OpponentLeague:
    """The styles, their discounted loss and game counts, and the draw.

    Attributes:
        styles: The env's opponent styles, in the order given (repeats are merged).
        floor: Added to every loss rate before normalising, > 0.
        decay: Per-step discount of the counts, in (0, 1].
        losses: Discounted losses per style, ``[len(styles)]``.
        games: Discounted games per style, ``[len(styles)]``.
    """

    styles: tuple[str, ...]
    floor: float = 0.05
    decay: float = 0.9
    losses: list[float] = field(default_factory=list)
    games: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.styles = tuple(dict.fromkeys(self.styles))
        if len(self.styles) < 2:
            raise ValueError(
                f"A prioritised league needs at least two opponent styles, got {self.styles}"
            )
        if self.floor <= 0 or not 0 < self.decay <= 1:
            raise ValueError(
                f"Expected floor > 0 and decay in (0, 1], got {self.floor}, {self.decay}"
            )
        self.losses = self.losses or [0.0] * len(self.styles)
        self.games = self.games or [0.0] * len(self.styles)

    def loss_rates(self) -> list[float]:
        """The smoothed loss rate against each style, ``[len(styles)]`` in [0, 1]."""
        return [
            (loss + PRIOR_LOSSES) / (games + PRIOR_GAMES)
            for loss, games in zip(self.losses, self.games, strict=True)
        ]

    def probabilities(self) -> list[float]:
        """The draw's probability of each style, ``[len(styles)]``, summing to 1."""
        weights = [self.floor + rate for rate in self.loss_rates()]
        total = sum(weights)
        return [w / total for w in weights]

    def draw(self, groups: int, seed: str) -> list[str]:
        """One style per group, drawn with :meth:`probabilities` from a generator seeded by
        ``seed`` (the same on every rank, so ranks agree without talking)."""
        return random.Random(seed).choices(self.styles, weights=self.probabilities(), k=groups)

    def counts(self, styles: Sequence[str], outcomes: Sequence[str | None]) -> list[float]:
        """The losses then the games per style of one step's episodes, ``[2 x len(styles)]``
        (summed over ranks before :meth:`add`): ``styles[i]`` the style episode ``i`` played,
        ``outcomes[i]`` its outcome (``"loss"`` counts; a win, a draw or an unfinished episode
        does not).

        Raises:
            ValueError: a style outside the league, or lengths that differ.
        """
        if len(styles) != len(outcomes):
            raise ValueError(f"Expected one outcome per episode, got {len(outcomes)}")
        index = {style: i for i, style in enumerate(self.styles)}
        unknown = sorted(set(styles) - set(index))
        if unknown:
            raise ValueError(f"Styles {unknown} are not in the league {self.styles}")
        n = len(self.styles)
        counts = [0.0] * (2 * n)
        for style, outcome in zip(styles, outcomes, strict=True):
            counts[index[style]] += outcome == "loss"
            counts[n + index[style]] += 1.0
        return counts

    def add(self, counts: Sequence[float]) -> None:
        """One step: discount the counts by ``decay``, then add :meth:`counts`' figures."""
        n = len(self.styles)
        self.losses = [self.decay * v + c for v, c in zip(self.losses, counts[:n], strict=True)]
        self.games = [self.decay * v + c for v, c in zip(self.games, counts[n:], strict=True)]

    def metrics(self) -> dict[str, float]:
        """``league_p/STYLE`` (the draw's probability) and ``league_loss/STYLE`` (the smoothed
        loss rate) per style, for ``metrics.jsonl``."""
        rates = dict(zip(self.styles, self.loss_rates(), strict=True))
        probabilities = dict(zip(self.styles, self.probabilities(), strict=True))
        return {f"league_p/{s}": probabilities[s] for s in self.styles} | {
            f"league_loss/{s}": rates[s] for s in self.styles
        }

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the styles and the counts."""
        return {"styles": list(self.styles), "losses": self.losses, "games": self.games}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: the checkpoint's league has other styles.
        """
        if tuple(state["styles"]) != self.styles:
            raise ValueError(
                f"The checkpoint's league has styles {state['styles']}, this run {self.styles}"
            )
        self.losses, self.games = list(state["losses"]), list(state["games"])
