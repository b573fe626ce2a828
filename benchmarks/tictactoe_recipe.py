"""The tic-tac-toe recipe study (issue 23): one GRPO arm per command, then one table of all arms.

Each arm changes one knob of a shared base recipe (the CPU LoRA pipeline's GRPO settings,
``recipes/tictactoe.toml``) and starts from the same model, so arms differ only in that knob
and in sampling noise. ``python benchmarks/tictactoe_recipe.py --list`` names them:

- opponent curriculum: the ``random_move_prob`` range (``control`` keeps the committed mastery
  phase's ``[0, 0.25]``; ``curriculum_0_1`` spans a fully random to the optimal opponent,
  stratified over each step's groups);
- reward shaping: ``win_speed`` adds :class:`textgym.wrappers.WinSpeedBonus` (a faster-win
  bonus, as the minimax's own scoring);
- opponent styles: ``styles`` trains against a mix of rule-based and optimal players
  (``TicTacToe-v0``'s ``opponent`` list);
- sampling temperature, group size and batch size, loss type (``cispo``, ``gspo``; the base
  is ``dapo``), LoRA vs full fine-tuning, and the agent's mark.

``run ARM`` trains (resuming an interrupted run in ``--work-dir/ARM``), evaluates the last
checkpoint greedily with ``tictactoe_eval.py`` (both marks separately; ``--eval-games`` per
row and mark) and writes ``RESULTS/ARM.json``: the settings, the training curve from
``metrics.jsonl``, the evaluation rows, the training time and the machine. ``table`` reads every
arm's JSON, prints the comparison (rates with binomial standard errors) and draws the curves to
``RESULTS/curves.png``. ``RESULTS`` is ``--results`` (default ``WORK/results``); with
``--update-results`` it defaults to ``benchmarks/results/recipe`` (read-only without it) and
``table`` also rewrites ``docs/mastery_study.md`` between its ``recipe-table`` markers. A
record or plot is replaced only when it is this script's own (``_study_outputs``); bad
arguments are one ``error:`` line, exit 2.

Examples::

    python benchmarks/tictactoe_recipe.py --list
    python benchmarks/tictactoe_recipe.py run curriculum_0_1 --steps 40 --eval-games 200
    python benchmarks/tictactoe_recipe.py table --update-results
    python benchmarks/tictactoe_recipe.py run win_speed --smoke --work-dir /tmp/recipe  # CI
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tictactoe_eval  # sibling script: the evaluation the claim needs
from _provenance import REPO_ROOT, git, machine_info
from _study_outputs import (
    OwnFiles,
    at_least,
    check_results_write,
    one_line_errors,
    own_record,
    run_main,
)

from textgym.algos import grpo
from textgym.algos.checkpoint_layout import latest_checkpoint
from textgym.algos.grpo_config import GRPOConfig
from textgym.checks import MAX_SEED
from textgym.errors import SetupError
from textgym.results import write_atomic, write_json

RESULTS = REPO_ROOT / "benchmarks" / "results" / "recipe"
TABLE_DOC = REPO_ROOT / "docs" / "mastery_study.md"
#: The committed CPU adapter, every arm's default start: the safe-expert SFT and GRPO adapter
#: (``master``) trained on by the ``league_one`` arm (docs/mastery_study.md). Earlier arms
#: started from ``master`` or the earlier recipe's mastery adapter, which the git history keeps.
START = "benchmarks/results/tictactoe_pipeline_gemma-3-270m_cpu_lora_safe/league"
#: Evaluation rows: the two ends of the training range and two players it never trained with.
OUTCOMES = ("win", "draw", "loss")
EVAL_ROWS = ("random", "optimal", "fork", "greedy_center")
#: Opponent styles of the ``styles`` arm: the minimax plus the out-of-distribution players of
#: ``tictactoe_eval.py`` except ``minimax_any`` (kept out of training to stay a held-out one).
TRAIN_STYLES = ("minimax", "fork", "greedy_center", "greedy_edge", "minimax_last")

#: The ``league`` arm's opponents: every style of ``textgym/TicTacToe-v0``, the held-out ones
#: included (issue 34 trains against the styles the master loses to).
LEAGUE_STYLES = (
    "minimax",
    "random",
    "minimax_any",
    "minimax_last",
    "safe_best",
    "fork",
    "greedy_center",
    "greedy_edge",
)

#: The ``league`` arm's changes, which ``league_one`` and ``league_pfsp`` build on.
LEAGUE: dict[str, Any] = {
    "env_kwargs": {
        "opponent": list(LEAGUE_STYLES),
        "start_boards": "critical",
        "start_board_prob": 0.5,
    },
    "opponent_random_move_prob": (0.0, 0.5),
    "learning_rate": 1e-4,
    "groups_per_step": 8,
}

#: The base recipe: the CPU LoRA pipeline's GRPO phase (recipes/tictactoe.toml).
BASE: dict[str, Any] = {
    "env_id": "textgym/TicTacToe-v0",
    "env_kwargs": {"prompt_style": "compact", "agent_mark": "random"},
    "opponent_random_move_prob": (0.0, 1.0),
    "learning_rate": 3e-5,
    "lora_rank": 16,
    "cpu_bf16": True,
    "groups_per_step": 4,
    "group_size": 8,
    "micro_batch_size": 8,
    "rollout_batch_size": 64,
    "max_new_tokens": 16,
    "temperature": 1.0,
    "loss_type": "dapo",
    "eval_every": 10,
    "eval_episodes": 32,
}


@dataclass(frozen=True)
class Arm:
    """One knob of the study: ``changes`` are ``GRPOConfig`` fields over :data:`BASE`
    (``env_kwargs`` merged key by key)."""

    knob: str
    what: str
    changes: dict[str, Any] = field(default_factory=dict)


ARMS: dict[str, Arm] = {
    "control": Arm(
        "curriculum",
        "the committed mastery phase continued: p in [0, 0.25]",
        {"opponent_random_move_prob": (0.0, 0.25)},
    ),
    "curriculum_0_1": Arm("curriculum", "p in [0, 1]: fully random to optimal, stratified"),
    "curriculum_random": Arm(
        "curriculum",
        "only fully random opponents (p = 1)",
        {"opponent_random_move_prob": (1.0, 1.0)},
    ),
    "win_speed": Arm(
        "shaping",
        "curriculum_0_1 + faster-win bonus (0.05 per empty cell left on a win)",
        {"wrappers": ("invalid_action_penalty", "win_speed_bonus")},
    ),
    "styles": Arm(
        "opponents",
        "curriculum_0_1 against a mix: " + ", ".join(TRAIN_STYLES),
        {"env_kwargs": {"opponent": list(TRAIN_STYLES)}},
    ),
    "temperature_0.7": Arm(
        "temperature", "curriculum_0_1 sampled at T = 0.7", {"temperature": 0.7}
    ),
    "group_16": Arm(
        "group size",
        "curriculum_0_1, 2 groups of 16 (same 32 episodes a step)",
        {"groups_per_step": 2, "group_size": 16},
    ),
    "batch_64": Arm("batch size", "curriculum_0_1, 8 groups of 8", {"groups_per_step": 8}),
    "cispo": Arm("loss", "curriculum_0_1 with the CISPO loss", {"loss_type": "cispo"}),
    "gspo": Arm("loss", "curriculum_0_1 with the GSPO loss", {"loss_type": "gspo"}),
    "full_ft": Arm(
        "LoRA vs full",
        "curriculum_0_1, full fine-tuning at lr 5e-6",
        {"lora_rank": 0, "learning_rate": 5e-6},
    ),
    "mark_X": Arm("marks", "curriculum_0_1 playing only X", {"env_kwargs": {"agent_mark": "X"}}),
    "mark_O": Arm("marks", "curriculum_0_1 playing only O", {"env_kwargs": {"agent_mark": "O"}}),
    "league": Arm(
        "opponents + start states",
        "every opponent style, p in [0, 0.5]; half the episodes start from a critical position; "
        "lr 1e-4, 8 groups of 8",
        LEAGUE,
    ),
    # The league arm's diagnosis: 47-71% of its groups had equal rewards and the sampled
    # entropy was 0.02-0.03 nats/token, so a wrong greedy move was almost never sampled
    # otherwise. Hotter rollouts in larger groups, mostly from critical positions, and a
    # faster LoRA step (the training log-probs use the same temperature).
    "league_hot": Arm(
        "exploration",
        "the league at T = 1.5, 4 groups of 16, 75% critical starts, lr 2e-4",
        {
            "env_kwargs": {
                "opponent": list(LEAGUE_STYLES),
                "start_boards": "critical",
                "start_board_prob": 0.75,
            },
            "opponent_random_move_prob": (0.0, 0.5),
            "learning_rate": 2e-4,
            "temperature": 1.5,
            "groups_per_step": 4,
            "group_size": 16,
        },
    ),
    # The league folded onto master lost play at rank 16 (docs/mastery_study.md), and the exact
    # fold (rank 32) is too large to commit: the league's settings training master's own
    # adapter, so the result is one rank-16 adapter on the base.
    "league_one": Arm(
        "opponents + start states",
        "the league, training the master adapter itself (one rank-16 adapter on the base)",
        {**LEAGUE, "continue_adapter": True},
    ),
    # Issue 34's league weighted by the policy's current loss rate against each style,
    # re-measured every step from its own training episodes (textgym.algos.league).
    "league_pfsp": Arm(
        "opponent priority",
        "league_one with each group's style drawn by the policy's recent loss rate against it",
        {**LEAGUE, "continue_adapter": True, "opponent_priority": "loss"},
    ),
    # The league's groups were 70-88% flat (equal rewards): DAPO's dynamic sampling plays up to
    # three more rounds of 8 groups a step so each update has 8 informative groups.
    "league_dynamic": Arm(
        "dynamic sampling",
        "league_one with up to 3 extra rollout rounds a step until 8 groups differ in reward",
        {**LEAGUE, "continue_adapter": True, "dynamic_sampling_rounds": 3},
    ),
    # RL's reach (issue 34): the same league from a weaker start, the 2-epoch safe SFT
    # (--init its adapter), which loses most games to the optimal player.
    "league_weak_sft": Arm(
        "start policy",
        "league_one from the 2-epoch safe SFT instead of master",
        {**LEAGUE, "continue_adapter": True},
    ),
    # Issue 34's start states aimed at the misreads: the league's critical starts replaced by
    # the positions the start policy's greedy move gets wrong in the critical exam
    # (tictactoe_eval.py --exam-set critical; run with --start-boards-from that JSON).
    "league_misreads": Arm(
        "start states",
        "league_one, half the episodes starting where the start policy's greedy move is unsafe",
        {**LEAGUE, "continue_adapter": True},
    ),
    # The critical exam's probe: where the greedy move is unsafe a T = 1 sample is safe 6-7% of
    # the time, so a group of 8 holds a safe move about one time in four. The same episodes a
    # step in 2 groups of 32, so more groups at a misread position hold a safe move to learn.
    "league_misreads_wide": Arm(
        "group size",
        "league_misreads with 2 groups of 32 instead of 8 groups of 8",
        {**LEAGUE, "continue_adapter": True, "groups_per_step": 2, "group_size": 32},
    ),
}

#: Arms whose start boards come from ``--start-boards-from``.
NEEDS_START_BOARDS = ("league_misreads", "league_misreads_wide")


#: Evaluation rows of ``tictactoe_eval.py`` that are an opponent style of the env under another
#: name (the two ends of the minimax's strength).
ROW_STYLES = {"optimal": "minimax", "random": "random"}


def prioritised_league(
    results: dict[str, Any], styles: tuple[str, ...] = LEAGUE_STYLES, *, slots: int = 40
) -> list[str]:
    """A league weighted by the policy's measured loss rate against each style: the env's
    ``opponent`` list (drawn uniformly per episode), each style repeated ``1 + round(slots x
    loss rate)`` times, so a style the policy never loses to keeps one slot and one it always
    loses to gets ``slots + 1``. The weights are measured once, from an evaluation before the
    run; ``--opponent-priority loss`` (:class:`textgym.algos.league.OpponentLeague`, the
    ``league_pfsp`` arm) re-measures them from each step's own episodes instead.

    Args:
        results: ``results`` of a ``tictactoe_eval.py`` JSON; the greedy rows are read, the
            loss rate of a style averaged over the marks played. A style without a row keeps
            one slot.
        styles: The league's styles, in order.
        slots: The extra slots of a style lost to every game (>= 0).

    Raises:
        ValueError: ``slots`` < 0, or no greedy results.
    """
    if slots < 0 or "greedy" not in results:
        raise ValueError(f"Expected slots >= 0 and greedy results, got {slots}, {list(results)}")
    losses: dict[str, list[float]] = {}
    for row, marks in results["greedy"].items():
        style = ROW_STYLES.get(row, row)
        losses.setdefault(style, []).extend(m["loss"]["rate"] for m in marks.values())
    league = []
    for style in styles:
        rates = losses.get(style, [0.0])
        league += [style] * (1 + round(slots * sum(rates) / len(rates)))
    return league


def misread_boards(exam: dict[str, Any]) -> list[str]:
    """The boards of a ``tictactoe_eval.py --positions`` JSON where the greedy move was unsafe,
    both marks, in the exam's order.

    Raises:
        ValueError: no greedy exam in the JSON, or no unsafe move in it.
    """
    greedy = exam.get("positions", {}).get("greedy")
    if not greedy:
        raise ValueError("Expected a tictactoe_eval.py --positions JSON with a greedy exam")
    boards = [u["board"] for mark in greedy for u in greedy[mark]["unsafe"]]
    if not boards:
        raise ValueError("The exam has no unsafe greedy move: no start boards to train from")
    return boards


def _read_json(path: str, flag: str) -> Any:
    """The JSON document at ``path`` (a regular file of at most 64 MiB).

    Raises:
        SetupError: missing, not a regular file, too large, or not JSON (one line).
    """
    file = Path(path)
    if not file.is_file() or file.stat().st_size > 64 * 2**20:
        raise SetupError(f"{flag} {path[:200]} is not a regular file of at most 64 MiB")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise SetupError(
            f"{flag} {path[:200]} could not be read as JSON ({' '.join(str(exc).split())[:200]})"
        ) from None


def arm_config(name: str, args: argparse.Namespace) -> GRPOConfig:
    """The ``GRPOConfig`` of arm ``name``: :data:`BASE`, the arm's changes, then the command's
    model, steps, seed and output folder. With ``--league-from EVAL.json`` the env's opponent
    list is :func:`prioritised_league` of that evaluation; with ``--start-boards-from
    EXAM.json`` its start boards are :func:`misread_boards` of that exam.

    Raises:
        KeyError: an unknown arm.
    """
    settings = {**BASE, **ARMS[name].changes}
    settings["env_kwargs"] = {**BASE["env_kwargs"], **ARMS[name].changes.get("env_kwargs", {})}
    if args.league_from:
        evaluation = _read_json(args.league_from, "--league-from")
        try:
            settings["env_kwargs"]["opponent"] = prioritised_league(evaluation["results"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SetupError(
                f"--league-from {args.league_from[:200]} is not a tictactoe_eval.py record "
                f"with greedy rows ({' '.join(str(exc).split())[:200]})"
            ) from None
    if args.start_boards_from:
        exam = _read_json(args.start_boards_from, "--start-boards-from")
        try:
            settings["env_kwargs"]["start_boards"] = misread_boards(exam)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SetupError(
                f"--start-boards-from {args.start_boards_from[:200]}: "
                f"{' '.join(str(exc).split())[:200]}"
            ) from None
    out = Path(args.work_dir) / name
    if args.smoke:  # the tiny model: small batches, no bf16; LoRA only where the arm has it
        settings.update(cpu_bf16=False, eval_every=0, eval_episodes=4, rollout_batch_size=16)
        settings.update(
            groups_per_step=2, micro_batch_size=8, lora_rank=min(settings["lora_rank"], 8)
        )
        settings["continue_adapter"] = False  # the tiny model is no adapter to continue
    return GRPOConfig(
        model=args.init,
        output_dir=str(out),
        steps=args.steps,
        seed=args.seed,
        save_every=max(1, args.steps // 4),
        resume=latest_checkpoint(out) is not None,
        progress=not args.smoke,
        tensorboard=False,
        **settings,
    )


def read_curve(metrics: Path) -> list[dict[str, Any]]:
    """The training curve: per step, reward and outcome rates; at evaluations, the eval rates."""
    keep = ("reward_mean", "win_rate", "draw_rate", "loss_rate", "invalid_rate", "step_time_s")
    # Why a step did or did not move the policy (docs/mastery_study.md, issue 34).
    keep += ("zero_variance_fraction", "reward_std", "advantage_abs_mean", "grad_norm")
    keep += ("entropy", "sampled_entropy", "kl_to_start")
    curve = []
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        picked = {
            k: v for k, v in row.items() if k in keep or k.startswith(("random/", "optimal/"))
        }
        curve.append({"step": row["step"], "stage": row.get("stage"), **picked})
    return curve


def run_arm(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train arm ``name``, evaluate its last checkpoint, write and return its record."""
    config = arm_config(name, args)
    commit = git("rev-parse", "HEAD")  # the code that trains (HEAD may move while it runs)
    load = [os.getloadavg()[0]]
    start = time.perf_counter()
    grpo.train(config)  # resumes (or only returns) when the folder holds a checkpoint
    wall_s = time.perf_counter() - start
    load.append(os.getloadavg()[0])
    curve = read_curve(Path(config.output_dir) / "metrics.jsonl")
    run_record = json.loads((Path(config.output_dir) / "run.json").read_text())
    checkpoint = latest_checkpoint(Path(config.output_dir))
    eval_json = Path(config.output_dir) / "eval.json"
    eval_argv = [
        "--model",
        str(checkpoint),
        "--decoding",
        "greedy",
        "--games",
        str(args.eval_games),
    ]
    eval_argv += ["--rows", *args.eval_rows, "--marks", *args.eval_marks, "--seed", str(args.seed)]
    eval_argv += ["--output", str(eval_json)]
    eval_argv += ["--positions"] if args.positions else []
    eval_argv += ["--max-new-tokens", str(config.max_new_tokens)]
    if not args.smoke:
        eval_argv += ["--dtype", args.eval_dtype]
    tictactoe_eval.main(eval_argv)
    evaluation = json.loads(eval_json.read_text())
    record = {
        "benchmark": "tictactoe_recipe",
        "arm": name,
        "knob": ARMS[name].knob,
        "what": ARMS[name].what,
        "init": args.init,
        "steps": args.steps,
        "episodes_per_step": config.groups_per_step * config.group_size,
        # What the trainer recorded when the run started (run.json): the truth for a run
        # begun by another command (e.g. ``textgym train`` with the same settings).
        "config": run_record["config"],
        "train_command": run_record["command"],
        # The GRPO steps' own time (rollout + update), summed from metrics.jsonl: right for a
        # run resumed over several invocations, and without the in-run evaluations.
        "train_seconds": sum(c["step_time_s"] for c in curve if c["stage"] == "train"),
        "wall_seconds_this_invocation": wall_s,
        "load_avg_1m_before_after": load,
        "curve": curve,
        "eval": evaluation["results"],
        "eval_games_per_row_and_mark": args.eval_games,
        "commit": commit,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine_info(),
        "smoke": args.smoke,
    }
    out = Path(args.results) / f"{name}.json"
    _check_record(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, record)  # temp beside, renamed over it
    print(f"wrote {out}")
    return record


def _check_record(path: Path) -> None:
    """Refuse to replace ``path`` unless it is absent or a record of this script.

    Raises:
        SetupError: ``path`` is something else (nothing is replaced).
    """
    if (path.exists() or path.is_symlink()) and not (
        path.is_file() and not path.is_symlink() and own_record(path, "tictactoe_recipe")
    ):
        raise SetupError(
            f"{path} exists and is not a tictactoe_recipe record; nothing was replaced: "
            "move it away or choose another --results"
        )


def _both_marks(rows: dict[str, Any], outcome: str) -> tuple[float, float]:
    """Rate of ``outcome`` over both marks' games (equal counts), with its binomial stderr."""
    hits = sum(rows[m][outcome]["rate"] * rows[m]["games"] for m in rows)
    games = sum(rows[m]["games"] for m in rows)
    p = hits / games
    return p, math.sqrt(p * (1 - p) / games)


def _cell(rows: dict[str, Any]) -> str:
    win, draw, loss = (_both_marks(rows, o) for o in ("win", "draw", "loss"))
    return f"{100 * win[0]:.0f} / {100 * draw[0]:.0f} / {100 * loss[0]:.0f} (±{100 * loss[1]:.1f})"


def markdown_table(records: list[dict[str, Any]]) -> str:
    """One row per arm: W / D / L % (both marks) per evaluation row, with the loss stderr."""
    head = "| arm | knob | steps | s / step | " + " | ".join(EVAL_ROWS) + " | invalid % |"
    lines = [head, "|" + "---|" * (5 + len(EVAL_ROWS))]
    for r in records:
        greedy = r["eval"]["greedy"]
        cells = [_cell(greedy[row]) if row in greedy else "-" for row in EVAL_ROWS]
        actions = sum(greedy[row][m]["actions"] for row in greedy for m in greedy[row])
        invalid = sum(
            greedy[row][m]["invalid_action"]["rate"] * greedy[row][m]["actions"]
            for row in greedy
            for m in greedy[row]
        )
        # The median step time: totals on a shared machine are dominated by its slowest steps.
        times = sorted(c["step_time_s"] for c in r["curve"] if c["stage"] == "train")
        median = f"{times[len(times) // 2]:.0f}" if times else "-"
        lines.append(
            f"| {r['arm']} | {r['knob']} | {r['steps']} | {median} | "
            + " | ".join(cells)
            + f" | {100 * invalid / max(actions, 1):.2f} |"
        )
    return "\n".join(lines)


def per_mark_table(records: list[dict[str, Any]]) -> str:
    """One row per arm: W / D / L % per evaluation row and mark."""
    columns = [(row, mark) for row in EVAL_ROWS for mark in ("X", "O")]
    lines = ["| arm | " + " | ".join(f"{row}, {mark}" for row, mark in columns) + " |"]
    lines.append("|" + "---|" * (1 + len(columns)))
    for r in records:
        greedy, cells = r["eval"]["greedy"], []
        for row, mark in columns:
            x = greedy.get(row, {}).get(mark)
            rates = "-" if x is None else [f"{100 * x[o]['rate']:.1f}" for o in OUTCOMES]
            cells.append(rates if rates == "-" else " / ".join(rates))
        lines.append(f"| {r['arm']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gain_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Markdown: per evaluation row and mark found in both ``tictactoe_eval.py`` results,
    W / D / L % before and after, the distinct games after, invalid % after, and the change in
    the loss rate with ``z``, the change over its combined standard error (binomial; 3 is the
    issue's bar). Where both sides' outcomes never vary (a deterministic opponent against a
    greedy policy: one distinct game) the standard error is 0 and ``z`` is written ``-``: the
    games are one line played again, not independent samples.

    Args:
        before, after: ``results`` of two ``tictactoe_eval.py`` JSONs (``{decoding: {row:
            {mark: rates}}}``), read greedy.
    """
    lines = [
        "| opponent | mark | games | before: W / D / L % | after: W / D / L % "
        "| distinct games after | invalid % after | loss change (z) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    b, a = before["greedy"], after["greedy"]
    for row in [r for r in a if r in b]:
        for mark in [m for m in ("X", "O") if m in a[row] and m in b[row]]:
            x, y = b[row][mark], a[row][mark]
            cells = [" / ".join(f"{100 * r[o]['rate']:.1f}" for o in OUTCOMES) for r in (x, y)]
            change = y["loss"]["rate"] - x["loss"]["rate"]
            se = math.hypot(x["loss"]["stderr"], y["loss"]["stderr"])
            z = f"{change / se:+.1f}" if se > 0 else ("0" if change == 0 else "-")
            lines.append(
                f"| {row} | {mark} | {y['games']} | {cells[0]} | {cells[1]} "
                f"| {y.get('distinct_games', '-')} | {100 * y['invalid_action']['rate']:.2f} "
                f"| {100 * change:+.1f} ({z}) |"
            )
    return "\n".join(lines)


def start_record(results: Path) -> list[dict[str, Any]]:
    """The start's evaluation (``start_eval.json``, a ``tictactoe_eval.py`` record of the model
    every arm starts from) as a 0-step row, or nothing when it is missing."""
    path = results / "start_eval.json"
    if not path.exists():
        return []
    evaluation = json.loads(path.read_text())["results"]
    return [{"arm": "start", "knob": "-", "steps": 0, "curve": [], "eval": evaluation}]


def _between(doc: str, name: str, text: str) -> str:
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if begin not in doc or end not in doc:
        raise ValueError(f"{TABLE_DOC} has no {begin} ... {end} markers to write the table between")
    return doc[: doc.index(begin) + len(begin)] + "\n" + text + "\n" + doc[doc.index(end) :]


def write_table(args: argparse.Namespace) -> str:
    """Rewrite the tables in :data:`TABLE_DOC` (between its ``recipe-table`` and
    ``recipe-per-mark`` markers) and the curves plot from the arms' JSON."""
    paths = sorted(p for p in Path(args.results).glob("*.json") if not p.name.startswith("."))
    records = [json.loads(p.read_text()) for p in paths]  # not the manifest of our files
    records = [
        r for r in records if r.get("benchmark") == "tictactoe_recipe" and not r.get("smoke")
    ]
    rows = start_record(Path(args.results)) + records
    table = markdown_table(rows)
    if args.update_results and TABLE_DOC.exists():
        doc = _between(TABLE_DOC.read_text(), "recipe-table", table)
        write_atomic(TABLE_DOC, _between(doc, "recipe-per-mark", per_mark_table(rows)))
    png = plot_curves(records)
    if png is not None:
        curves = Path(args.results) / "curves.png"
        if args.update_results:  # the committed folder, replaced when asked
            write_atomic(curves, png)
        else:
            OwnFiles(Path(args.results), "tictactoe_recipe").write(curves, png)
    print(table)
    return table


def plot_curves(records: list[dict[str, Any]]) -> bytes | None:
    """A PNG of the training reward per step (moving average of 5) and the in-run eval rates
    per arm; ``None`` without records."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not records:
        return None
    fig, (ax_r, ax_w, ax_d) = plt.subplots(1, 3, figsize=(15, 4))
    for r in records:
        train = [c for c in r["curve"] if c["stage"] == "train"]
        reward = [c["reward_mean"] for c in train]
        windows = [reward[max(0, i - 4) : i + 1] for i in range(len(reward))]
        smooth = [sum(w) / len(w) for w in windows]
        ax_r.plot([c["step"] for c in train], smooth, label=r["arm"])
        evals = [c for c in r["curve"] if c["stage"] == "eval"]
        ax_w.plot(
            [c["step"] for c in evals],
            [c["random/win_rate"] for c in evals],
            marker="o",
            label=r["arm"],
        )
        ax_d.plot(
            [c["step"] for c in evals],
            [1 - c["optimal/loss_rate"] for c in evals],
            marker="o",
            label=r["arm"],
        )
    ax_r.set(title="training reward (mean of 5 steps)", xlabel="step")
    ax_w.set(title="wins vs random (in-run greedy eval)", xlabel="step")
    ax_d.set(title="non-losses vs optimal (in-run greedy eval)", xlabel="step")
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def _merged(paths: list[str]) -> dict[str, Any]:
    """The ``results`` of several ``tictactoe_eval.py`` JSONs, their rows side by side."""
    merged: dict[str, Any] = {}
    for path in paths:
        for decoding, rows in json.loads(Path(path).read_text())["results"].items():
            merged.setdefault(decoding, {}).update(rows)
    return merged


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = one_line_errors(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    parser.add_argument("command", nargs="?", choices=["run", "table", "gain"], default=None)
    parser.add_argument("arm", nargs="?", default=None, help="with run: one of --list")
    parser.add_argument("--list", action="store_true", help="print the arms and exit")
    parser.add_argument(
        "--before", nargs="+", default=[], help="with gain: tictactoe_eval.py JSONs of the start"
    )
    parser.add_argument(
        "--after", nargs="+", default=[], help="with gain: tictactoe_eval.py JSONs after RL"
    )
    parser.add_argument("--init", default=START, help="model every arm starts from")
    parser.add_argument(
        "--league-from",
        default=None,
        help="a tictactoe_eval.py JSON of the start: opponents weighted by its loss rates",
    )
    parser.add_argument(
        "--start-boards-from",
        default=None,
        help="a tictactoe_eval.py --positions JSON: start from its unsafe greedy positions",
    )
    parser.add_argument("--steps", type=at_least(1), default=40)
    parser.add_argument(
        "--eval-games", type=at_least(1), default=200, help="games per row and mark"
    )
    parser.add_argument(
        "--eval-rows", nargs="+", default=list(EVAL_ROWS), help="tictactoe_eval.py --rows"
    )
    parser.add_argument(
        "--eval-marks", nargs="+", default=["X", "O"], help="tictactoe_eval.py --marks"
    )
    parser.add_argument(
        "--eval-dtype",
        default="bfloat16",
        help="tictactoe_eval.py --dtype (float32 where the CPU has no native bfloat16)",
    )
    parser.add_argument("--positions", action="store_true", help="add the position exam")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--work-dir", default="runs/recipe")
    parser.add_argument(
        "--results",
        default=None,
        help="records folder (default WORK/results; with --update-results benchmarks/results/recipe)",
    )
    parser.add_argument(
        "--update-results",
        action="store_true",
        help="write into benchmarks/results/ and docs/ (read-only without it)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model, 2 steps (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.init = "tiny" if args.init == START else args.init
        args.steps, args.eval_games = min(args.steps, 2), min(args.eval_games, 4)
    if not args.list and args.command is None:
        parser.error("expected a command: run ARM, table, or --list")
    if args.command == "run" and args.arm not in ARMS:
        parser.error(f"expected an arm in {', '.join(ARMS)}, got {args.arm!r}")
    if args.command == "run" and args.arm in NEEDS_START_BOARDS and not args.start_boards_from:
        parser.error(f"arm {args.arm} needs --start-boards-from EXAM.json")
    if args.seed > MAX_SEED:
        parser.error(f"expected --seed <= {MAX_SEED} (the seed range of every command)")
    if args.results is None:
        args.results = str(RESULTS if args.update_results else Path(args.work_dir) / "results")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_results_write(Path(args.results), "--results", update_results=args.update_results)
    if args.list:
        for name, arm in ARMS.items():
            print(f"{name:18} {arm.knob:13} {arm.what}")
        return 0
    if args.command == "table":
        write_table(args)
        return 0
    if args.command == "gain":
        print(gain_table(*(_merged(paths) for paths in (args.before, args.after))))
        return 0
    run_arm(args.arm, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
