"""ReverseText by passage length: a deterministic train/test split and results per length bucket.

Pure helpers for training and evaluating a small model on ``textgym/ReverseText-v0``:

- :func:`passage_split` puts a passage in ``"train"`` or ``"test"`` by a hash of its task id
  (SHA-256, so the split is the same on every machine and does not move when passages are
  added, removed or reordered), for a held-out evaluation on passages never trained on.
- :func:`passage_windows` cuts word-aligned pieces of a passage at a chosen length, so a corpus
  of long paragraphs yields many short texts (more expert data and a larger held-out set for a
  small model trained on short texts; the pieces of a held-out passage stay held out).
- :func:`length_bucket_summary` groups episodes by the length of their passage in characters and
  reports, per bucket, the mean LCS reward with its standard error, the exact-reversal rate with
  its binomial standard error, and pass@k when each passage was played several times.

Neither touches the env: the env's behaviour is unchanged, and a split is applied by writing
each side to a JSONL file that the env reads with ``data_path`` (its ids kept through
``id_field``).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from textgym.evaluation import mean_stderr, pass_at_k

__all__ = ["LengthEpisode", "length_bucket_summary", "passage_split", "passage_windows"]


def passage_split(task_id: str, test_fraction: float = 0.2) -> str:
    """``"test"`` for about ``test_fraction`` of task ids, ``"train"`` for the others.

    The first 8 bytes of ``sha256(task_id)`` read as an integer, over ``2**64``, is compared
    with ``test_fraction``: deterministic, independent of the other passages.

    Raises:
        ValueError: ``test_fraction`` outside ``[0, 1]``.
    """
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"Expected test_fraction in [0, 1], got {test_fraction}")
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"


def passage_windows(
    text: str, count: int, min_chars: int, max_chars: int, *, seed: str
) -> list[str]:
    """Up to ``count`` distinct word-aligned pieces of ``text``, each ``min_chars`` to
    ``max_chars`` characters long.

    A piece starts at a word and ends at the end of a word (runs of non-space characters, so
    punctuation stays with its word), with the text's own spacing inside. Each draw picks a
    start word and a target length uniformly, then keeps the longest run of whole words from
    that start that fits the target; draws that give a piece shorter than ``min_chars`` or one
    already drawn are skipped (at most ``4 * count`` draws), so a short text may give fewer
    pieces, or none. Deterministic in ``seed`` (e.g. the passage's task id) on every machine.

    Raises:
        ValueError: ``count < 0`` or not ``1 <= min_chars <= max_chars``.
    """
    if count < 0 or not 1 <= min_chars <= max_chars:
        raise ValueError(
            f"Expected count >= 0 and 1 <= min_chars <= max_chars, got {count}, {min_chars} "
            f"and {max_chars}"
        )
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    rng = random.Random(hashlib.sha256(seed.encode("utf-8")).digest())
    pieces: list[str] = []
    for _ in range(4 * count):
        if len(pieces) == count or not words:
            break
        first = rng.randrange(len(words))
        target = rng.randint(min_chars, max_chars)
        start, end = words[first][0], None
        for _, word_end in words[first:]:
            if word_end - start > target:
                break
            end = word_end
        piece = text[start:end] if end is not None else ""
        if len(piece) >= min_chars and piece not in pieces:
            pieces.append(piece)
    return pieces


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
