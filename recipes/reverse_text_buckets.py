"""ReverseText evaluations by passage length (the buckets stage of recipes/reverse_text.toml):
``python recipes/reverse_text_buckets.py --edges 32,64 EVAL_DIR [EVAL_DIR ...]``.

Each evaluation's passages (its ``summary.json``'s ``data_path``) are grouped by length into
buckets (``--edges``: inclusive upper bounds of all but the last), with the mean ``lcs``, the
exact-reversal rate and pass@1 / pass@k per bucket
(:func:`length_bucket_summary`). Prints one line per
(evaluation, bucket) and writes ``buckets.json`` in the current folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from textgym.cli.usage import script_config
from textgym.evaluation import mean_stderr, pass_at_k


@dataclass(frozen=True)
class LengthEpisode:
    """One evaluated episode: its task, the passage's length in characters, the ``lcs`` reward
    component (in [0, 1]) and whether the answer was the exact reversal."""

    task_id: str
    n_chars: int
    lcs: float
    exact: bool


def _bucket_names(edges: Sequence[int]) -> list[tuple[int, int | None, str]]:
    """``(low, high, name)`` of each bucket: ``[1, e0]``, ``[e0 + 1, e1]``, ..., ``[e_last + 1, inf)``."""
    bounds, low = [], 1
    for edge in edges:
        bounds.append((low, edge, f"{low}-{edge}"))
        low = edge + 1
    bounds.append((low, None, f"{low}+"))
    return bounds


def _rate(hits: int, n: int) -> dict[str, float]:
    p = hits / n if n else math.nan
    return {"rate": p, "stderr": math.sqrt(p * (1 - p) / n) if n else math.nan}


def length_bucket_summary(
    episodes: Iterable[LengthEpisode], edges: Sequence[int], ks: Sequence[int] = (1,)
) -> list[dict[str, Any]]:
    """Results per bucket of passage length.

    Args:
        episodes: Evaluated episodes; several of one ``task_id`` are rollouts of one passage.
        edges: Increasing upper bounds (inclusive, characters) of all buckets but the last:
            ``(100, 200)`` gives ``1-100``, ``101-200`` and ``201+``.
        ks: pass@k values to report per bucket; a k larger than the rollouts of a passage is
            left out for that bucket (pass@k needs k <= n, :func:`textgym.evaluation.pass_at_k`).

    Returns:
        One dict per bucket, empty buckets included (``episodes`` 0, NaN statistics):
        ``{"bucket", "low", "high" (None: no bound), "episodes", "tasks", "lcs": {"mean",
        "stderr"}, "exact": {"rate", "stderr"}, "pass@k": float, ...}``. pass@k is the mean over
        the bucket's passages of the unbiased estimate from each passage's rollouts.

    Raises:
        ValueError: ``edges`` not strictly increasing positive ints; an episode's ``lcs``
            outside [0, 1].
    """
    if any(e < 1 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"Expected strictly increasing positive bucket edges, got {list(edges)}")
    buckets = _bucket_names(edges)
    grouped: list[list[LengthEpisode]] = [[] for _ in buckets]
    for episode in episodes:
        if not 0.0 <= episode.lcs <= 1.0:
            raise ValueError(
                f"Expected an lcs in [0, 1], got {episode.lcs} for task {episode.task_id!r}"
            )
        index = next(
            i for i, (_, high, _) in enumerate(buckets) if high is None or episode.n_chars <= high
        )
        grouped[index].append(episode)
    out = []
    for (low, high, name), members in zip(buckets, grouped):
        mean, stderr = mean_stderr([e.lcs for e in members])
        row: dict[str, Any] = {
            "bucket": name,
            "low": low,
            "high": high,
            "episodes": len(members),
            "tasks": len({e.task_id for e in members}),
            "lcs": {"mean": mean, "stderr": stderr},
            "exact": _rate(sum(e.exact for e in members), len(members)),
        }
        per_task: dict[str, list[bool]] = {}
        for e in members:
            per_task.setdefault(e.task_id, []).append(e.exact)
        for k in ks:
            if per_task and all(len(v) >= k for v in per_task.values()):
                scores = [pass_at_k(len(v), sum(v), k) for v in per_task.values()]
                row[f"pass@{k}"] = sum(scores) / len(scores)
        out.append(row)
    return out


def buckets(eval_dir: Path, edges: list[int]) -> list[dict]:
    summary = json.loads((eval_dir / "summary.json").read_text(encoding="utf-8"))
    data = Path(summary["env_kwargs"]["data_path"])
    lengths = {}
    for line in data.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            lengths[row["id"]] = len(row["text"])
    episodes, rollouts = [], {}
    with (eval_dir / "trajectories.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            r = json.loads(line)
            lcs = r["component_totals"]["lcs"]
            episodes.append(LengthEpisode(r["task_id"], lengths[r["task_id"]], lcs, lcs == 1.0))
            rollouts[r["task_id"]] = rollouts.get(r["task_id"], 0) + 1
    return length_bucket_summary(episodes, edges, sorted({1, max(rollouts.values())}))


@dataclass
class Config:
    """The command line of this script."""

    eval_dirs: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="EVAL_DIR")]
    """The evaluations' run folders (``textgym eval --output-dir``)."""
    edges: str
    """Inclusive upper bounds of the buckets but the last, comma-separated, e.g. 32 or 32,64."""

    def __post_init__(self) -> None:
        if not self.eval_dirs:
            raise ValueError("name at least one EVAL_DIR")
        if not all(e.strip().isdigit() for e in self.edges.split(",")):
            raise ValueError(f"--edges takes comma-separated integers, got {self.edges!r}")

    @property
    def bounds(self) -> list[int]:
        """``--edges`` as integers."""
        return [int(e) for e in self.edges.split(",")]


def main(argv: Sequence[str] | None = None) -> None:
    args = script_config(Config, argv, "reverse_text_buckets.py", __doc__)
    result = {path: buckets(Path(path), args.bounds) for path in args.eval_dirs}
    for path, rows in result.items():
        for row in rows:
            lcs = row["lcs"]
            print(
                f"{'/'.join(Path(path).parts[-2:]):>14} {row['bucket']:>7} "
                f"{row['tasks']:>4} tasks  lcs {lcs['mean']:.3f} ± {lcs['stderr']:.3f}"
            )
    Path("buckets.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
