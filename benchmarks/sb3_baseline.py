"""Classic-RL baseline: MaskablePPO (sb3-contrib) on the structured view of ``TicTacToe-v0``.

What is measured: how well a small MLP policy trained by MaskablePPO plays X against the
textgym opponent, through :class:`textgym.wrappers.StructuredTicTacToe` (board in, ``Discrete(9)``
cell out, action mask = free cells), so the dynamics and the opponent are exactly those of the
text env. One run per opponent setting, ``random_move_prob`` 1.0 (a uniformly random opponent)
and 0.5 (half random, half optimal). For each run the script records the learning curve (W/D/L
of the greedy policy over ``--curve-games`` games every ``--eval-every`` steps) and the final
W/D/L over ``--eval-games`` games, with evaluation seeds disjoint from the training seeds.

Goals (issue #7): at least 90% wins against the random opponent, and at least 95% non-losses
(wins + draws) at ``random_move_prob`` 0.5. Optimal play as X never loses, so both are reachable.

CPU budget: the defaults train 2 x ``--timesteps`` steps with one torch thread and finish in
well under ten minutes on two cores.

Usage::

    python benchmarks/sb3_baseline.py          # default run, writes results/sb3_baseline.json
    python benchmarks/sb3_baseline.py --timesteps 50000 --seed 1

Needs ``pip install "textgym[sb3]"`` (stable-baselines3 and sb3-contrib; install the CPU build of
torch first).
"""

from __future__ import annotations

import sys
import time
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
from textgym.wrappers.structured import StructuredTicTacToe

try:
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv
except ImportError as error:  # pragma: no cover - depends on the environment
    raise SystemExit(
        f'{error}; install the baseline dependencies with: pip install "textgym[sb3]"'
    ) from error

__all__ = ["Config", "evaluate", "main", "make_env", "train"]

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "sb3_baseline.json"
#: Evaluation seeds start here; training episodes use the vec env's seeds below it.
EVAL_SEED_BASE = 10_000_000


def make_env(random_move_prob: float) -> gym.Env:
    """``TicTacToe-v0`` (agent X, minimax opponent) behind the structured view."""
    return StructuredTicTacToe(
        gym.make("textgym/TicTacToe-v0", random_move_prob=random_move_prob, agent_mark="X")
    )


def evaluate(model: Any, random_move_prob: float, games: int, seed: int) -> dict[str, float]:
    """Play ``games`` greedy (masked, deterministic) games; return W/D/L fractions.

    Game ``i`` uses reset seed ``EVAL_SEED_BASE + seed * games + i``, so the opponent's replies
    are the same for every model evaluated with the same arguments.
    """
    env = make_env(random_move_prob)
    counts = {"win": 0, "draw": 0, "loss": 0, "truncated": 0}
    for i in range(games):
        obs, info = env.reset(seed=EVAL_SEED_BASE + seed * games + i)
        while True:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, _, terminated, truncated, info = env.step(int(action))
            if terminated or truncated:
                counts[info["outcome"] if terminated else "truncated"] += 1
                break
    env.close()
    return {key: value / games for key, value in counts.items()}


class _Curve(BaseCallback):
    """Evaluate the greedy policy every ``every`` environment steps."""

    def __init__(self, random_move_prob: float, every: int, games: int, seed: int):
        super().__init__()
        self.random_move_prob, self.every = random_move_prob, every
        self.games, self.seed = games, seed
        self.points: list[dict[str, Any]] = []
        self._next = 0

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._record()
            self._next += self.every
        return True

    def _record(self) -> None:
        wdl = evaluate(self.model, self.random_move_prob, self.games, self.seed + 1)
        self.points.append({"timesteps": int(self.num_timesteps), **wdl})
        print(
            f"  p={self.random_move_prob:.1f} steps={self.num_timesteps:>7}  "
            f"win {wdl['win']:.3f}  draw {wdl['draw']:.3f}  loss {wdl['loss']:.3f}",
            flush=True,
        )


def train(
    random_move_prob: float,
    timesteps: int,
    seed: int,
    *,
    n_envs: int = 8,
    eval_every: int | None = None,
    curve_games: int = 200,
) -> tuple[Any, list[dict[str, Any]], float]:
    """Train MaskablePPO against the opponent at ``random_move_prob``.

    Returns:
        ``(model, learning_curve, train_seconds)``; the curve is empty if ``eval_every`` is None.
        ``train_seconds`` includes the learning-curve evaluations. ``model.num_timesteps`` is
        ``timesteps`` rounded up to whole rollouts of 2,048 steps.
    """
    vec_env = DummyVecEnv([lambda: Monitor(make_env(random_move_prob)) for _ in range(n_envs)])
    vec_env.seed(seed)
    model = MaskablePPO(
        "MlpPolicy",
        vec_env,
        n_steps=256,  # 8 envs x 256 = 2,048 steps per update
        batch_size=256,
        n_epochs=10,
        learning_rate=1e-3,
        gamma=0.99,
        ent_coef=0.01,
        policy_kwargs={"net_arch": [128, 128]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    curve = _Curve(random_move_prob, eval_every, curve_games, seed) if eval_every else None
    start = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=curve)
    if curve is not None:
        curve._record()  # the final point
    seconds = time.perf_counter() - start
    vec_env.close()
    return model, (curve.points if curve is not None else []), seconds


@dataclass
class Config:
    """The command line of this benchmark."""

    timesteps: int = 150_000
    """Training steps per opponent setting."""
    probs: tuple[float, ...] = (1.0, 0.5)
    """The opponent's random_move_prob values, one training run each."""
    eval_games: int = 1000
    """Final evaluation games per setting."""
    eval_every: int = 10_000
    """Learning-curve interval, in steps."""
    curve_games: int = 200
    """Games per learning-curve point."""
    seed: int = 0
    """Seed for training and evaluation."""
    threads: int = 1
    """Torch CPU threads."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""

    def __post_init__(self) -> None:
        if min(self.timesteps, self.eval_games, self.curve_games, self.eval_every) < 1:
            raise ValueError(
                "Expected --timesteps, --eval-games, --curve-games and --eval-every >= 1"
            )
        if not all(0.0 <= p <= 1.0 for p in self.probs):
            raise ValueError(f"Expected every --probs value in [0, 1], got {list(self.probs)}")


def _report(runs: list[dict[str, Any]]) -> dict[str, bool]:
    """Print one row per opponent and return the issue's goals that these runs can judge."""
    print(
        f"\n{'random_move_prob':>16} {'steps':>8} {'train s':>8} {'win':>6} {'draw':>6} {'loss':>6}"
    )
    for run in runs:
        f = run["final"]
        print(
            f"{run['random_move_prob']:>16.1f} {run['timesteps']:>8} {run['train_seconds']:>8.1f} "
            f"{f['win']:>6.3f} {f['draw']:>6.3f} {f['loss']:>6.3f}"
        )
    by_prob = {run["random_move_prob"]: run["final"] for run in runs}
    goals = {}
    if 1.0 in by_prob:
        goals["win_at_least_0.90_vs_random"] = by_prob[1.0]["win"] >= 0.90
    if 0.5 in by_prob:
        goals["non_loss_at_least_0.95_at_0.5"] = by_prob[0.5]["win"] + by_prob[0.5]["draw"] >= 0.95
    print(f"goals: {goals}")
    return goals


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "sb3_baseline.py", __doc__)
    torch.set_num_threads(args.threads)
    machine = machine_info()
    runs = []
    for prob in args.probs:
        print(f"training MaskablePPO against random_move_prob={prob} for {args.timesteps} steps")
        model, curve, seconds = train(
            prob,
            args.timesteps,
            args.seed,
            eval_every=args.eval_every,
            curve_games=args.curve_games,
        )
        final = evaluate(model, prob, args.eval_games, args.seed)
        runs.append(
            {
                "random_move_prob": prob,
                "timesteps": int(model.num_timesteps),
                "train_seconds": round(seconds, 1),
                "learning_curve": curve,
                "final": final,
            }
        )

    goals = _report(runs)
    result = {
        "benchmark": "sb3_baseline",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine,
        "versions": {
            name: dist_version(name)
            for name in (
                "textgym",
                "gymnasium",
                "stable_baselines3",
                "sb3_contrib",
                "torch",
                "numpy",
            )
        },
        "seed": args.seed,
        "algorithm": "MaskablePPO (sb3-contrib), MlpPolicy [128, 128], 8 envs x 256 steps, "
        "batch 256, 10 epochs, lr 1e-3, gamma 0.99, ent_coef 0.01",
        "agent_mark": "X",
        "eval_games": args.eval_games,
        "curve_games": args.curve_games,
        "torch_threads": args.threads,
        "runs": runs,
        "goals": goals,
    }
    write_result(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
