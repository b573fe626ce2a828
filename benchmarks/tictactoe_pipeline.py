"""The headline pipeline: baseline -> SFT warm-up on expert games -> GRPO, evaluated per stage.

Runs what the README's commands run, through the same library functions, in resumable stages
(each writes ``WORK/<stage>.json`` and is skipped when that file exists, so an interrupted run,
or the GPU suite's parts of under 9 minutes, go on where they stopped):

1. ``baseline``: evaluate the base model.
2. ``sft``: collect ``--games`` expert games (no reasoning) against opponents stratified over
   ``--sft-opponent-random-move-prob``, keep a subset that still covers every prompt
   (``--sft-cover``, :func:`textgym.collect.covering_records`) and fine-tune on it (full
   weights, or LoRA with ``--lora-rank``). The default expert is the mastery recipe's (issue
   23): :func:`~textgym.envs.tictactoe.opponent.safe_best_moves` with a fixed tie-break, the
   optimal moves that beat weak players most, one answer per position; ``--sft-expert minimax
   --sft-tie-break uniform --sft-opponent-random-move-prob 0.5 0.5 --no-sft-cover`` is the
   earlier data (uniform among the minimax's optimal moves, opponents at 0.5).
3. ``eval-sft``: evaluate the SFT model.
4. ``grpo``: GRPO from the SFT model against opponents stratified in ``--opponent-random-move-prob``; with
   ``--grpo-time-limit`` it checkpoints and stops after that many minutes, and the next run
   resumes it.
5. ``eval-grpo``: evaluate the final GRPO checkpoint.
6. ``mastery``: with ``--mastery-steps`` > 0, a second GRPO phase from that checkpoint against
   a league (issue 34): each group's opponent one of ``--mastery-opponents`` (every style of the
   env by default) at a ``random_move_prob`` in ``--mastery-random-move-prob``, a share
   ``--mastery-start-board-prob`` of its episodes starting from a critical position (one where
   a move can change the result), at ``--mastery-lr`` with ``--mastery-groups-per-step``
   groups. With LoRA it trains the GRPO adapter further (``continue_adapter``), so the result is
   still one adapter on the SFT model.
7. ``eval-mastery``: evaluate its final checkpoint.
8. ``report``: the table, plots and one JSON with the commands, machine and device; with LoRA
   (``--lora-rank``) the adapters of every stage are copied beside the JSON, each recording the
   one before it as its base, so ``textgym eval --model <results>/adapters/grpo`` loads the
   whole stack (a few MB per stage instead of the 1.1 GB model).

Each evaluation plays ``--eval-episodes`` games against the random opponent
(``random_move_prob`` 1) and as many against the optimal one (0), both greedily and sampling at
the training temperature, with the agent's mark drawn per game (``--agent-mark random``), and
reports win/draw/loss rates and the per-game rate of games with an invalid move with binomial
standard errors (``sqrt(p (1 - p) / n)``), the per-action invalid rate and the format rate
(actions that are exactly the answer the prompt asks for:
:func:`textgym.envs.tictactoe.parsing.is_answer`). ``sampled/train`` is the training objective:
sampled play against opponents spread evenly over ``--opponent-random-move-prob`` (10 strata), reported
as mean return with its standard error.

    # CPU, the tiny model (what CI-sized hardware can do)
    python benchmarks/tictactoe_pipeline.py --model tiny --prompt-style compact
    # CI: every stage with the tiny model and small sizes, in seconds (result in the work dir)
    python benchmarks/tictactoe_pipeline.py --smoke --work-dir /tmp/pipeline
    # the headline on a CUDA GPU: see benchmarks/gpu_suite.py

The result goes to ``--output`` (default ``WORK/tictactoe_pipeline_{model}_{device}.json``;
with ``--update-results``, ``benchmarks/results/``, which is read-only without it) and the plots
into the folder beside it, which is replaced only when it is this script's (``_study_outputs``).
An existing ``WORK/games.jsonl`` is replaced only by the same bytes, and ``WORK/sft`` only when
it holds nothing but an earlier textgym run; bad arguments are one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _provenance import (
    REPO_ROOT,
    git,
    git_dirty,
    machine_info,
    write_result,
)  # sibling module of this script
from _study_outputs import (
    at_least,
    check_results_write,
    claim_sibling_dir,
    clear_own_run,
    one_line_errors,
    own_record,
    run_main,
)
from safetensors.torch import load_file, save_file

import textgym  # noqa: F401
from textgym.algos import grpo, sft
from textgym.algos.checkpoint_layout import latest_checkpoint
from textgym.algos.grpo_config import GRPOConfig
from textgym.algos.model_loading import resolve_device
from textgym.builder import EnvRecipe
from textgym.collect import covering_records, sft_record
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.envs.tictactoe.env import OPPONENTS
from textgym.envs.tictactoe.expert import TIE_BREAKS
from textgym.envs.tictactoe.opponent import OPTIMAL_STYLES
from textgym.envs.tictactoe.parsing import is_answer
from textgym.errors import SetupError
from textgym.models import load_model
from textgym.policies.hf import HFPolicy
from textgym.rollout import rollout

STOP = ["</move>"]
STAGES = ("baseline", "sft", "eval-sft", "grpo", "eval-grpo", "mastery", "eval-mastery", "report")
EVAL_STAGES = ("baseline", "eval-sft", "eval-grpo", "eval-mastery")
#: Strata of the training-objective evaluation: opponents spread evenly over --opponent-random-move-prob.
TRAIN_STRATA = 10
#: Adapter files copied beside the result (the tokenizer is the base's; Gemma's is 33 MB).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
EVAL_OPPONENTS = {"random": 1.0, "optimal": 0.0}
#: What the report writes into the plots folder beside ``--output`` (paths inside it).
PLOT_FILES = ("*/*.png", "*/metrics.jsonl", *(f"adapters/*/{f}" for f in ADAPTER_FILES))


def stratum_probs(low: float, high: float) -> list[float]:
    """The ``random_move_prob`` of each of the :data:`TRAIN_STRATA` strata: the midpoints of
    equal slices of ``[low, high]``."""
    return [low + (k + 0.5) * (high - low) / TRAIN_STRATA for k in range(TRAIN_STRATA)]


def _stratify(seeds: list[int]) -> list[list[int]]:
    """Seed ``i`` of ``seeds`` goes to stratum ``i % TRAIN_STRATA``."""
    return [seeds[k::TRAIN_STRATA] for k in range(TRAIN_STRATA)]


def _rate(hits: int, n: int) -> dict[str, float]:
    p = hits / n if n else math.nan
    return {"rate": p, "stderr": math.sqrt(p * (1 - p) / n) if n else math.nan}


def _mean(values: list[float]) -> dict[str, float]:
    """Mean with its standard error (sample standard deviation / sqrt(n))."""
    n = len(values)
    mean = sum(values) / n if n else math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.nan
    return {"mean": mean, "stderr": math.sqrt(var / n) if n > 1 else math.nan}


def _summary(games: list[Any]) -> dict[str, Any]:
    actions = [m["content"] for g in games for m in g.messages if m["role"] == "assistant"]
    invalid = sum(sum(g.invalid_actions) for g in games)
    return {
        **{
            o: _rate(sum(g.outcome == o for g in games), len(games))
            for o in ("win", "draw", "loss")
        },
        "invalid_game": _rate(sum(any(g.invalid_actions) for g in games), len(games)),
        "invalid_action": _rate(invalid, len(actions)),
        "format": _rate(sum(is_answer(a) for a in actions), len(actions)),
        "return": _mean([g.episode_return for g in games]),
        "games": len(games),
    }


def evaluate_stage(
    model_name: str, args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    """Greedy and sampled play against both opponents, ``args.eval_episodes`` games each."""
    model, tokenizer = load_model(model_name, device=device, dtype=args.eval_dtype)
    make = EnvRecipe(
        "textgym/TicTacToe-v0", {"prompt_style": args.prompt_style, "agent_mark": args.agent_mark}
    ).make
    seeds = [10**9 + args.seed * 10**6 + i for i in range(args.eval_episodes)]
    strata = list(
        zip(stratum_probs(*args.opponent_random_move_prob), _stratify(seeds), strict=True)
    )
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
        plan = {f"{mode}/{opponent}": [(prob, seeds)] for opponent, prob in EVAL_OPPONENTS.items()}
        if mode == "sampled":  # the training objective: sampled, as in the rollouts
            plan[f"{mode}/train"] = strata
        for key, groups in plan.items():
            start = time.perf_counter()
            games = []
            for prob, group in groups:
                games += rollout(
                    make,
                    policy,
                    group,
                    batch_size=args.batch_size,
                    options={"random_move_prob": prob},
                )
                policy.clear_cache()
            result[key] = {**_summary(games), "seconds": time.perf_counter() - start}
    return result


def stage_baseline(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(args.model, args, device)


def stage_sft(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    start = time.perf_counter()
    make = EnvRecipe(
        "textgym/TicTacToe-v0", {"prompt_style": args.prompt_style, "agent_mark": args.agent_mark}
    ).make
    expert = MinimaxPolicy(
        seed=args.seed, reasoning=False, style=args.sft_expert, tie_break=args.sft_tie_break
    )
    # Opponents stratified over --sft-opponent-random-move-prob, as the training objective's.
    games = []
    probs = stratum_probs(*args.sft_opponent_random_move_prob)
    for prob, seeds in zip(probs, _stratify(list(range(args.games))), strict=True):
        games += rollout(make, expert, seeds, batch_size=64, options={"random_move_prob": prob})
    records = [sft_record(g) for g in sorted(games, key=lambda g: g.seed)]
    collected = len(records)
    if args.sft_cover:
        records = covering_records(records)
    data = work / "games.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in records)
    if data.exists() and (not data.is_file() or data.read_bytes() != text.encode()):
        raise SetupError(
            f"{data} exists and is not the games this stage collects (same settings, same "
            f"bytes); nothing was replaced: move it away or choose another --work-dir"
        )
    data.write_text(text)
    collect_s = time.perf_counter() - start
    clear_own_run(work / "sft", "--work-dir")
    config = sft.SFTConfig(
        data=str(data),
        model=args.model,
        output_dir=str(work / "sft"),
        epochs=args.sft_epochs,
        batch_size=args.sft_batch_size,
        micro_batch_size=args.micro_batch_size,
        learning_rate=args.sft_lr,
        warmup_steps=5,
        device=str(device),
        seed=args.seed,
        lora_rank=args.lora_rank,
        cpu_bf16=args.cpu_bf16,
    )
    start = time.perf_counter()
    summary = sft.train(config)
    return {
        "summary": summary,
        "games_collected": collected,
        "games_kept": len(records),
        "moves_kept": sum(m["role"] == "assistant" for r in records for m in r["messages"]),
        "collect_s": collect_s,
        "sft_s": time.perf_counter() - start,
    }


def stage_eval_sft(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(str(work / "sft"), args, device)


def _grpo_phase(
    args: argparse.Namespace,
    device: torch.device,
    *,
    model: Path,
    out: Path,
    random_move_prob: tuple[float, float],
    steps: int,
    league: bool = False,
) -> dict[str, Any] | None:
    """One GRPO phase (``league``: the mastery phase's settings); ``None`` (no JSON) while the
    time limit stops it early."""
    env_kwargs: dict[str, Any] = {"prompt_style": args.prompt_style, "agent_mark": args.agent_mark}
    phase: dict[str, Any] = {"learning_rate": args.grpo_lr, "groups_per_step": args.groups_per_step}
    if league:
        env_kwargs["opponent"] = list(args.mastery_opponents)
        if args.mastery_start_board_prob > 0:
            env_kwargs["start_boards"] = "critical"
            env_kwargs["start_board_prob"] = args.mastery_start_board_prob
        phase = {
            "learning_rate": args.mastery_lr,
            "groups_per_step": args.mastery_groups_per_step,
            "continue_adapter": args.lora_rank > 0 and args.continue_mastery,
        }
    config = GRPOConfig(
        model=str(model),
        output_dir=str(out),
        env_id="textgym/TicTacToe-v0",
        env_kwargs=env_kwargs,
        opponent_random_move_prob=random_move_prob,
        steps=steps,
        group_size=args.group_size,
        rollout_batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size,
        max_new_tokens=args.max_new_tokens,
        eval_every=args.eval_every,
        eval_episodes=args.eval_every_episodes,
        eval_temperature=0.0,
        seed=args.seed,
        device=str(device),
        lora_rank=args.lora_rank,
        cpu_bf16=args.cpu_bf16,
        save_every=max(1, steps // 10),
        resume=latest_checkpoint(out) is not None,
        time_limit_minutes=args.grpo_time_limit,
        **phase,
    )
    start = time.perf_counter()
    grpo.train(config)
    last = latest_checkpoint(out)
    if last is None or not last.name.endswith(f"-{steps}"):
        return None
    return {"checkpoint": str(last), "this_run_s": time.perf_counter() - start}


def stage_grpo(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any] | None:
    """GRPO from the SFT model against opponents in ``--opponent-random-move-prob``."""
    return _grpo_phase(
        args,
        device,
        model=work / "sft",
        out=work / "grpo",
        random_move_prob=tuple(args.opponent_random_move_prob),
        steps=args.grpo_steps,
    )


def stage_eval_grpo(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    return evaluate_stage(str(latest_checkpoint(work / "grpo")), args, device)


def stage_mastery(
    args: argparse.Namespace, work: Path, device: torch.device
) -> dict[str, Any] | None:
    """The second GRPO phase, from the last GRPO checkpoint, against the league."""
    if args.mastery_steps == 0:
        return {"skipped": "--mastery-steps 0"}
    return _grpo_phase(
        args,
        device,
        model=latest_checkpoint(work / "grpo"),
        out=work / "mastery",
        random_move_prob=tuple(args.mastery_random_move_prob),
        steps=args.mastery_steps,
        league=True,
    )


def stage_eval_mastery(
    args: argparse.Namespace, work: Path, device: torch.device
) -> dict[str, Any]:
    if args.mastery_steps == 0:
        return {"skipped": "--mastery-steps 0"}
    return evaluate_stage(str(latest_checkpoint(work / "mastery")), args, device)


def export_adapters(args: argparse.Namespace, work: Path, target: Path) -> dict[str, str]:
    """Copy the LoRA adapter of each trained stage to ``target/<stage>`` in bfloat16, chained
    by base.

    Each adapter records the one it was trained on as its base (``../sft`` for GRPO and for the
    mastery phase, which trains the GRPO adapter further; ``../grpo`` for a mastery adapter
    stacked on it, ``--no-continue-mastery``), so the folder moves as a whole and loads with
    ``load_model``.
    """
    sources = {"sft": work / "sft", "grpo": latest_checkpoint(work / "grpo")}
    if args.mastery_steps > 0:
        sources["mastery"] = latest_checkpoint(work / "mastery")
    continued = args.continue_mastery  # the mastery adapter is the GRPO one trained further
    bases = {"sft": args.model, "grpo": "../sft", "mastery": "../sft" if continued else "../grpo"}
    exported = {}
    for stage, source in sources.items():
        if source is None or not (source / ADAPTER_FILES[0]).is_file():
            break
        folder = target / stage
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / ADAPTER_FILES[0], folder / ADAPTER_FILES[0])
        # bfloat16 factors: half the bytes of the float32 training copy (issue 22: adapters were
        # 45 of the 49 MB tracked); peft casts them back to the model's dtype when loading.
        tensors = load_file(source / ADAPTER_FILES[1])
        save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, folder / ADAPTER_FILES[1])
        config = json.loads((folder / ADAPTER_FILES[0]).read_text())
        config["base_model_name_or_path"] = bases[stage]
        (folder / ADAPTER_FILES[0]).write_text(json.dumps(config, indent=2) + "\n")
        exported[stage] = str(folder)
    return exported


def stage_report(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    stages = {
        s: json.loads((work / f"{s}.json").read_text())
        for s in STAGES[:-1]
        if (work / f"{s}.json").exists()
    }
    table = []
    for stage in EVAL_STAGES:
        for key, value in stages.get(stage, {}).items():
            if isinstance(value, dict) and "win" in value:
                table.append(
                    {
                        "stage": stage,
                        "eval": key,
                        **{
                            k: round(v["rate"] if "rate" in v else v["mean"], 4)
                            for k, v in value.items()
                            if isinstance(v, dict)
                        },
                        "return_se": round(value["return"]["stderr"], 4),
                    }
                )
    if not table:
        raise SetupError(
            f"--stage report found no evaluation in --work-dir {work} (no "
            f"{', '.join(s + '.json' for s in EVAL_STAGES)}); run the other stages first"
        )
    print(
        f"{'stage':<14}{'eval':<18}"
        + "".join(f"{k:>15}" for k in table[0] if k not in ("stage", "eval"))
    )
    for row in table:
        print(
            f"{row['stage']:<14}{row['eval']:<18}"
            + "".join(f"{v:>15}" for k, v in row.items() if k not in ("stage", "eval"))
        )
    name = f"tictactoe_pipeline_{Path(args.model).name}_{device.type}"
    where = REPO_ROOT / "benchmarks" / "results" if args.update_results else work
    output = Path(args.output) if args.output else where / f"{name}.json"
    check_results_write(output, "--output", update_results=args.update_results)
    if output.exists() and not (own_record(output, "tictactoe_pipeline") and output.is_file()):
        raise SetupError(
            f"--output {output} exists and is not a tictactoe_pipeline record; nothing was "
            f"replaced: choose another --output"
        )
    plots = output.with_suffix("")
    claim_sibling_dir(plots, output, "tictactoe_pipeline", PLOT_FILES)
    for stage in ("sft", "grpo", "mastery"):
        if (work / stage / "plots").is_dir():
            shutil.copytree(work / stage / "plots", plots / stage)
            shutil.copy(work / stage / "metrics.jsonl", plots / stage / "metrics.jsonl")
    adapters = export_adapters(args, work, plots / "adapters") if args.lora_rank > 0 else {}
    record = {
        "benchmark": "tictactoe_pipeline",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "command": shlex.join(["python", "benchmarks/tictactoe_pipeline.py", *sys.argv[1:]]),
        "settings": vars(args),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "machine": machine_info(),
        "table": table,
        "stages": stages,
        "plots": str(plots),
        "adapters": adapters,
    }
    write_result(output, record)
    return {"output": str(output)}


RUNNERS = {
    "baseline": stage_baseline,
    "sft": stage_sft,
    "eval-sft": stage_eval_sft,
    "grpo": stage_grpo,
    "eval-grpo": stage_eval_grpo,
    "mastery": stage_mastery,
    "eval-mastery": stage_eval_mastery,
    "report": stage_report,
}


def _probability_range(
    parser: argparse.ArgumentParser, flag: str, default: tuple[float, float], help: str
) -> None:
    """A ``LOW HIGH`` pair of ``random_move_prob`` values."""
    parser.add_argument(
        flag, type=float, nargs=2, default=default, metavar=("LOW", "HIGH"), help=help
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = one_line_errors(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--model", default="tiny")
    parser.add_argument(
        "--stage",
        choices=("all", *STAGES),
        default="all",
        help="run one stage, or every stage whose result is missing",
    )
    parser.add_argument("--prompt-style", default="compact", choices=["full", "compact"])
    parser.add_argument(
        "--games", type=at_least(1), default=4000, help="expert games collected for SFT"
    )
    parser.add_argument(
        "--sft-expert",
        default="safe_best",
        choices=OPTIMAL_STYLES,
        help="the expert's style (safe_best: the optimal moves that beat weak players most)",
    )
    parser.add_argument("--sft-tie-break", default="first", choices=TIE_BREAKS)
    _probability_range(
        parser,
        "--sft-opponent-random-move-prob",
        (0.0, 1.0),
        "random_move_prob of the SFT games' opponents, stratified over games",
    )
    parser.add_argument(
        "--sft-cover",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep only a covering subset of the games (collect.covering_records)",
    )
    parser.add_argument("--sft-epochs", type=at_least(1), default=4)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch-size", type=at_least(1), default=16, help="games per SFT step")
    parser.add_argument("--lora-rank", type=at_least(0), default=0, help="0: full fine-tuning")
    parser.add_argument(
        "--cpu-bf16", action="store_true", help="bf16 autocast when training on an AMX/BF16 CPU"
    )
    parser.add_argument("--grpo-steps", type=at_least(1), default=40)
    parser.add_argument("--grpo-lr", type=float, default=5e-4)
    parser.add_argument("--grpo-time-limit", type=float, default=None, help="minutes per run")
    _probability_range(
        parser,
        "--opponent-random-move-prob",
        (0.5, 1.0),
        "random_move_prob range of GRPO opponents",
    )
    parser.add_argument(
        "--mastery-steps",
        type=at_least(0),
        default=0,
        help="second GRPO phase, the league (0: none)",
    )
    parser.add_argument(
        "--mastery-opponents",
        nargs="+",
        choices=OPPONENTS,
        default=list(OPPONENTS),
        help="the league: opponent styles, one drawn per group",
    )
    _probability_range(
        parser,
        "--mastery-random-move-prob",
        (0.0, 0.5),
        "random_move_prob range of the league's opponents",
    )
    parser.add_argument(
        "--mastery-start-board-prob",
        type=float,
        default=0.5,
        help="share of league episodes starting from a critical position (0: the empty board)",
    )
    parser.add_argument("--mastery-lr", type=float, default=1e-4)
    parser.add_argument(
        "--continue-mastery",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="LoRA: train the GRPO adapter further (one adapter), or stack a new one on it",
    )
    parser.add_argument("--mastery-groups-per-step", type=at_least(1), default=8)
    parser.add_argument(
        "--agent-mark", default="random", choices=["X", "O", "random"], help="SFT, GRPO, eval"
    )
    parser.add_argument("--groups-per-step", type=at_least(1), default=8)
    parser.add_argument("--group-size", type=at_least(2), default=8)
    parser.add_argument("--micro-batch-size", type=at_least(1), default=16)
    parser.add_argument("--max-new-tokens", type=at_least(1), default=16)
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling (training, eval)")
    parser.add_argument("--eval-episodes", type=at_least(1), default=500)
    parser.add_argument(
        "--eval-every", type=at_least(0), default=10, help="GRPO steps between evals"
    )
    parser.add_argument("--eval-every-episodes", type=at_least(1), default=64)
    parser.add_argument("--eval-dtype", default="float32", help="weights during evaluation")
    parser.add_argument("--batch-size", type=at_least(1), default=64, help="episodes in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--work-dir", default="runs/pipeline")
    parser.add_argument("--output", default=None, help="default WORK/tictactoe_pipeline_*.json")
    parser.add_argument(
        "--update-results",
        action="store_true",
        help="write into benchmarks/results/ (the default --output then): read-only without it",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model, small sizes (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.games, args.sft_epochs, args.grpo_steps = "tiny", 16, 1, 2
        args.groups_per_step, args.group_size, args.eval_episodes = 2, 2, 4
        args.eval_every, args.eval_every_episodes, args.max_new_tokens = 1, 2, 8
        args.batch_size, args.micro_batch_size = 8, 4
        args.mastery_steps = min(args.mastery_steps, 1)
        args.mastery_groups_per_step = 2
    return args


def _checked(args: argparse.Namespace) -> torch.device:
    """The device, after the checks ``argparse`` cannot make (probabilities, temperature).

    Raises:
        SetupError: a probability outside [0, 1], a range whose low end is above its high end,
            a negative temperature, or a device torch does not know or does not have.
    """
    for flag in ("sft_opponent_random_move_prob", "opponent_random_move_prob"):
        low, high = getattr(args, flag)
        if not 0 <= low <= high <= 1:
            name = "--" + flag.replace("_", "-")
            raise SetupError(
                f"expected {name} LOW HIGH with 0 <= LOW <= HIGH <= 1, got {low} {high}"
            )
    low, high = args.mastery_random_move_prob
    if not 0 <= low <= high <= 1 or not 0 <= args.mastery_start_board_prob <= 1:
        raise SetupError(
            "expected --mastery-random-move-prob and --mastery-start-board-prob in [0, 1]"
        )
    if not args.temperature >= 0:
        raise SetupError(f"expected --temperature >= 0, got {args.temperature}")
    try:
        return resolve_device(args.device)
    except (RuntimeError, ValueError) as exc:
        text = " ".join(str(exc).split())[:200]
        raise SetupError(
            f"expected --device auto, cpu, cuda or cuda:N, got {args.device[:40]!r} ({text})"
        ) from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = _checked(args)
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
    raise SystemExit(run_main(main))
