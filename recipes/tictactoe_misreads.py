"""The positions a policy misreads, from a critical-position exam (the misreads stage of
recipes/tictactoe_o_seat.toml): ``python recipes/tictactoe_misreads.py EXAM.json``.

Reads the exam's greedy results (``positions.greedy.X`` and ``.O``: each critical position
where the greedy move was unsafe, ``benchmarks/results/recipe/critical_exam_league.json``'s
layout) and writes their boards, X's then O's in the exam's order, to ``misreads.json`` in the
current folder: a list for TicTacToe-v0's ``start_boards``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def misread_boards(exam: dict) -> list[str]:
    greedy = exam["positions"]["greedy"]
    return [
        unsafe["board"] for mark in ("X", "O") for unsafe in greedy.get(mark, {}).get("unsafe", [])
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tictactoe_misreads.py EXAM.json", file=sys.stderr)
        return 2
    boards = misread_boards(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    if not boards:
        print(f"tictactoe_misreads: {argv[0]} lists no unsafe greedy move", file=sys.stderr)
        return 2
    Path("misreads.json").write_text(json.dumps(boards) + "\n", encoding="utf-8")
    print(f"misreads.json: {len(boards)} boards")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
