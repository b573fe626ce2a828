"""Concatenate JSONL files into one, in the order given (the union stage of
recipes/mixture.toml): ``python recipes/concat_jsonl.py OUT IN [IN ...]``."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: concat_jsonl.py OUT IN [IN ...]")
    out, inputs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    lines = [line for p in inputs for line in p.read_text(encoding="utf-8").splitlines() if line]
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{out}: {len(lines)} records from {len(inputs)} files")


if __name__ == "__main__":
    main()
