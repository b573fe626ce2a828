"""Environment throughput: plies per second of whole tic-tac-toe games, textgym beside its peers.

What is measured: full games played as fast as the Python API allows, with a scripted agent that
picks a uniformly random legal move, so that the time is the environments' own cost (stepping,
rules, observation text, info dicts, wrappers) and not a policy's. A *ply* is one move by either
player; a game of tic-tac-toe has 5 to 9. Rows:

- ``textgym/TicTacToe-v0`` made with :func:`gymnasium.make` (so behind ``TimeLimit``,
  ``OrderEnforcing`` and ``PassiveEnvChecker``) and the same env's ``.unwrapped`` core, against
  ``opponent="random"`` (random play on both sides: the fair comparison with the peers) and
  against the minimax opponent with ``random_move_prob=0``. The agent sends the text completion
  ``<move>N</move>`` built from ``info["legal_moves"]``, so building and parsing text is counted:
  that is the point of a text env. Plies = agent moves + opponent moves
  (``info["opponent_move"] is not None``).
- PettingZoo ``classic/tictactoe-v3`` (AEC API, the default wrapped ``env()``): ``agent_iter``,
  ``last``, a random action among the ones ``action_mask`` allows, ``step``. Each step with a real
  action (not the ``None`` steps of finished agents) is one ply.
- TextArena ``TicTacToe-v0`` as its README uses it: ``ta.make`` (default wrappers
  ``LLMObservationWrapper`` and ``ActionFormattingWrapper``), ``reset(num_players=2)``, then
  ``get_observation`` / ``step("[N]")`` until done, then ``close``. A fresh env is made per game
  because ``LLMObservationWrapper`` keeps every past message across resets (reusing one env would
  make each game's observations longer than the last); ``ta.make`` costs about 7 us. Legal cells
  are read from the core env's ``state.game_state["board"]``, the cheapest source. The unwrapped
  ``TicTacToe-v0-raw`` is shown too, for reference.

Protocol: every row gets a warm-up, then ``--repeats`` timed runs of ``--games`` games, the rows
interleaved within each repeat so drift in machine load hits them alike; the table reports the
median. Every row draws its random moves from ``random.Random`` seeded from ``--seed``.

Why: textgym's goal is to cost no more per ply than PettingZoo's tictactoe and at most a third of
TextArena's, so that environment time never matters next to LLM generation.

Usage::

    python benchmarks/env_throughput.py                      # default run, about a minute
    python benchmarks/env_throughput.py --games 5000 --seed 1
    python benchmarks/env_throughput.py --profile textgym-random   # cProfile one row instead

Peers are benchmark-only dependencies: ``pip install "textgym[bench]"``.
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from _provenance import (  # sibling module of this script
    REPO_ROOT,
    dist_version,
    git,
    git_dirty,
    machine_info,
    write_result,
)

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.cli.usage import script_config

__all__ = ["Bench", "Config", "main"]

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "env_throughput.json"
BENCH_EXTRA_HINT = 'install the benchmark peers with: pip install "textgym[bench]"'

#: A runner plays ``n_games`` whole games with moves drawn from ``rng`` and returns the plies.
Runner = Callable[[int, random.Random], int]


@dataclass
class Bench:
    """One row of the table: a name, what it is, and a runner built once before timing."""

    name: str
    description: str
    runner: Runner


# -- textgym ----------------------------------------------------------------------------------
def textgym_runner(env: gym.Env, seed: int) -> Runner:
    """Random legal agent speaking ``<move>N</move>`` to a textgym tic-tac-toe env.

    The env is seeded once, on its first reset, as a training loop would do.
    """
    first_seed: list[int | None] = [seed]

    def run(n_games: int, rng: random.Random) -> int:
        plies = 0
        choice = rng.choice
        for _ in range(n_games):
            _, info = env.reset(seed=first_seed[0])
            first_seed[0] = None
            if info["opponent_move"] is not None:
                plies += 1
            terminated = truncated = False
            while not (terminated or truncated):
                action = f"<move>{choice(info['legal_moves'])}</move>"
                _, _, terminated, truncated, info = env.step(action)
                plies += 1 + (info["opponent_move"] is not None)
        return plies

    return run


def textgym_benches(seed: int) -> list[Bench]:
    benches = []
    for opponent, kwargs in (
        ("random", {"opponent": "random"}),
        ("minimax", {"opponent": "minimax", "random_move_prob": 0.0}),
    ):
        wrapped = gym.make("textgym/TicTacToe-v0", **kwargs)
        core = gym.make("textgym/TicTacToe-v0", **kwargs).unwrapped
        benches += [
            Bench(
                f"textgym-{opponent}",
                f"textgym TicTacToe-v0 via gym.make, vs {opponent}",
                textgym_runner(wrapped, seed),
            ),
            Bench(
                f"textgym-{opponent}-unwrapped",
                f"textgym TicTacToe-v0 .unwrapped, vs {opponent}",
                textgym_runner(core, seed),
            ),
        ]
    return benches


# -- PettingZoo -------------------------------------------------------------------------------
def pettingzoo_benches(seed: int) -> list[Bench]:
    try:
        import pettingzoo
    except ImportError as err:
        raise SystemExit(f"PettingZoo is missing ({err}); {BENCH_EXTRA_HINT}") from None
    try:
        import pygame  # noqa: F401  (tictactoe imports it at module level, for rendering only)
    except ImportError:
        raise SystemExit(
            "PettingZoo's tictactoe needs pygame (its 'classic' extra); "
            f"pip install pygame-ce, or {BENCH_EXTRA_HINT}"
        ) from None
    if hasattr(pettingzoo, "make"):  # the registry API (1.25+); same env() entry point
        env = pettingzoo.make("aec", "classic/tictactoe-v3")
    else:
        from pettingzoo.classic import tictactoe_v3

        env = tictactoe_v3.env()
    first_seed: list[int | None] = [seed]

    def run(n_games: int, rng: random.Random) -> int:
        plies = 0
        choice = rng.choice
        for _ in range(n_games):
            env.reset(seed=first_seed[0])
            first_seed[0] = None
            for _agent in env.agent_iter():
                obs, _, termination, truncation, _ = env.last()
                if termination or truncation:
                    env.step(None)
                    continue
                env.step(choice(obs["action_mask"].nonzero()[0].tolist()))
                plies += 1
        return plies

    return [
        Bench(
            "pettingzoo",
            f"PettingZoo {pettingzoo.__version__} classic/tictactoe-v3 (AEC), random play",
            run,
        )
    ]


# -- TextArena --------------------------------------------------------------------------------
def textarena_benches(seed: int) -> list[Bench]:
    try:
        import textarena as ta
    except ImportError as err:
        raise SystemExit(f"TextArena is missing ({err}); {BENCH_EXTRA_HINT}") from None

    def make_runner(env_id: str) -> Runner:
        first_seed: list[int | None] = [seed]

        def run(n_games: int, rng: random.Random) -> int:
            plies = 0
            randrange = rng.randrange
            for _ in range(n_games):
                env = ta.make(env_id)
                env.reset(num_players=2, seed=first_seed[0])
                first_seed[0] = None
                core = env
                while isinstance(core, ta.Wrapper):
                    core = core.env
                board = core.state.game_state["board"]  # 3x3 list of lists, "" when free
                done = False
                while not done:
                    _player_id, _observation = env.get_observation()
                    free = [r * 3 + c for r in range(3) for c in range(3) if board[r][c] == ""]
                    done, _ = env.step(f"[{free[randrange(len(free))]}]")
                    plies += 1
                env.close()
            return plies

        return run

    version = getattr(ta, "__version__", None) or dist_version("textarena")
    return [
        Bench(
            "textarena",
            f"TextArena {version} TicTacToe-v0 (default wrappers), random play",
            make_runner("TicTacToe-v0"),
        ),
        Bench(
            "textarena-raw",
            "TextArena TicTacToe-v0-raw (no wrappers), random play",
            make_runner("TicTacToe-v0-raw"),
        ),
    ]


# -- measurement ------------------------------------------------------------------------------
def measure(
    benches: list[Bench], games: int, repeats: int, warmup: int, seed: int
) -> list[dict[str, Any]]:
    """Time every bench ``repeats`` times on ``games`` games, interleaved; return JSON rows."""
    for i, bench in enumerate(benches):
        bench.runner(warmup, random.Random(seed * 1000 + 999 - i))
    runs: dict[str, list[tuple[float, int]]] = {b.name: [] for b in benches}
    for r in range(repeats):
        for bench in benches:
            rng = random.Random(seed * 1000 + r)
            start = time.perf_counter()
            plies = bench.runner(games, rng)
            runs[bench.name].append((time.perf_counter() - start, plies))
    rows = []
    for bench in benches:
        plies_per_s = [p / s for s, p in runs[bench.name]]
        games_per_s = [games / s for s, _ in runs[bench.name]]
        rows.append(
            {
                "name": bench.name,
                "description": bench.description,
                "plies_per_s": statistics.median(plies_per_s),
                "games_per_s": statistics.median(games_per_s),
                "games": games,
                "repeats": repeats,
                "plies_per_game": statistics.mean(p for _, p in runs[bench.name]) / games,
                "plies_per_s_runs": plies_per_s,
                "seconds_runs": [s for s, _ in runs[bench.name]],
            }
        )
    return rows


def ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Plies/s ratios of textgym rows over the peers (``> 1`` means textgym is faster)."""
    pps = {row["name"]: row["plies_per_s"] for row in rows}
    pairs = {
        "textgym_random_vs_textarena": ("textgym-random", "textarena"),
        "textgym_random_vs_pettingzoo": ("textgym-random", "pettingzoo"),
        "textgym_minimax_vs_textarena": ("textgym-minimax", "textarena"),
        "textgym_minimax_vs_pettingzoo": ("textgym-minimax", "pettingzoo"),
        "textgym_random_unwrapped_vs_wrapped": ("textgym-random-unwrapped", "textgym-random"),
        "textgym_minimax_unwrapped_vs_wrapped": ("textgym-minimax-unwrapped", "textgym-minimax"),
        "textgym_random_unwrapped_vs_textarena_raw": ("textgym-random-unwrapped", "textarena-raw"),
    }
    return {key: pps[a] / pps[b] for key, (a, b) in pairs.items() if a in pps and b in pps}


# -- output -----------------------------------------------------------------------------------
def print_table(rows: list[dict[str, Any]], rel: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Tic-tac-toe throughput, random legal agent (median of repeats)")
    for col in ("name", "plies/s", "games/s", "plies/game", "plies/s min-max"):
        table.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    for row in rows:
        runs = row["plies_per_s_runs"]
        table.add_row(
            row["name"],
            f"{row['plies_per_s']:,.0f}",
            f"{row['games_per_s']:,.0f}",
            f"{row['plies_per_game']:.2f}",
            f"{min(runs):,.0f}-{max(runs):,.0f}",
        )
    console = Console(width=max(100, Console().width))
    console.print(table)
    for row in rows:
        console.print(f"  {row['name']}: {row['description']}", highlight=False)
    ratio_table = Table(title="Ratios of plies/s (>1: the first is faster)")
    ratio_table.add_column("ratio")
    ratio_table.add_column("value", justify="right")
    for key, value in rel.items():
        ratio_table.add_row(key, f"{value:.2f}x")
    console.print(ratio_table)


def profile(bench: Bench, games: int, seed: int) -> None:
    """Run one bench under cProfile and print the top functions by own time."""
    bench.runner(max(1, games // 10), random.Random(seed))
    profiler = cProfile.Profile()
    profiler.enable()
    bench.runner(games, random.Random(seed))
    profiler.disable()
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


@dataclass
class Config:
    """The command line of this benchmark."""

    games: int = 10000
    """Games per timed repeat, per row."""
    repeats: int = 3
    """Timed repeats per row; the median is reported."""
    warmup: int | None = None
    """Warm-up games per row (None: games // 10, at least 50)."""
    seed: int = 0
    """Seed for the agents' moves and the envs' first reset."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""
    profile: str | None = None
    """Instead of the benchmark, cProfile this row (e.g. textgym-random) for --games games."""

    def __post_init__(self) -> None:
        if self.games < 1 or self.repeats < 1:
            raise ValueError(
                f"Expected --games >= 1 and --repeats >= 1, got {self.games} and {self.repeats}"
            )


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "env_throughput.py", __doc__)
    if args.warmup is None:
        args.warmup = max(50, args.games // 10)
    benches = (
        textgym_benches(args.seed) + pettingzoo_benches(args.seed) + textarena_benches(args.seed)
    )
    if args.profile is not None:
        by_name = {b.name: b for b in benches}
        if args.profile not in by_name:
            raise SystemExit(f"Expected --profile in {sorted(by_name)}, got {args.profile!r}")
        profile(by_name[args.profile], args.games, args.seed)
        return 0

    machine = machine_info()
    rows = measure(benches, args.games, args.repeats, args.warmup, args.seed)
    rel = ratios(rows)
    print_table(rows, rel)
    result = {
        "benchmark": "env_throughput",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine,
        "versions": {
            name: dist_version(name)
            for name in ("textgym", "gymnasium", "pettingzoo", "textarena", "numpy")
        },
        "seed": args.seed,
        "games": args.games,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "results": rows,
        "ratios": rel,
        "goals": {
            "textgym_random_at_least_3x_textarena": rel.get("textgym_random_vs_textarena", 0.0)
            >= 3.0,
            "textgym_random_at_least_1x_pettingzoo": rel.get("textgym_random_vs_pettingzoo", 0.0)
            >= 1.0,
        },
    }
    write_result(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
