"""The headline pipeline: baseline -> SFT warm-up on expert games -> GRPO, evaluated per stage.

Runs what the README's commands run, through the same library functions, in resumable stages
(each writes ``WORK/<stage>.json`` and is skipped when that file exists, so an interrupted run,
or the GPU suite's parts of under 9 minutes, go on where they stopped):

1. ``baseline``: evaluate the base model.
2. ``sft``: collect ``--games`` minimax games (opponent ``random_move_prob`` 0.5, no reasoning)
   and fine-tune on them (full weights, or LoRA with ``--lora-rank``).
3. ``eval-sft``: evaluate the SFT model.
4. ``grpo``: GRPO from the SFT model against opponents stratified in ``--opponent-skill``; with
   ``--grpo-time-limit`` it checkpoints and stops after that many minutes, and the next run
   resumes it.
5. ``eval-grpo``: evaluate the final GRPO checkpoint.
6. ``report``: the table, plots and one JSON with the commands, machine and device.

Each evaluation plays ``--eval-episodes`` games against the random opponent
(``random_move_prob`` 1) and as many against the optimal one (0), both greedily and sampling at
the training temperature, and reports win/draw/loss rates and the per-game rate of games with an
invalid move with binomial standard errors (``sqrt(p (1 - p) / n)``), the per-action invalid rate
and the format rate (actions that are well formed by the env's own check: think, then move).

    # CPU, the tiny model (what CI-sized hardware can do)
    python benchmarks/tictactoe_pipeline.py --model tiny --prompt-style compact
    # CI: every stage with the tiny model and small sizes, in seconds
    python benchmarks/tictactoe_pipeline.py --smoke --work-dir /tmp/pipeline
    # the headline on a CUDA GPU: see benchmarks/gpu_suite.py

The result goes to ``--output`` (default
``benchmarks/results/tictactoe_pipeline_{model}_{device}.json``) and the plots beside it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from _provenance import REPO_ROOT, git, machine_info, write_result  # sibling module of this script
from textgym.algos import grpo, sft
from textgym.algos.common import latest_checkpoint, resolve_device
from textgym.envs.tictactoe import TicTacToeEnv

import textgym  # noqa: F401
from textgym.collect import sft_record
from textgym.models import load_model
from textgym.policies import MinimaxPolicy
from textgym.policies.hf import HFPolicy
from textgym.rollout import rollout

STOP = ["</move>"]
STAGES = ("baseline", "sft", "eval-sft", "grpo", "eval-grpo", "report")
OPPONENTS = {"random": 1.0, "optimal": 0.0}


def _rate(hits: int, n: int) -> dict[str, float]:
    p = hits / n if n else math.nan
    return {"rate": p, "stderr": math.sqrt(p * (1 - p) / n) if n else math.nan}


def evaluate_stage(
    model_name: str, args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    """Greedy and sampled play against both opponents, ``args.eval_episodes`` games each."""
    model, tokenizer = load_model(model_name, device=device, dtype=args.eval_dtype)
    make = functools.partial(gym.make, "textgym/TicTacToe-v0", prompt_style=args.prompt_style)
    seeds = [10**9 + args.seed * 10**6 + i for i in range(args.eval_episodes)]
    result: dict[str, Any] = {"model": model_name, "dtype": str(model.dtype)}
    for mode, temperature in (("greedy", 0.0), ("sampled", args.temperature)):
        policy = HFPolicy(
            model,
            tokenizer,
            max_new_tokens=args.max_new_tokens,
            temperature=temperature,
            stop=STOP,
            batch_size=args.batch_size,
            seed=args.seed,
        )
        for opponent, prob in OPPONENTS.items():
            start = time.perf_counter()
            games = rollout(
                make, policy, seeds, batch_size=args.batch_size, options={"random_move_prob": prob}
            )
            policy.clear_cache()
            actions = [m["content"] for g in games for m in g.messages if m["role"] == "assistant"]
            invalid = sum(sum(g.invalid_actions) for g in games)
            result[f"{mode}/{opponent}"] = {
                **{
                    o: _rate(sum(g.outcome == o for g in games), len(games))
                    for o in ("win", "draw", "loss")
                },
                "invalid_game": _rate(sum(any(g.invalid_actions) for g in games), len(games)),
                "invalid_action": _rate(invalid, len(actions)),
                "format": _rate(sum(TicTacToeEnv.is_well_formed(a) for a in actions), len(actions)),
                "mean_return": sum(g.episode_return for g in games) / len(games),
                "games": len(games),
                "seconds": time.perf_counter() - start,
            }
    return result


def stage_baseline(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(args.model, args, device)


def stage_sft(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    start = time.perf_counter()
    make = functools.partial(
        gym.make, "textgym/TicTacToe-v0", random_move_prob=0.5, prompt_style=args.prompt_style
    )
    games = rollout(
        make, MinimaxPolicy(seed=args.seed, reasoning=False), list(range(args.games)), batch_size=64
    )
    data = work / "games.jsonl"
    data.write_text("".join(json.dumps(sft_record(g)) + "\n" for g in games))
    collect_s = time.perf_counter() - start
    shutil.rmtree(work / "sft", ignore_errors=True)
    config = sft.SFTConfig(
        data=str(data),
        model=args.model,
        output_dir=str(work / "sft"),
        epochs=args.sft_epochs,
        batch_size=16,
        micro_batch_size=args.micro_batch_size,
        learning_rate=args.sft_lr,
        warmup_steps=5,
        device=str(device),
        seed=args.seed,
        lora_rank=args.lora_rank,
    )
    start = time.perf_counter()
    summary = sft.train(config)
    return {"summary": summary, "collect_s": collect_s, "sft_s": time.perf_counter() - start}


def stage_eval_sft(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(str(work / "sft"), args, device)


def stage_grpo(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any] | None:
    """GRPO from the SFT model; ``None`` (no JSON) while the time limit stops it early."""
    out = work / "grpo"
    config = grpo.GRPOConfig(
        model=str(work / "sft"),
        output_dir=str(out),
        env_kwargs={"prompt_style": args.prompt_style},
        opponent_skill=tuple(args.opponent_skill),
        steps=args.grpo_steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        rollout_batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.grpo_lr,
        eval_every=args.eval_every,
        eval_episodes=args.eval_every_episodes,
        eval_temperature=0.0,
        seed=args.seed,
        device=str(device),
        lora_rank=args.lora_rank,
        save_every=max(1, args.grpo_steps // 10),
        resume=latest_checkpoint(out) is not None,
        time_limit_minutes=args.grpo_time_limit,
    )
    start = time.perf_counter()
    grpo.train(config)
    last = latest_checkpoint(out)
    if last is None or not last.name.endswith(f"-{args.grpo_steps}"):
        return None
    return {"checkpoint": str(last), "this_run_s": time.perf_counter() - start}


def stage_eval_grpo(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(str(latest_checkpoint(work / "grpo")), args, device)


def stage_report(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    stages = {s: json.loads((work / f"{s}.json").read_text()) for s in STAGES[:-1]}
    table = []
    for stage in ("baseline", "eval-sft", "eval-grpo"):
        for key, value in stages[stage].items():
            if isinstance(value, dict) and "win" in value:
                table.append(
                    {
                        "stage": stage,
                        "eval": key,
                        **{k: round(v["rate"], 4) for k, v in value.items() if isinstance(v, dict)},
                    }
                )
    print(
        f"{'stage':<10}{'eval':<18}"
        + "".join(f"{k:>15}" for k in table[0] if k not in ("stage", "eval"))
    )
    for row in table:
        print(
            f"{row['stage']:<10}{row['eval']:<18}"
            + "".join(f"{v:>15}" for k, v in row.items() if k not in ("stage", "eval"))
        )
    name = f"tictactoe_pipeline_{Path(args.model).name}_{device.type}"
    output = (
        Path(args.output) if args.output else REPO_ROOT / "benchmarks" / "results" / f"{name}.json"
    )
    plots = output.with_suffix("")
    shutil.rmtree(plots, ignore_errors=True)
    for stage in ("sft", "grpo"):
        shutil.copytree(work / stage / "plots", plots / stage)
        shutil.copy(work / stage / "metrics.jsonl", plots / stage / "metrics.jsonl")
    record = {
        "benchmark": "tictactoe_pipeline",
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "command": shlex.join(["python", "benchmarks/tictactoe_pipeline.py", *sys.argv[1:]]),
        "settings": vars(args),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "machine": machine_info(),
        "table": table,
        "stages": stages,
        "plots": str(plots),
    }
    write_result(output, record)
    return {"output": str(output)}


RUNNERS = {
    "baseline": stage_baseline,
    "sft": stage_sft,
    "eval-sft": stage_eval_sft,
    "grpo": stage_grpo,
    "eval-grpo": stage_eval_grpo,
    "report": stage_report,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument(
        "--stage",
        choices=("all", *STAGES),
        default="all",
        help="run one stage, or every stage whose result is missing",
    )
    parser.add_argument("--prompt-style", default="compact", choices=["full", "compact"])
    parser.add_argument("--games", type=int, default=1000, help="minimax games for SFT")
    parser.add_argument("--sft-epochs", type=int, default=4)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tuning")
    parser.add_argument("--grpo-steps", type=int, default=40)
    parser.add_argument("--grpo-lr", type=float, default=5e-4)
    parser.add_argument("--grpo-time-limit", type=float, default=None, help="minutes per run")
    parser.add_argument(
        "--opponent-skill",
        type=float,
        nargs=2,
        default=(0.5, 1.0),
        metavar=("LOW", "HIGH"),
        help="random_move_prob range of GRPO opponents",
    )
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling (training, eval)")
    parser.add_argument("--eval-episodes", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=10, help="GRPO steps between evals")
    parser.add_argument("--eval-every-episodes", type=int, default=64)
    parser.add_argument("--eval-dtype", default="float32", help="weights during evaluation")
    parser.add_argument("--batch-size", type=int, default=64, help="episodes in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--work-dir", default="runs/pipeline")
    parser.add_argument("--output", default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny model, small sizes (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.games, args.sft_epochs, args.grpo_steps = "tiny", 16, 1, 2
        args.tasks_per_step, args.group_size, args.eval_episodes = 2, 2, 4
        args.eval_every, args.eval_every_episodes, args.max_new_tokens = 1, 2, 8
        args.batch_size, args.micro_batch_size = 8, 4
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    for stage in STAGES if args.stage == "all" else (args.stage,):
        done = work / f"{stage}.json"
        if done.exists() and stage != "report":
            print(f"{stage}: done ({done})")
            continue
        began = time.perf_counter()
        result = RUNNERS[stage](args, work, device)
        if result is None:
            print(f"{stage}: stopped at its time limit; run again to resume")
            return 0
        result["stage_seconds"] = time.perf_counter() - began
        done.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{stage}: {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
