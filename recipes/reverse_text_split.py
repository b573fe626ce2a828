"""Split a ReverseText corpus into train.jsonl and test.jsonl in the current folder (the data
stage of recipes/reverse_text.toml), and with ``--valid-fraction`` a valid.jsonl carved from
the training side (held-out texts for ``textgym sft --eval-data``, never the test ones).

Each passage goes wholly to one side by a hash of its id
(:func:`passage_split`: SHA-256, stable when passages are added or reordered), with up to ``--windows`` word-aligned
pieces of it (``--min-chars`` to ``--max-chars`` characters; ids ``PASSAGE~wN``) on the same
side: whole passages first, then every passage's first piece, then every second, so that a
``--limit`` prefix spreads over the passages. Each text is kept once, and a training text that
is also a test text is dropped from training.

    python recipes/reverse_text_split.py --corpus paragraphs.jsonl --windows 1 --max-chars 64
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from textgym.cli.usage import fail, parse_config
from textgym.envs.reverse_text.env import load_passages
from textgym.errors import UsageError


def passage_split(task_id: str, test_fraction: float = 0.2, valid_fraction: float = 0.0) -> str:
    """``"test"`` for about ``test_fraction`` of task ids, ``"valid"`` for about
    ``valid_fraction`` more, ``"train"`` for the others.

    The first 8 bytes of ``sha256(task_id)`` read as an integer, over ``2**64``, is compared
    with ``test_fraction`` (then with ``test_fraction + valid_fraction``): deterministic,
    independent of the other passages, and the test side is the same whatever
    ``valid_fraction`` is (the valid side only takes training passages).

    Raises:
        ValueError: a fraction outside ``[0, 1]``, or the two summing past 1.
    """
    if not (0.0 <= test_fraction <= 1.0 and 0.0 <= valid_fraction <= 1.0 - test_fraction):
        raise ValueError(
            f"Expected test_fraction in [0, 1] and valid_fraction in [0, 1 - test_fraction], "
            f"got {test_fraction} and {valid_fraction}"
        )
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return (
        "test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"
    )


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


@dataclass
class Config:
    """The command line of this script."""

    corpus: str | None = None
    """JSONL of {id, text} (None: the bundled corpus)."""
    windows: int = 0
    """Word-aligned pieces per passage, besides the whole passage."""
    min_chars: int = 16
    """Shortest piece, in characters."""
    max_chars: int = 64
    """Longest piece, in characters."""
    test_fraction: float = 0.2
    """About this share of the passages goes to test.jsonl."""
    valid_fraction: float = 0.0
    """About this share more goes to valid.jsonl (0: no valid.jsonl)."""

    def __post_init__(self) -> None:
        passage_split("", self.test_fraction, self.valid_fraction)  # checks the fractions


def main() -> None:
    try:
        args = parse_config(Config, sys.argv[1:], "reverse_text_split.py", __doc__.split("\n\n")[0])
    except UsageError as exc:
        fail(str(exc))
    try:
        passages = load_passages(data_path=args.corpus) if args.corpus else load_passages()
    except (OSError, ValueError) as exc:  # a missing or malformed corpus: one line, no traceback
        raise SystemExit(f"reverse_text_split.py: {exc}") from None
    sides: dict[str, list[list[dict[str, str]]]] = {"train": [], "test": [], "valid": []}
    for p in passages:
        rows = [{"id": p.task_id, "text": p.text}]
        if args.windows:
            pieces = passage_windows(
                p.text, args.windows, args.min_chars, args.max_chars, seed=p.task_id
            )
            rows += [{"id": f"{p.task_id}~w{k}", "text": w} for k, w in enumerate(pieces)]
        sides[passage_split(p.task_id, args.test_fraction, args.valid_fraction)].append(rows)
    seen: set[str] = set()
    for side in ("test", "valid", "train") if args.valid_fraction else ("test", "train"):
        ordered = [
            rows[k] for k in range(1 + args.windows) for rows in sides[side] if k < len(rows)
        ]
        ordered = [r for r in ordered if not (r["text"] in seen or seen.add(r["text"]))]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered)
        Path(f"{side}.jsonl").write_text(text, encoding="utf-8")
        print(f"{side}.jsonl: {len(ordered)} texts")


if __name__ == "__main__":
    main()
