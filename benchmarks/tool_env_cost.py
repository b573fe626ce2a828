"""Reset and step cost of the tool-use envs (Workplace-v1, EmailToolUse-v1), in microseconds.

For each task, on ``--episodes`` seeded episodes played by the gold policy, it times:
``reset`` (a fresh in-memory SQLite sandbox copied from the template, the task drawn; the first
reset of a WorkBench task also replays its gold calls once, cached afterwards, so timings come
from a second pass), the step that runs the gold calls (parse, validate, execute), a read-only
step (one ``email_search_emails`` call), and the final step (state comparison with the gold
outcome). Each number is the median over ``--repeats`` passes of the mean per episode.

Run: ``python benchmarks/tool_env_cost.py`` (writes benchmarks/results/tool_env_cost.json).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _provenance import (  # sibling module of this script
    REPO_ROOT,
    dist_version,
    git,
    git_dirty,
    machine_info,
    write_result,
)

import textgym  # noqa: F401  (registers the ids)
from textgym.cli.usage import script_config
from textgym.envs.email_tool_use import EmailToolUseEnv
from textgym.envs.workplace import WorkplaceEnv

WORKPLACE = REPO_ROOT.parent / "shared" / "data" / "workplace"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "tool_env_cost.json"
SEARCH = '<tool_call>{"name": "email_search_emails", "arguments": {"query": "update"}}</tool_call>'


def one_pass(env: Any, seeds: range) -> dict[str, float]:
    t = {"reset": 0.0, "step_gold_calls": 0.0, "step_read": 0.0, "step_final": 0.0}
    n_calls = 0
    clock = time.perf_counter
    for seed in seeds:
        start = clock()
        _, info = env.reset(seed=seed)
        t["reset"] += clock() - start
        start = clock()
        env.step(SEARCH)
        t["step_read"] += clock() - start
        if not info["noop_task"]:
            start = clock()
            *_, info = env.step(info["gold_completion"])
            t["step_gold_calls"] += clock() - start
            n_calls += 1
        start = clock()
        env.step(info["gold_completion"])
        t["step_final"] += clock() - start
    n = len(seeds)
    return {
        "reset": t["reset"] / n * 1e6,
        "step_gold_calls": t["step_gold_calls"] / max(n_calls, 1) * 1e6,
        "step_read": t["step_read"] / n * 1e6,
        "step_final": t["step_final"] / n * 1e6,
    }


def measure(env: Any, episodes: int, repeats: int) -> dict[str, float]:
    one_pass(env, range(episodes))  # warm-up: loads, caches gold outcomes
    passes = [one_pass(env, range(episodes)) for _ in range(repeats)]
    return {k: round(statistics.median(p[k] for p in passes), 1) for k in passes[0]}


@dataclass
class Config:
    """The command line of this benchmark."""

    episodes: int = 200
    """Seeded episodes per env and pass."""
    repeats: int = 3
    """Passes per env; the median is reported."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "tool_env_cost.py", __doc__)
    info = machine_info()
    real = (WORKPLACE / "workbench" / "tasks.jsonl").is_file()
    envs = {
        "textgym/Workplace-v1": (
            WorkplaceEnv(data_dir=str(WORKPLACE)) if real else WorkplaceEnv(),
            "../shared/data/workplace (WorkBench, 690 tasks)" if real else "bundled sample",
        ),
        "textgym/EmailToolUse-v1": (
            EmailToolUseEnv(),
            "generator, inbox_size=20, distractors=2, num_steps=1",
        ),
    }
    results = {}
    print(f"{'env':<26}{'reset':>10}{'gold calls':>12}{'read step':>11}{'final step':>12}   (us)")
    for env_id, (env, data) in envs.items():
        r = measure(env, args.episodes, args.repeats)
        results[env_id] = {"data": data, **r}
        print(
            f"{env_id:<26}{r['reset']:>10.1f}{r['step_gold_calls']:>12.1f}{r['step_read']:>11.1f}"
            f"{r['step_final']:>12.1f}"
        )
    record = {
        "benchmark": "tool_env_cost",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": info,
        "versions": {
            name: dist_version(name) for name in ("textgym", "gymnasium", "numpy", "jsonschema")
        },
        "seeds": f"0..{args.episodes - 1}",
        "episodes": args.episodes,
        "repeats": args.repeats,
        "unit": "microseconds per call (mean per episode, median over repeats)",
        "results": results,
    }
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
