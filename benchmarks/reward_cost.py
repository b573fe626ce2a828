"""Reward-computation cost per episode for the single-turn dataset tasks, in microseconds.

What is measured, per row, as the median over ``--repeats`` timed passes of the mean cost of one
call over a fixed batch of completions:

- ``reverse_text/*``: the reward terms of ``textgym/ReverseText-v0`` as the env computes them:
  tag extraction, the exact LCS similarity (``rapidfuzz``) and the format check. Texts come
  in length buckets (about 100, about 300 and exactly 600 characters) and completions in
  three kinds: the exact reversal, a near miss (5% of characters replaced) and the text
  unreversed (the slow case for LCS: long common runs in the wrong order).
- ``gsm8k/*``: ``textgym/GSM8K-v0``'s terms: final-answer extraction, normalisation to an
  exact ``Fraction``, the ``correct`` and ``format`` terms; on the dataset's gold solutions,
  on the gold answer plus one, on a long (about 2,000-character) reasoning trace ending in
  ``\\boxed{}``, and on completions without a final answer.
- ``*/episode``: a whole episode through ``gymnasium.make`` (``reset`` with a task index,
  then ``step`` with the gold completion), so the wrappers, the info dict and the observation
  text are counted too.

Data: the real paragraphs and GSM8K test split from ``../shared/data`` when present, else the
bundled corpus and sample set (the JSON records which). Random edits use ``--seed``.

Why: an RL step scores thousands of completions; the verifier must cost microseconds, far
below generation, and LCS must stay exact (not ``difflib``'s heuristic ratio) at that price.

Usage::

    python benchmarks/reward_cost.py                  # about 20 s
    python benchmarks/reward_cost.py --repeats 9 --seed 1
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
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
from textgym.envs.gsm8k.env import GSM8KEnv
from textgym.envs.gsm8k.parsing import extract_final_answer, parse_number
from textgym.envs.gsm8k.rewards import correct_reward
from textgym.envs.gsm8k.rewards import format_reward as gsm8k_format_reward
from textgym.envs.reverse_text.env import ReverseTextEnv
from textgym.envs.reverse_text.parsing import CLOSE_TAG, OPEN_TAG, extract_reversed_text
from textgym.envs.reverse_text.rewards import format_reward as reverse_format_reward
from textgym.envs.reverse_text.rewards import lcs_similarity

__all__ = ["Config", "Row", "main"]

SHARED = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "reward_cost.json"
ITEMS_PER_ROW = 200


@dataclass
class Row:
    """One line of the table: a name, what it scores, and a call timed on each of ``items``."""

    name: str
    description: str
    call: Callable[[Any], object]
    items: Sequence[Any]
    mean_input_chars: float


# -- the reward computations, exactly as the envs combine them -----------------------------------
def reverse_text_reward(pair: tuple[str, str]) -> float:
    completion, target = pair
    answer = extract_reversed_text(completion)
    return lcs_similarity("" if answer is None else answer, target) + 0.1 * reverse_format_reward(
        completion
    )


def gsm8k_reward(pair: tuple[str, Any]) -> float:
    completion, gold = pair
    text = extract_final_answer(completion)
    answer = None if text is None else parse_number(text)
    return correct_reward(answer, gold) + 0.1 * gsm8k_format_reward(answer)


# -- data ---------------------------------------------------------------------------------------
PARAGRAPHS = SHARED / "paragraphs" / "paragraphs.jsonl"
GSM8K_TEST = SHARED / "gsm8k" / "test.jsonl"


def reverse_text_kwargs() -> dict[str, Any]:
    return {"data_path": str(PARAGRAPHS)} if PARAGRAPHS.is_file() else {}


def gsm8k_kwargs() -> dict[str, Any]:
    return {"split": "test", "data_path": str(GSM8K_TEST)} if GSM8K_TEST.is_file() else {}


def source_name(kwargs: dict[str, Any], default: str) -> str:
    return f"../{Path(kwargs['data_path']).relative_to(REPO_ROOT.parent)}" if kwargs else default


def texts_near(texts: list[str], length: int, rng: random.Random) -> list[str]:
    """``ITEMS_PER_ROW`` texts of about ``length`` characters (exactly ``length`` for 600)."""
    if length >= 600:
        pool = [t for t in texts if len(t) >= length]
        if len(pool) < ITEMS_PER_ROW:  # the bundled corpus has none that long: join paragraphs
            joined = " ".join(texts)
            starts = [rng.randrange(len(joined) - length) for _ in range(ITEMS_PER_ROW)]
            return [joined[s : s + length] for s in starts]
        return [t[:length] for t in rng.sample(pool, ITEMS_PER_ROW)]
    pool = sorted(texts, key=lambda t: abs(len(t) - length))[:ITEMS_PER_ROW]
    return pool


def near_miss(text: str, rng: random.Random, rate: float = 0.05) -> str:
    chars = list(text)
    for i in rng.sample(range(len(chars)), max(1, int(rate * len(chars)))):
        chars[i] = "#"
    return "".join(chars)


# -- rows ---------------------------------------------------------------------------------------
def build_rows(seed: int) -> tuple[list[Row], dict[str, str]]:
    """Every row of the table (the order of the draws from ``seed`` fixes the items) and the
    name of each task's data source."""
    rng = random.Random(seed)
    texts = [p.text for p in ReverseTextEnv(**reverse_text_kwargs()).passages]
    problems = list(GSM8KEnv(**gsm8k_kwargs()).problems)
    rows = [
        *_reverse_text_rows(texts, rng),
        *_gsm8k_rows(problems, rng),
        *_episode_rows(len(texts), len(problems), rng),
    ]
    sources = {
        "reverse_text": source_name(reverse_text_kwargs(), "bundled corpus"),
        "gsm8k": source_name(gsm8k_kwargs(), "bundled sample set"),
    }
    return rows, sources


def _reverse_text_rows(texts: list[str], rng: random.Random) -> list[Row]:
    """Exact, near-miss and unreversed answers at three passage lengths."""
    rows: list[Row] = []
    for length in (100, 300, 600):
        bucket = texts_near(texts, length, rng)
        kinds = {
            "exact": [(f"{OPEN_TAG}{t[::-1]}{CLOSE_TAG}", t[::-1]) for t in bucket],
            "near": [(f"{OPEN_TAG}{near_miss(t[::-1], rng)}{CLOSE_TAG}", t[::-1]) for t in bucket],
            "unreversed": [(f"{OPEN_TAG}{t}{CLOSE_TAG}", t[::-1]) for t in bucket],
        }
        mean_chars = statistics.mean(len(t) for t in bucket)
        for kind, items in kinds.items():
            rows.append(
                Row(
                    f"reverse_text/{length}/{kind}",
                    f"LCS + format terms, {kind} answer",
                    reverse_text_reward,
                    items,
                    mean_chars,
                )
            )
    return rows


def _gsm8k_rows(problems: list[Any], rng: random.Random) -> list[Row]:
    """Gold, off-by-one, long boxed and answerless solutions of sampled problems."""
    rows: list[Row] = []
    sample = [
        problems[i % len(problems)]
        for i in rng.sample(range(max(len(problems), ITEMS_PER_ROW)), ITEMS_PER_ROW)
    ]
    gold = [(p.solution, p.answer) for p in sample]
    plus_one = [(f"{p.solution.rsplit('####', 1)[0]}#### {p.answer + 1}", p.answer) for p in sample]
    long_trace = [
        (
            (p.solution.rsplit("####", 1)[0] + "\n") * (2000 // len(p.solution) + 1)
            + f"So the answer is \\boxed{{{p.answer}}}.",
            p.answer,
        )
        for p in sample
    ]
    no_answer = [(p.solution.rsplit("####", 1)[0], p.answer) for p in sample]
    for name, items, what in [
        ("gold", gold, "gold solutions"),
        ("gold_plus_one", plus_one, "gold solutions, answer + 1"),
        ("long_boxed", long_trace, "2,000-char traces, \\boxed{}"),
        ("no_answer", no_answer, "no #### line"),
    ]:
        rows.append(
            Row(
                f"gsm8k/{name}",
                f"parse + correct + format terms, {what}",
                gsm8k_reward,
                items,
                statistics.mean(len(c) for c, _ in items),
            )
        )
    return rows


def _episode_rows(texts: int, problems: int, rng: random.Random) -> list[Row]:
    """A whole episode (reset + step with the gold completion) of each env."""
    rows: list[Row] = []
    for name, env_id, kwargs, n in [
        ("reverse_text/episode", "textgym/ReverseText-v0", reverse_text_kwargs(), texts),
        ("gsm8k/episode", "textgym/GSM8K-v0", gsm8k_kwargs(), problems),
    ]:
        wrapped = gym.make(env_id, **kwargs)

        def episode(index: int, env: gym.Env = wrapped) -> float:
            _, info = env.reset(options={"task_index": index})
            return env.step(info["gold_completion"])[1]

        indices = rng.sample(range(n), min(n, ITEMS_PER_ROW))
        rows.append(Row(name, f"{env_id}: reset + step(gold)", episode, indices, float("nan")))
    return rows


# -- measurement --------------------------------------------------------------------------------
def measure(rows: list[Row], repeats: int) -> list[dict[str, Any]]:
    """Median over ``repeats`` interleaved passes of the mean microseconds per call."""
    for row in rows:  # warm-up, and a check that every call runs
        for item in row.items:
            row.call(item)
    runs: dict[str, list[float]] = {row.name: [] for row in rows}
    for _ in range(repeats):
        for row in rows:
            call, items = row.call, row.items
            start = time.perf_counter_ns()
            for item in items:
                call(item)
            runs[row.name].append((time.perf_counter_ns() - start) / 1e3 / len(items))
    return [
        {
            "name": row.name,
            "description": row.description,
            "us_per_episode": statistics.median(runs[row.name]),
            "us_per_episode_runs": runs[row.name],
            "items": len(row.items),
            "mean_input_chars": None
            if row.mean_input_chars != row.mean_input_chars
            else row.mean_input_chars,
        }
        for row in rows
    ]


def print_table(results: list[dict[str, Any]], sources: dict[str, str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Reward computation per episode (median of repeats)")
    for col in ("row", "us/episode", "min-max", "input chars", "what"):
        table.add_column(col, justify="left" if col in ("row", "what") else "right")
    for r in results:
        runs = r["us_per_episode_runs"]
        chars = "" if r["mean_input_chars"] is None else f"{r['mean_input_chars']:.0f}"
        table.add_row(
            r["name"],
            f"{r['us_per_episode']:.1f}",
            f"{min(runs):.1f}-{max(runs):.1f}",
            chars,
            r["description"],
        )
    console = Console(width=max(120, Console().width))
    console.print(table)
    console.print(
        f"data: reverse_text from {sources['reverse_text']}; gsm8k from {sources['gsm8k']}",
        highlight=False,
    )


@dataclass
class Config:
    """The command line of this benchmark."""

    repeats: int = 7
    """Timed passes per row; the median is reported."""
    seed: int = 0
    """Seed for sampling texts, problems and edits."""
    output: Path = DEFAULT_OUTPUT
    """JSON path."""

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"Expected --repeats >= 1, got {self.repeats}")


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "reward_cost.py", __doc__)
    info = machine_info()
    rows, sources = build_rows(args.seed)
    results = measure(rows, args.repeats)
    print_table(results, sources)
    record = {
        "benchmark": "reward_cost",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": info,
        "versions": {
            name: dist_version(name) for name in ("textgym", "rapidfuzz", "gymnasium", "numpy")
        },
        "seed": args.seed,
        "repeats": args.repeats,
        "items_per_row": ITEMS_PER_ROW,
        "data": sources,
        "unit": "microseconds per episode (one completion scored)",
        "results": results,
    }
    write_result(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
