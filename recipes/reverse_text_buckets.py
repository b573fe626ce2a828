"""ReverseText evaluations by passage length (the buckets stage of recipes/reverse_text.toml):
``python recipes/reverse_text_buckets.py --edges 32,64 EVAL_DIR [EVAL_DIR ...]``.

Each evaluation's passages (its ``summary.json``'s ``data_path``) are grouped by length into
buckets (``--edges``: inclusive upper bounds of all but the last), with the mean ``lcs``, the
exact-reversal rate and pass@1 / pass@k per bucket
(:func:`textgym.envs.reverse_text.lengths.length_bucket_summary`). Prints one line per
(evaluation, bucket) and writes ``buckets.json`` in the current folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from textgym.envs.reverse_text.lengths import LengthEpisode, length_bucket_summary


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--edges",
        type=lambda s: [int(e) for e in s.split(",")],
        required=True,
        help="comma-separated, e.g. 32 or 32,64",
    )
    parser.add_argument("eval_dirs", nargs="+")
    args = parser.parse_args()
    result = {path: buckets(Path(path), args.edges) for path in args.eval_dirs}
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
