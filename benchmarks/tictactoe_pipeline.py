"""The headline pipeline: baseline -> SFT warm-up on expert games -> GRPO, evaluated per stage.

Runs exactly what the README's commands run, through the same library functions, and writes
one JSON with the table (win/draw/loss and invalid rates against the random and the optimal
opponent after each stage), the commands, the machine, and copies of the metrics and plots of
both training stages.

    # CPU, the tiny model (what CI-sized hardware can do; about 25 minutes on 2 cores)
    python benchmarks/tictactoe_pipeline.py --model tiny --prompt-style compact

    # the headline on a CUDA GPU
    python benchmarks/tictactoe_pipeline.py --model gemma-3-270m --prompt-style full \\
        --games 2000 --sft-epochs 2 --sft-lr 2e-5 --grpo-steps 200 --grpo-lr 2e-6 \\
        --max-new-tokens 64 --eval-temperature 0

The result goes to ``benchmarks/results/tictactoe_pipeline_{model}_{device}.json`` and the
plots to ``benchmarks/results/tictactoe_pipeline_{model}_{device}/``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

import gymnasium as gym

import textgym  # noqa: F401
from _provenance import REPO_ROOT, git, machine_info, write_result  # sibling module of this script
from textgym.algos import grpo, sft
from textgym.algos.common import resolve_device
from textgym.collect import sft_record
from textgym.models import load_model
from textgym.policies import MinimaxPolicy
from textgym.policies.hf import HFPolicy
from textgym.rollout import rollout

STOP = ["</move>"]


def evaluate_stage(model_name: str, args: argparse.Namespace, device) -> dict[str, float]:
    """Both opponents, ``args.eval_episodes`` games each."""
    model, tokenizer = load_model(model_name, device=device)
    policy = HFPolicy(
        model,
        tokenizer,
        max_new_tokens=args.max_new_tokens,
        temperature=args.eval_temperature,
        stop=STOP,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    make = lambda: gym.make("textgym/TicTacToe-v0", prompt_style=args.prompt_style)  # noqa: E731
    start = time.perf_counter()
    metrics = grpo.evaluate(
        make, policy, episodes=args.eval_episodes, seed=args.seed, batch_size=args.batch_size
    )
    return metrics | {"eval_seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompt-style", default="compact", choices=["full", "compact"])
    parser.add_argument("--games", type=int, default=1000, help="minimax games for SFT")
    parser.add_argument("--sft-epochs", type=int, default=4)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--grpo-steps", type=int, default=40)
    parser.add_argument("--grpo-lr", type=float, default=5e-4)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--eval-episodes", type=int, default=1000)
    parser.add_argument("--eval-temperature", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--work-dir", default="runs/pipeline")
    args = parser.parse_args()
    device = resolve_device(args.device)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    stages: dict[str, dict[str, float]] = {}
    timings: dict[str, float] = {}

    stages["baseline"] = evaluate_stage(args.model, args, device)
    print("baseline", stages["baseline"])

    start = time.perf_counter()
    make = functools.partial(
        gym.make, "textgym/TicTacToe-v0", random_move_prob=0.5, prompt_style=args.prompt_style
    )
    games = rollout(
        make, MinimaxPolicy(seed=args.seed, reasoning=False), list(range(args.games)), batch_size=64
    )
    data = work / "games.jsonl"
    data.write_text("".join(json.dumps(sft_record(g)) + "\n" for g in games))
    timings["collect_s"] = time.perf_counter() - start

    sft_dir = work / "sft"
    shutil.rmtree(sft_dir, ignore_errors=True)
    sft_config = sft.SFTConfig(
        data=str(data),
        model=args.model,
        output_dir=str(sft_dir),
        epochs=args.sft_epochs,
        batch_size=16,
        micro_batch_size=16,
        learning_rate=args.sft_lr,
        warmup_steps=5,
        device=str(device),
        seed=args.seed,
    )
    start = time.perf_counter()
    sft_summary = sft.train(sft_config)
    timings["sft_s"] = time.perf_counter() - start
    stages["sft"] = evaluate_stage(str(sft_dir), args, device)
    print("sft", stages["sft"])

    grpo_dir = work / "grpo"
    shutil.rmtree(grpo_dir, ignore_errors=True)
    grpo_config = grpo.GRPOConfig(
        model=str(sft_dir),
        output_dir=str(grpo_dir),
        env_kwargs={"prompt_style": args.prompt_style},
        opponent_skill=(0.5, 1.0),
        steps=args.grpo_steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.grpo_lr,
        eval_every=10,
        eval_episodes=64,
        eval_temperature=args.eval_temperature,
        seed=args.seed,
        device=str(device),
    )
    start = time.perf_counter()
    grpo.train(grpo_config)
    timings["grpo_s"] = time.perf_counter() - start
    stages["grpo"] = evaluate_stage(str(grpo_dir / f"checkpoint-{args.grpo_steps}"), args, device)
    print("grpo", stages["grpo"])

    name = f"tictactoe_pipeline_{args.model}_{device.type}"
    plots = REPO_ROOT / "benchmarks" / "results" / name
    shutil.rmtree(plots, ignore_errors=True)
    for stage, directory in (("sft", sft_dir), ("grpo", grpo_dir)):
        shutil.copytree(directory / "plots", plots / stage)
        shutil.copy(directory / "metrics.jsonl", plots / stage / "metrics.jsonl")

    table = [
        {"stage": stage, **{k: round(v, 4) for k, v in m.items() if k.endswith("_rate")}}
        for stage, m in stages.items()
    ]
    print(f"{'stage':<10}" + "".join(f"{k:>22}" for k in table[0] if k != "stage"))
    for row in table:
        print(f"{row['stage']:<10}" + "".join(f"{v:>22}" for k, v in row.items() if k != "stage"))
    write_result(
        REPO_ROOT / "benchmarks" / "results" / f"{name}.json",
        {
            "benchmark": "tictactoe_pipeline",
            "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain")),
            "command": shlex.join(["python", "benchmarks/tictactoe_pipeline.py", *sys.argv[1:]]),
            "settings": vars(args),
            "device": str(device),
            "machine": machine,
            "table": table,
            "stages": stages,
            "sft_summary": sft_summary,
            "timings": timings,
            "eval_note": f"{args.eval_episodes} games per opponent; random = random_move_prob 1.0, "
            f"optimal = 0.0; sampling temperature {args.eval_temperature}",
            "plots": str(plots.relative_to(REPO_ROOT)),
        },
    )


if __name__ == "__main__":
    main()
