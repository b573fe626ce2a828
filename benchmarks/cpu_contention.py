"""Speed of CPU work when the machine is shared: OpenMP wait policies under busy neighbours.

Runs a workload in a fresh process while ``N`` neighbour processes spin on the CPU, for each
OpenMP wait policy, alternating policies within a round so slow drifts of the machine's load
hit them alike:

* ``default``: libgomp's own behaviour (waiting threads spin about 300,000 times before they
  sleep; the variables are set to the empty string, which libgomp ignores and ``textgym``'s CLI
  leaves alone);
* ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep at once);
* ``spin10k``: ``GOMP_SPINCOUNT=10000`` (a short spin, then sleep);
* ``spin10k_1thread``: the short spin and ``OMP_NUM_THREADS=1``;
* ``cli``: none of these variables set, so ``textgym``'s CLI chooses
  (:func:`textgym.cli.cpu_share.share_the_cpu`: on a busy machine the short spin and one
  thread per free core). With ``main-job``, the other policies fix the wait policy only; the
  CLI may still set the thread count.

Workloads: ``micro`` (12 linear layers of Gemma 3 270M's widths at 32 rows, the shape of a
batched decode step, for ``--seconds``; steps per second) and ``main-job`` (the README's main
job, ``textgym eval ... --policy hf --model gemma-3-270m``, with ``--episodes``; wall seconds).

    python benchmarks/cpu_contention.py --workload micro --neighbours 0 1 4
    python benchmarks/cpu_contention.py --workload main-job --policies cli --repeats 1 --neighbours 0 1 4
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import REPO_ROOT, git, git_dirty, machine_info, write_result  # noqa: E402

from textgym.cli.usage import script_config  # noqa: E402

Policy = Literal["default", "passive", "spin10k", "spin10k_1thread", "cli"]

#: Environment variables per policy (libgomp's; other OpenMP runtimes ignore them).
POLICIES: dict[Policy, dict[str, str]] = {
    "default": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": ""},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": ""},
    "spin10k": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "10000"},
    "spin10k_1thread": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "10000", "OMP_NUM_THREADS": "1"},
    "cli": {},  # neither variable set: the CLI's own choice (_short_openmp_spin)
}

_MICRO = """
import sys, time, torch
torch.manual_seed(0)
up = [torch.nn.Linear(640, 2048) for _ in range(6)]
down = [torch.nn.Linear(2048, 640) for _ in range(6)]
x = torch.randn(32, 640)
def step():
    h = x
    for a, b in zip(up, down):
        h = b(torch.nn.functional.gelu(a(h))) + x
with torch.no_grad():
    for _ in range(10):
        step()
    began, n = time.perf_counter(), 0
    while time.perf_counter() - began < float(sys.argv[1]):
        step()
        n += 1
print(n / (time.perf_counter() - began))
"""


def _neighbours(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _run(workload: str, policy: Policy, args: Config) -> dict[str, Any]:
    env = {**os.environ, **POLICIES[policy]}
    if policy == "cli":
        for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS"):
            env.pop(name, None)
    if workload == "micro":
        command = [sys.executable, "-c", _MICRO, str(args.seconds)]
    else:
        command = [
            *("textgym", "eval", "textgym/TicTacToe-v0", "--policy", "hf"),
            *("--model", "gemma-3-270m", "--episodes", str(args.episodes)),
            *("--max-new-tokens", "64", "--output-dir", f"/tmp/cpu_contention_{policy}"),
            "--overwrite",
        ]
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{workload} ({policy}) failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = {"wall_s": round(wall, 2)}
    if workload == "micro":
        result["steps_per_s"] = round(float(done.stdout.split()[-1]), 2)
    return result


@dataclass
class Config:
    """The command line of this benchmark."""

    workload: Literal["micro", "main-job"] = "micro"
    """What runs beside the neighbours (see the module docstring)."""
    neighbours: tuple[int, ...] = (0, 1, 4)
    """Counts of spinning neighbour processes, one set of rows each."""
    policies: tuple[Policy, ...] = tuple(POLICIES)
    """OpenMP wait policies, alternating within each repeat."""
    repeats: int = 2
    """Rounds over the policies per neighbour count."""
    seconds: float = 4.0
    """micro: seconds per run."""
    episodes: int = 20
    """main-job: episodes per run."""
    note: str = ""
    """What else ran on the machine (kept in the JSON)."""
    output: str = "benchmarks/results/cpu_contention.json"
    """JSON path, relative to the repository."""


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "cpu_contention.py", __doc__)

    rows: list[dict] = []

    def save(complete: bool) -> None:  # after every row: a cut-off run keeps what it measured
        write_result(
            REPO_ROOT / args.output,
            {
                "benchmark": "cpu_contention",
                "commit": git("rev-parse", "HEAD"),
                "dirty": git_dirty(),
                "machine": machine_info(),
                "settings": {k: v for k, v in asdict(args).items() if k != "output"},
                "complete": complete,
                "rows": rows,
            },
        )

    for count in args.neighbours:
        spinners = _neighbours(count)
        try:
            time.sleep(0.5)
            for repeat in range(args.repeats):
                for policy in args.policies:
                    load = os.getloadavg()[0]
                    result = _run(args.workload, policy, args)
                    row = {"neighbours": count, "policy": policy, "repeat": repeat}
                    rows.append({**row, "load_1m_before": round(load, 2), **result})
                    print(rows[-1], flush=True)
                    save(complete=False)
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    save(complete=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
