"""Each request family's success in EmailToolUse-v1 evaluations (the families stage of
recipes/email.toml): ``python recipes/email_families.py EVAL_DIR [EVAL_DIR ...]``.

Each task is regenerated from its id under the evaluation's env kwargs (its ``summary.json``),
so its request families are known (:data:`textgym.envs.email_tool_use.generator.FAMILIES`; a
task of several requests counts under each of its families). A task's score is the mean
``outcome`` of its rollouts. Prints one table and writes ``families.json`` in the current
folder: ``{EVAL_DIR: {family: {"tasks": n, "success": mean}}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from textgym.envs.email_tool_use.generator import generate_task

KNOBS = ("inbox_size", "distractors", "num_steps")


def families(eval_dir: Path) -> dict[str, dict[str, float]]:
    summary = json.loads((eval_dir / "summary.json").read_text(encoding="utf-8"))
    knobs = {k: v for k, v in (summary.get("env_kwargs") or {}).items() if k in KNOBS}
    scores: dict[str, list[float]] = {}
    with (eval_dir / "trajectories.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            outcome = record["component_totals"].get("outcome", 0.0)
            scores.setdefault(record["task_id"], []).append(outcome)
    by_family: dict[str, list[float]] = {}
    for task_id, values in scores.items():
        seed = int(task_id.removeprefix("email-"), 16)
        task = generate_task(np.random.default_rng(seed), **knobs)
        for family in {t.split("/")[0] for t in task.templates}:
            by_family.setdefault(family, []).append(sum(values) / len(values))
    return {f: {"tasks": len(v), "success": sum(v) / len(v)} for f, v in sorted(by_family.items())}


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: email_families.py EVAL_DIR [EVAL_DIR ...]")
    result = {path: families(Path(path)) for path in sys.argv[1:]}
    names = sorted({f for rows in result.values() for f in rows})
    heads = ["/".join(Path(p).parts[-2:]) for p in result]  # e.g. sft/greedy
    print("family".ljust(16) + "".join(h.rjust(14) for h in heads))
    for name in names:
        cells = [result[p].get(name, {}).get("success") for p in result]
        print(name.ljust(16) + "".join(("-" if c is None else f"{c:.2f}").rjust(14) for c in cells))
    Path("families.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
