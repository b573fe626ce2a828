"""Split a ReverseText corpus into train.jsonl and test.jsonl in the current folder (the data
stage of recipes/reverse_text.toml).

Each passage goes wholly to one side by a hash of its id
(:func:`textgym.envs.reverse_text.lengths.passage_split`), with up to ``--windows`` word-aligned
pieces of it (``--min-chars`` to ``--max-chars`` characters; ids ``PASSAGE~wN``) on the same
side: whole passages first, then every passage's first piece, then every second, so that a
``--limit`` prefix spreads over the passages. Each text is kept once, and a training text that
is also a test text is dropped from training.

    python recipes/reverse_text_split.py --corpus paragraphs.jsonl --windows 1 --max-chars 64
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from textgym.envs.reverse_text.env import load_passages
from textgym.envs.reverse_text.lengths import passage_split, passage_windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=None, help="JSONL of {id, text} (None: bundled)")
    parser.add_argument("--windows", type=int, default=0, help="pieces per passage")
    parser.add_argument("--min-chars", type=int, default=16)
    parser.add_argument("--max-chars", type=int, default=64)
    parser.add_argument("--test-fraction", type=float, default=0.2)
    args = parser.parse_args()
    passages = load_passages(data_path=args.corpus) if args.corpus else load_passages()
    sides: dict[str, list[list[dict[str, str]]]] = {"train": [], "test": []}
    for p in passages:
        rows = [{"id": p.task_id, "text": p.text}]
        if args.windows:
            pieces = passage_windows(
                p.text, args.windows, args.min_chars, args.max_chars, seed=p.task_id
            )
            rows += [{"id": f"{p.task_id}~w{k}", "text": w} for k, w in enumerate(pieces)]
        sides[passage_split(p.task_id, args.test_fraction)].append(rows)
    seen: set[str] = set()
    for side in ("test", "train"):
        ordered = [
            rows[k] for k in range(1 + args.windows) for rows in sides[side] if k < len(rows)
        ]
        ordered = [r for r in ordered if not (r["text"] in seen or seen.add(r["text"]))]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered)
        Path(f"{side}.jsonl").write_text(text, encoding="utf-8")
        print(f"{side}.jsonl: {len(ordered)} texts")


if __name__ == "__main__":
    main()
