"""The GRPO update before and after a change, side by side in one run: ``update_packing.py`` of
two commits (``--before``, ``--after``: HEAD by default), alternating.

Each commit's tree is exported with ``git archive`` into a temporary folder (so edits under
way in the checkout neither break nor change what runs), and its ``update_packing.py`` runs in
a child process whose editable-install finder is pointed at that tree (``textgym``,
``textgym.algos``, ...): the two versions share the virtual environment and nothing else. Rounds alternate the order (before, after; after, before; ...), each child
times ``--alternations`` updates per mode after its own warm-up, and the load average is
recorded before each child (other jobs on a shared machine make single figures noisy: compare
the medians and their spread, and the ratio within a round). The losses of the two versions
must agree to float rounding (same trajectories, learning rate 1e-9): equal results.

Usage::

    python benchmarks/update_before_after.py --before 2844720 --rounds 3 \\
        -- --threads 1 --alternations 2 --micro-batch-tokens 2048

(From the ``benchmarks`` folder. The children's own JSONs carry no commit, their trees being
no checkout: this record names both.)
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _provenance import REPO_ROOT, dist_version, git, machine_info, write_result

from textgym.cli.usage import fail, script_config

#: Run a script with the editable finder's folders moved to another tree (argv: tree, script,
#: its arguments). setuptools' editable finder keeps them in a module-level MAPPING.
_LAUNCH = """
import runpy, sys
tree, script = sys.argv[1], sys.argv[2]
sys.path[:] = [p for p in sys.path if p not in ("", ".", sys.argv[3])]  # no checkout on the path
finder = next(m for n, m in sys.modules.items() if n.startswith("__editable__") and "textgym" in n)
for name, path in list(finder.MAPPING.items()):
    finder.MAPPING[name] = path.replace(sys.argv[3], tree)
sys.argv = [script, *sys.argv[4:]]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""


def _export(rev: str, into: Path) -> None:
    """The tree of commit ``rev`` written into ``into`` (``git archive``)."""
    tar = subprocess.run(["git", "archive", rev], cwd=REPO_ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")


def _child(tree: Path, output: Path, argv: list[str]) -> dict[str, Any]:
    """Run ``tree``'s update_packing.py with ``argv``; its JSON record."""
    script = str(tree / "benchmarks" / "update_packing.py")
    command = [sys.executable, "-c", _LAUNCH, str(tree), script, str(REPO_ROOT)]
    subprocess.run([*command, *argv, "--output", str(output)], check=True, cwd=tree)
    return json.loads(output.read_text())


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: every timed update of the version's children, median, mean, spread, losses."""
    modes: dict[str, dict[str, list[float]]] = {}
    for record in records:
        for mode, result in record["runs"][0]["modes"].items():
            entry = modes.setdefault(mode, {"update_s": [], "loss": []})
            entry["update_s"] += result["update_s"]
            entry["loss"] += result["loss"]
    return {
        mode: {
            "update_s": entry["update_s"],
            "median_s": statistics.median(entry["update_s"]),
            "mean_s": statistics.fmean(entry["update_s"]),
            "min_s": min(entry["update_s"]),
            "max_s": max(entry["update_s"]),
            "stdev_s": statistics.stdev(entry["update_s"]) if len(entry["update_s"]) > 1 else 0.0,
            "loss_median": statistics.median(entry["loss"]),
        }
        for mode, entry in modes.items()
    }


@dataclasses.dataclass
class Config:
    """The command line of this benchmark (``update_packing.py``'s own options after ``--``)."""

    before: str
    """The earlier commit (any git revision)."""
    after: str = "HEAD"
    """The later commit."""
    rounds: int = 3
    """Children per version."""
    output: str = str(REPO_ROOT / "benchmarks" / "results" / "update_before_after_cpu.json")
    """The JSON record."""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {self.rounds}")


def _rounds(
    shas: dict[str, str], rounds: int, child_args: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Export both commits, then run one child per version and round, the order alternating;
    each version's child JSONs and the load average before each child."""
    records: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    loads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="update_before_") as scratch:
        trees = {version: Path(scratch) / version for version in shas}
        for version, tree in trees.items():
            _export(shas[version], tree)
        for round_ in range(rounds):
            for version in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                print(f"round {round_ + 1}: {version}", flush=True)
                loads.append({"round": round_ + 1, "version": version, "load": os.getloadavg()[0]})
                out = Path(scratch) / f"{version}_{round_}.json"
                records[version].append(_child(trees[version], out, child_args))
    return records, loads


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = script_config(Config, argv[:split], "update_before_after.py", __doc__)
    child_args = argv[split + 1 :]
    shas = {
        v: git("rev-parse", "--verify", "--quiet", f"{getattr(args, v)}^{{commit}}")
        for v in ("before", "after")
    }
    for version, sha in shas.items():
        if sha is None:
            fail(f"--{version} {getattr(args, version)!r} is not a commit of this repository")
    records, loads = _rounds(shas, args.rounds, child_args)
    summary = {version: _summary(recs) for version, recs in records.items()}
    ratios = {
        mode: summary["before"][mode]["median_s"] / summary["after"][mode]["median_s"]
        for mode in summary["after"]
        if mode in summary["before"]
    }
    first = records["after"][0]
    record = {
        "benchmark": "update_before_after",
        "before_commit": shas["before"],
        "after_commit": shas["after"],
        "versions": {p: dist_version(p) for p in ("torch", "transformers", "peft")},
        "machine": machine_info(),
        "device": first["device"],
        "dtype": first.get(
            "dtype", "bfloat16 autocast" if "--cpu-bf16" in child_args else "float32"
        ),
        "weights": first["weights"],
        "model": first["runs"][0]["model"],
        "sequences": first["runs"][0]["sequences"],
        "layout": first["runs"][0]["layout"],
        "child_args": child_args,
        "rounds": args.rounds,
        "noise": "2 shared CPU cores, other jobs running: single times vary; compare medians "
        "with their spread (min/max/stdev) and the per-child load averages",
        "speedup_median_before_over_after": ratios,
        "modes": summary,
        "load_avg_1m_before_each_child": loads,
        "load_avg_1m_in_children": {
            v: [r["runs"][0]["load_avg_1m_before_each_update"] for r in recs]
            for v, recs in records.items()
        },
    }
    write_result(args.output, record)
    for mode, ratio in ratios.items():
        b, a = summary["before"][mode], summary["after"][mode]
        print(
            f"{mode:14s} before {b['median_s']:.2f} s [{b['min_s']:.2f}-{b['max_s']:.2f}]  "
            f"after {a['median_s']:.2f} s [{a['min_s']:.2f}-{a['max_s']:.2f}]  {ratio:.2f}x  "
            f"loss {b['loss_median']:.6g} / {a['loss_median']:.6g}"
        )


if __name__ == "__main__":
    main()
