"""``textgym demo``: the headline in one command. The base Gemma 3 270M and a trained LoRA
adapter of it (default: the one committed under ``benchmarks/results/``, SFT on the safe expert
then GRPO against a league of opponents) play the same seeded tic-tac-toe games, greedy, as X
or O by seed, against the optimal player (the minimax, ``random_move_prob`` 0) and against a
uniformly random one; one table puts them side by side (wins, draws, losses and games with no
end, each with its binomial standard error, and the share of invalid moves) and the last line
says how to train such an adapter.

Each model is loaded once and plays both opponents; the base model is freed before the adapter
loads, so the peak memory is one model's.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from pathlib import Path
from typing import Any

from textgym.checks import check_seed
from textgym.cli import batch_play, building
from textgym.cli.evaluate import EvalConfig
from textgym.errors import TextgymError, UsageError
from textgym.evaluation import RunningSummary
from textgym.models import DType

__all__ = ["DEFAULT_ADAPTER", "OPPONENT_SETTINGS", "DemoConfig", "model_rows", "run", "table"]

#: The committed adapter (relative to the repository root, where the README's commands run).
DEFAULT_ADAPTER = "benchmarks/results/tictactoe_pipeline_gemma-3-270m_cpu_lora_safe/league"

#: The opponents the models face in the table (TicTacToe-v0 settings), by row name.
OPPONENT_SETTINGS = {
    "optimal": {"opponent": "minimax", "random_move_prob": 0.0},
    "random": {"opponent": "random"},
}

ENV_ID = "textgym/TicTacToe-v0"


@dataclasses.dataclass(kw_only=True)
class DemoConfig:
    """The base Gemma 3 270M and a trained adapter play the same seeded tic-tac-toe games
    against the optimal and a random player; one table side by side."""

    games: int = 40
    """Games per model and opponent (each seed gives the agent X or O)."""
    model: str = "gemma-3-270m"
    """The base model: 'gemma-3-270m', 'tiny', a Hugging Face id or a local directory."""
    adapter: str = DEFAULT_ADAPTER
    """The trained LoRA adapter directory (its base must be --model)."""
    max_new_tokens: int = 16
    """Most tokens per move (the adapter answers in about 8)."""
    dtype: DType = "auto"
    """Weights' dtype: auto (bfloat16 where the CPU computes it natively, else float32)."""
    seed: int = 0
    """Seed of the first game; an integer in [0, 2**32 - 1], as for every command."""
    progress: bool = True
    """Show each row's progress on stderr."""

    def __post_init__(self) -> None:
        check_seed("--seed", self.seed)
        if not 1 <= self.games <= 10_000:
            raise ValueError(f"expected --games in [1, 10000], got {self.games}")
        if self.max_new_tokens < 1:
            raise ValueError(f"expected --max-new-tokens >= 1, got {self.max_new_tokens}")


Config = DemoConfig


def _eval_config(config: DemoConfig, model: str, opponent: str) -> EvalConfig:
    return EvalConfig(
        env_id=ENV_ID,
        env_kwargs={
            "prompt_style": "compact",
            "agent_mark": "random",
            **OPPONENT_SETTINGS[opponent],
        },
        policy="hf",
        model=model,
        dtype=config.dtype,
        max_new_tokens=config.max_new_tokens,
        temperature=0.0,
        episodes=config.games,
        seed=config.seed,
        rollout_batch_size=config.games,
        progress=config.progress,
    )


def model_rows(config: DemoConfig, label: str, model: str) -> list[dict[str, Any]]:
    """Both opponents' rows of one model, loaded once: ``{"model": label, "opponent",
    "seconds"}`` and :meth:`RunningSummary.result`'s keys (``episodes``, ``outcomes``,
    ``truncated_rate``, ``invalid_action_rate``, ...).

    Raises:
        KeyboardInterrupt: Ctrl-C during play.
        TextgymError: the play stopped on an error (one line).
        UsageError: the model or env cannot be built.
    """
    rows, policy = [], None
    for opponent in OPPONENT_SETTINGS:
        eval_config = _eval_config(config, model, opponent)
        plan = batch_play.setup(eval_config)
        if policy is None:
            policy = building.episode_policy(eval_config, plan.stop)
        running = RunningSummary()
        played = batch_play.play(
            eval_config, plan, policy, f"{label} vs {opponent}", lambda _, t, r=running: r.add(t)
        )
        if played.interrupted:
            raise KeyboardInterrupt
        if played.error is not None:  # a run that failed on its way (exit 1), not a usage error
            raise TextgymError(played.error)
        rows.append({"model": label, "opponent": opponent, "seconds": played.elapsed})
        rows[-1].update(running.result())
    del policy
    gc.collect()
    return rows


def _cell(rate: float, n: int) -> str:
    """``p% ± se`` of a binomial rate over ``n`` games."""
    return f"{100 * rate:.0f}% ± {100 * math.sqrt(rate * (1 - rate) / n):.0f}"


def table(rows: list[dict[str, Any]]) -> Any:
    """The side-by-side table (a ``rich`` table): one row per opponent and model: the
    rates of wins, draws, losses and games with no end (the env's turn limit: an invalid move
    leaves the board as it was), each ± its standard error, and the share of invalid moves."""
    from rich.table import Table

    out = Table(title=f"{ENV_ID}, greedy, the same seeded games for both models")
    columns = ("opponent", "model", "games", "wins", "draws", "losses", "no end", "invalid")
    for name in columns:
        out.add_column(name, justify="left" if name in ("opponent", "model") else "right")
    for opponent in OPPONENT_SETTINGS:
        for row in (r for r in rows if r["opponent"] == opponent):
            n, outcomes = row["episodes"], row["outcomes"]
            out.add_row(
                opponent,
                row["model"],
                str(n),
                *(_cell(outcomes[o], n) for o in ("win", "draw", "loss")),
                _cell(row["truncated_rate"], n),
                f"{100 * row['invalid_action_rate']:.0f}%",
            )
    return out


def run(config: DemoConfig) -> int:
    """Play both models against both opponents; print the table and how to train one."""
    from rich.console import Console

    adapter = Path(config.adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise UsageError(
            f"--adapter {config.adapter[:200]} holds no adapter_config.json; run textgym demo "
            "from the repository root (the committed adapter lies under benchmarks/results/) "
            "or pass --adapter DIR"
        )
    rows = model_rows(config, "base", config.model)
    rows += model_rows(config, "trained", config.adapter)
    Console(width=100).print(table(rows))
    print(
        f"base: {config.model} as it ships. trained: a LoRA adapter of it ({config.adapter}), "
        "after SFT on the safe expert's games and GRPO against a league of opponents. To "
        "train one: `textgym run recipes/tictactoe.toml --work-dir runs/tictactoe`, then "
        "`textgym run recipes/tictactoe_league.toml --work-dir runs/tictactoe` (the recipes "
        "lie in the repository; README, 'Training')."
    )
    return 0
