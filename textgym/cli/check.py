"""``textgym check``: the env quality card of ``ENV_ID [--env-kwargs JSON]``, or of ``--all``.

For each env, one row of a table (the checks, the oracle's mean return against the maximum, the
empty, no-op and random floors with their standard errors, leakage) and a JSON card
(:func:`textgym.card.env_card`, which lists what each section checks). ``--all`` checks every
registered id (textgym's and those of installed packages); ``--output FILE`` writes the cards
as one JSON object ``{"cards": [...]}`` in one step, refusing a file that holds something
unless ``--overwrite``.

Exit code 0 when every card passes, 1 when any section of any card fails (its row says which),
2 for a bad use (an unknown id, ``--env-kwargs`` with ``--all``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import tyro

from textgym.checks import check_seed, one_line
from textgym.errors import UsageError

__all__ = ["CheckConfig", "card_row", "run"]


@dataclasses.dataclass(kw_only=True)
class CheckConfig:
    """Check envs: determinism, spaces, hostile actions, the oracle against the maximum, the
    empty / no-op / random floors with standard errors, and answer leakage; a table and a JSON
    card per env."""

    env_ids: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="ENV_ID")] = ()
    """The env ids to check, space-separated (a registered id, 'module:EnvName-v0', or an id
    an installed package registers); none with --all."""
    all: bool = False
    """Check every registered id: textgym's and those of installed packages' entry points."""
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of gymnasium.make as a JSON object (one env id only)."""
    tasks: int = 20
    """Episodes of the oracle and of each floor: the first tasks of a task list, else seeds."""
    seed: int = 0
    """Seed of the first episode and of the policies; an integer in [0, 2**32 - 1], as for
    every command."""
    output: str | None = None
    """Write the JSON cards here ({"cards": [...]}); default: the table only."""
    overwrite: bool = False
    """Replace an --output file that already holds something."""
    progress: bool = True
    """Name each env on stderr as its check starts."""

    def __post_init__(self) -> None:
        check_seed("--seed", self.seed)
        if self.all and self.env_ids:
            raise ValueError("give env ids or --all, not both")
        if not self.all and not self.env_ids:
            raise ValueError("expected an env id (textgym list shows them) or --all")
        if self.env_kwargs and (self.all or len(self.env_ids) != 1):
            raise ValueError("--env-kwargs applies to one env id; give exactly one")
        if self.tasks < 1:
            raise ValueError(f"expected --tasks >= 1, got {self.tasks}")


Config = CheckConfig


def _all_ids() -> list[str]:
    """textgym's ids, then those installed packages register (the ids ``textgym list`` shows)."""
    import textgym
    from textgym.builder import load_entry_points

    before = set(gym.registry)
    try:
        load_entry_points()
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    return [*textgym.ENV_DESCRIPTIONS, *sorted(set(gym.registry) - before)]


def _number(value: Any, stderr: Any = None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if stderr is None else f"{value:.3f} ± {stderr:.3f}"


def card_row(card: dict[str, Any]) -> dict[str, str]:
    """The table row of one card: column -> text (the checks as ``N/M``, failures named)."""
    checks = card["checks"]
    ran = [name for name, c in checks.items() if c["status"] != "skip"]
    failed = [name for name in ran if checks[name]["status"] == "fail"]
    oracle = card["oracle"]
    if oracle["status"] == "skip":
        oracle_text = "skip (no expert)"
    elif "mean" not in oracle:
        oracle_text = "fail: " + oracle.get("detail", "")[:40]
    else:
        oracle_text = (
            f"{oracle['mean']:.3f} / {oracle['maximum']:.3f} "
            f"({oracle['at_maximum']}/{oracle['episodes']})"
        )
    row = {
        "env": card["env_id"],
        "checks": f"{len(ran) - len(failed)}/{len(ran)}"
        + (f" fail: {', '.join(failed)}" if failed else ""),
        "oracle (mean / max)": oracle_text,
    }
    for name in ("empty", "no-op", "random"):
        floor = card["floors"][name]
        row[name] = _number(floor["mean"], floor["stderr"]) if "mean" in floor else floor["status"]
    row["leakage"] = card["leakage"]["status"]
    row["card"] = card["status"] + (f" ({', '.join(card['failed'])})" if card["failed"] else "")
    return row


def _print_table(cards: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = [card_row(card) for card in cards]
    tasks = sorted({card["tasks"] for card in cards})
    table = Table(title=f"env quality cards ({'/'.join(map(str, tasks))} tasks each)")
    for column in rows[0]:
        table.add_column(column, justify="left" if column in ("env", "checks") else "right")
    for row in rows:
        table.add_row(*row.values())
    Console(width=200).print(table)


def run(config: CheckConfig) -> int:
    """Check each env, print the table, write the cards; 1 if any card fails."""
    from textgym.card import env_card
    from textgym.cli.outputs import claim_file
    from textgym.results import write_json

    env_ids = _all_ids() if config.all else list(config.env_ids)
    if not env_ids:
        raise UsageError("--all found no registered text env ids")
    if config.output is None:
        cards = _cards(env_ids, config, env_card)
    else:
        with claim_file(Path(config.output), "--output", overwrite=config.overwrite) as out:
            cards = _cards(env_ids, config, env_card)
            write_json(out, {"cards": cards})
    _print_table(cards)
    failed = [card["env_id"] for card in cards if card["status"] != "pass"]
    if config.output is not None:
        print(f"cards written to {config.output}")
    if failed:
        print(f"textgym check: {len(failed)} of {len(cards)} envs failed: {', '.join(failed)}")
        return 1
    return 0


def _cards(env_ids: list[str], config: CheckConfig, env_card: Any) -> list[dict[str, Any]]:
    cards = []
    for env_id in env_ids:
        if config.progress:
            print(f"checking {env_id} ...", file=sys.stderr, flush=True)
        try:
            cards.append(env_card(env_id, config.env_kwargs, tasks=config.tasks, seed=config.seed))
        except ValueError as exc:
            raise UsageError(f"cannot check {env_id}: {one_line(exc)}") from None
    return cards
