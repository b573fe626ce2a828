"""The suite learns (issue 33): base eval -> SFT on expert data -> GRPO over a curriculum -> held-out eval.

One command per task, ``python benchmarks/task_pipeline.py TASK`` with ``TASK`` ``reverse_text``
(``textgym/ReverseText-v0``) or ``email`` (``textgym/EmailToolUse-v1``). Every stage runs the
``textgym`` command line in this process (:func:`textgym.cli.main`, the commands a user types),
writes ``WORK/<stage>.json`` and is skipped when that file exists, so an interrupted run goes
on where it stopped (GRPO resumes its curriculum stage from the last checkpoint):

1. ``base-eval``: evaluate ``--model`` on the held-out tasks.
2. ``sft-data``: expert episodes (ReverseText: ``textgym collect --policy gold``, the env's
   ``gold_completion``, each training passage up to the last curriculum length once; email:
   the generator's gold writes played by
   :class:`~textgym.envs.email_tool_use.expert.LookupExpertPolicy`, which first looks up the
   ids and addresses they need, or with ``--sft-expert gold`` ``textgym collect --policy gold``,
   which writes them unseen; ``--sft-episodes`` spread over the curriculum's difficulty
   settings, seeds from :data:`SFT_SEED`), as tool-calling conversations.
3. ``sft``: ``textgym sft`` on them (LoRA with ``--lora-rank``).
4. ``grpo``: ``textgym train`` with the env's own reward (no wrappers unless
   ``--grpo-wrappers`` names some), one run per curriculum
   stage (``--curriculum``: a JSON list of ``{"steps": N, "env_kwargs": {...}}``), each starting
   from the previous stage's final checkpoint (the first from the SFT model), each with its
   own seed (``--seed`` + stage index) so that no two stages train on the same tasks.
   ``--grpo-time-limit`` (minutes per run) checkpoints and stops; the next run resumes.
5. ``eval``: evaluate the SFT and the final GRPO model on the held-out tasks.
6. ``report``: ``textgym report`` of every run (``WORK/report.html``) and one result JSON
   (``--output``, default ``WORK/task_pipeline_{task}_{model}_{device}.json``; with
   ``--update-results`` ``benchmarks/results/``, read-only without it) with the commit, the
   machine, the settings, every stage, the RL-over-SFT differences and every SFT and GRPO
   metrics row (``curves``), plotted to a PNG beside it.

Output rules (issue 52, :mod:`_study_outputs`): a file the script writes in the work dir
(``data/*.jsonl``, ``sft_data.jsonl`` and its parts, the stage JSONs, ``report.html``) replaces
an existing one only when that holds the same bytes or what the script's manifest there
(``WORK/.task_pipeline-files.json``) records it wrote; ``--output`` only when it is a
task_pipeline record, and the PNG beside it only when that record names it with its bytes.
Anything else is refused in one line and left as it was; so is a bad argument (exit 2).

Held-out tasks. ReverseText: the bundled corpus is split by a hash of each passage's task id
(:func:`textgym.envs.reverse_text.lengths.passage_split`, ``--test-fraction``) into
``WORK/data/train.jsonl`` and ``test.jsonl``; SFT and GRPO see only the first, evaluations only
the second, at the last curriculum stage's ``max_chars`` (the trained length), with results per
length bucket (edges: the curriculum's ``max_chars``). Email: evaluation seeds start at
:data:`EVAL_SEED`, apart from GRPO's (``seed * 10**6 + ...``, its in-training evaluations at
``10**9 + ...``) and SFT's; each evaluation also counts the task ids it shares with the
training episodes (0 expected), and diagnoses every tool call against the gold calls
(:mod:`textgym.envs.email_tool_use.diagnostics`).

Each evaluation plays greedily (one rollout per task) and sampled at ``--temperature``
(``--rollouts-per-task`` K rollouts per task: pass@1 .. pass@K). Success and its standard error
are computed over tasks (a task's score: the mean of its rollouts' task component, ``lcs`` or
``outcome``), so rollouts of one task do not count as independent.

    # the smoke test's sizes: every stage with the tiny model, in a minute or so
    python benchmarks/task_pipeline.py reverse_text --smoke --work-dir /tmp/tp-reverse
    # Gemma 3 270M with LoRA on the CPU (hours; see docs/suite_learning.md)
    python benchmarks/task_pipeline.py reverse_text --model gemma-3-270m --work-dir runs/suite_reverse
    python benchmarks/task_pipeline.py email --model gemma-3-270m --work-dir runs/suite_email
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _provenance import REPO_ROOT, git, git_dirty, machine_info, write_result  # sibling module
from _study_outputs import (
    OwnFiles,
    at_least,
    check_results_write,
    claim_sibling_file,
    one_line_errors,
    own_record,
    run_main,
    sha256_of,
)

from textgym.algos.checkpoint_layout import latest_checkpoint
from textgym.algos.metric_rows import METRICS_FILENAME, read_metrics
from textgym.algos.model_loading import resolve_device
from textgym.builder import EnvRecipe
from textgym.checks import MAX_SEED, excerpt
from textgym.cli import main as textgym_cli
from textgym.collect import sft_record
from textgym.envs.email_tool_use.diagnostics import (
    diagnose_tool_calls,
    summarize_call_diagnoses,
    task_of,
)
from textgym.envs.email_tool_use.expert import LookupExpertPolicy
from textgym.envs.reverse_text import load_passages
from textgym.envs.reverse_text.lengths import (
    LengthEpisode,
    length_bucket_summary,
    passage_split,
    passage_windows,
)
from textgym.errors import SetupError
from textgym.evaluation import TASK_COMPONENTS, mean_stderr
from textgym.results import write_atomic
from textgym.rollout import rollout

STAGES = ("base-eval", "sft-data", "sft", "grpo", "eval", "report")
#: First reset seed of the email evaluations (task g: EVAL_SEED + g).
EVAL_SEED = 2 * 10**9
#: First reset seed of the email SFT episodes (curriculum stage i: SFT_SEED + i * 10**6 + g).
SFT_SEED = 3 * 10**9
BENCHMARK = "task_pipeline"


@dataclass(frozen=True)
class Task:
    """A task's env and defaults: the curriculum, the evaluation's env kwargs (``None``: the last
    curriculum stage's) and the longest completion per turn."""

    env_id: str
    curriculum: tuple[dict[str, Any], ...]
    eval_env_kwargs: dict[str, Any] | None
    max_new_tokens: int


TASKS = {
    # Short texts first: pieces of the corpus's paragraphs (57-558 characters; --windows) up
    # to 32, then 64 characters, the run of docs/suite_learning.md.
    "reverse_text": Task(
        "textgym/ReverseText-v0",
        (
            {"steps": 10, "env_kwargs": {"max_chars": 32}},
            {"steps": 20, "env_kwargs": {"max_chars": 64}},
        ),
        None,
        48,
    ),
    # Fewer distractors first, then the env's defaults (num_steps 1, distractors 2).
    "email": Task(
        "textgym/EmailToolUse-v1",
        (
            {"steps": 60, "env_kwargs": {"num_steps": 1, "distractors": 0}},
            {"steps": 90, "env_kwargs": {"num_steps": 1, "distractors": 2}},
        ),
        {},
        256,
    ),
}


def _run(*argv: Any) -> None:
    """``textgym ARGV`` in this process; a non-zero exit ends the script with that code (the
    command printed its own error line)."""
    args = [str(a) for a in argv]
    print("$ textgym " + shlex.join(args), flush=True)
    code = textgym_cli(args)
    if code != 0:
        raise SystemExit(code)


def _curriculum(args: argparse.Namespace) -> list[dict[str, Any]]:
    return json.loads(args.curriculum) if args.curriculum else list(TASKS[args.task].curriculum)


def _split_files(args: argparse.Namespace, work: Path) -> dict[str, Path]:
    """ReverseText: the bundled corpus (or ``--corpus``) split into ``WORK/data/{train,test}.jsonl`` (rewritten
    each time: deterministic). With ``--windows K`` each side also gets up to K word-aligned
    pieces of each of its passages (:func:`passage_windows`, ``--window-min-chars`` to the last
    curriculum stage's ``max_chars``, ids ``PASSAGE~wN``): all whole passages first, then every
    passage's first piece, then every second piece, so a ``--limit`` prefix spreads over the
    passages. A piece stays on its passage's side; each text is kept once (the first), and a
    training text that is also a test text is dropped from training.

    Raises:
        SetupError: a file there that is not the script's (:class:`OwnFiles`), kept as it was.
    """
    folder, own = work / "data", OwnFiles(work, BENCHMARK)
    longest = _curriculum(args)[-1]["env_kwargs"].get("max_chars")
    sides: dict[str, list[list[dict[str, str]]]] = {"train": [], "test": []}
    passages = load_passages(data_path=args.corpus) if args.corpus else load_passages()
    for p in passages:
        rows = [{"id": p.task_id, "text": p.text}]
        if args.windows and longest is not None and args.window_min_chars <= longest:
            pieces = passage_windows(
                p.text, args.windows, args.window_min_chars, longest, seed=p.task_id
            )
            rows += [{"id": f"{p.task_id}~w{k}", "text": w} for k, w in enumerate(pieces)]
        sides[passage_split(p.task_id, args.test_fraction)].append(rows)
    texts, paths = {}, {side: folder / f"{side}.jsonl" for side in sides}
    seen: set[str] = set()  # each text once, and no training text that is also a test text
    for side in ("test", "train"):
        passages = sides[side]
        ordered = [rows[k] for k in range(1 + args.windows) for rows in passages if k < len(rows)]
        ordered = [r for r in ordered if not (r["text"] in seen or seen.add(r["text"]))]
        texts[side] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered)
        own.check(paths[side], texts[side].encode("utf-8"))  # both checked before either written
    for side, text in texts.items():
        own.write(paths[side], text)
    return paths


def _env_kwargs(args: argparse.Namespace, work: Path, kwargs: dict[str, Any], side: str) -> str:
    """A stage's env kwargs as JSON; ReverseText's read the ``side`` of the split."""
    if args.task == "reverse_text":
        kwargs = {**kwargs, "data_path": str(_split_files(args, work)[side])}
    return json.dumps(kwargs)


def _eval_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    if args.eval_env_kwargs is not None:
        return json.loads(args.eval_env_kwargs)
    default = TASKS[args.task].eval_env_kwargs
    return dict(_curriculum(args)[-1]["env_kwargs"] if default is None else default)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _task_score(record: dict[str, Any]) -> float:
    totals = record["component_totals"]
    return next((totals[n] for n in TASK_COMPONENTS if n in totals), record["return"])


def _task_scores(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each task's score: the mean task component of its rollouts, by task id."""
    per_task: dict[str, list[float]] = {}
    for r in records:
        per_task.setdefault(r["task_id"], []).append(_task_score(r))
    return {task: sum(v) / len(v) for task, v in per_task.items()}


def _success(scores: dict[str, float]) -> dict[str, float]:
    """Mean task score over tasks (:func:`_task_scores`) with its standard error."""
    mean, stderr = mean_stderr(list(scores.values()))
    return {"mean": mean, "stderr": stderr, "tasks": len(scores)}


def _trained_task_ids(work: Path) -> set[str]:
    ids = set()
    for path in [
        work / "sft_data.jsonl",
        *sorted((work / "grpo").glob("stage-*/train_episodes.jsonl")),
    ]:
        if path.is_file():
            ids.update(r["task_id"] for r in _read_jsonl(path))
    return ids


def _details(
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    scores: dict[str, float],
    k: int,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Per-length buckets with pass@1 and pass@``k`` (ReverseText), or (email) per-tool-call
    diagnostics and each request family's success (``families``: ``{family: {"tasks",
    "success"}}``, a task counted under every family its requests come from, the generator's
    :data:`~textgym.envs.email_tool_use.generator.FAMILIES`)."""
    if args.task == "reverse_text":
        lengths = {r["id"]: len(r["text"]) for r in _read_jsonl(Path(kwargs["data_path"]))}
        episodes = [
            LengthEpisode(
                r["task_id"],
                lengths[r["task_id"]],
                r["component_totals"]["lcs"],
                r["component_totals"]["lcs"] == 1.0,
            )
            for r in records
        ]
        # Bucket edges: the curriculum's lengths; the last is the evaluation's own bound.
        stages = _curriculum(args)
        edges = sorted({s["env_kwargs"].get("max_chars", 0) for s in stages} - {0})
        buckets = length_bucket_summary(episodes, edges[:-1] or edges, sorted({1, k}))
        return {"length_buckets": buckets}
    knobs = _eval_kwargs(args)
    gold_knobs = {k: knobs[k] for k in ("inbox_size", "distractors", "num_steps") if k in knobs}
    tasks = {r["task_id"]: task_of(r["task_id"], **gold_knobs) for r in records}
    diagnoses = [
        diagnose_tool_calls(
            [m["content"] for m in r["messages"] if m["role"] == "assistant"],
            tasks[r["task_id"]].gold_calls,
            knobs.get("max_calls_per_step", 32),
        )
        for r in records
    ]
    by_family: dict[str, list[float]] = {}
    for task_id, score in scores.items():
        for family in {t.split("/")[0] for t in tasks[task_id].templates}:
            by_family.setdefault(family, []).append(score)
    families = {
        f: {"tasks": len(v), "success": sum(v) / len(v)} for f, v in sorted(by_family.items())
    }
    return {"tool_calls": summarize_call_diagnoses(diagnoses), "families": families}


def evaluate(args: argparse.Namespace, work: Path, model: str, name: str) -> dict[str, Any]:
    """Greedy and sampled evaluation of ``model`` on the held-out tasks, under ``WORK/eval/name``:
    per mode its ``success`` and ``task_scores`` (task id -> mean task component of its
    rollouts, which :func:`_difference` pairs), the eval summary's rates and :func:`_details`."""
    task = TASKS[args.task]
    kwargs = _env_kwargs(args, work, _eval_kwargs(args), "test")
    trained = _trained_task_ids(work)
    result: dict[str, Any] = {"model": model, "env_kwargs": json.loads(kwargs)}
    for mode, temperature, k in (
        ("greedy", 0.0, 1),
        ("sampled", args.temperature, args.rollouts_per_task),
    ):
        out = work / "eval" / name / mode
        summary_path = out / "summary.json"
        if not (summary_path.is_file() and json.loads(summary_path.read_text())["complete"]):
            limit = [] if args.eval_tasks is None else ["--limit", args.eval_tasks]
            seed = ["--seed", EVAL_SEED] if args.task == "email" else []
            _run(
                "eval", task.env_id, "--policy", "hf", "--model", model,
                "--env-kwargs", kwargs, "--dtype", args.eval_dtype,
                "--max-new-tokens", args.max_new_tokens or task.max_new_tokens,
                "--temperature", temperature, "--rollouts-per-task", k, *limit, *seed,
                "--rollout-batch-size", args.batch_size, "--no-progress",
                "--output-dir", out, "--overwrite",
            )  # fmt: skip
        summary = json.loads(summary_path.read_text())
        records = _read_jsonl(out / "trajectories.jsonl")
        scores = _task_scores(records)
        result[mode] = {
            "run": str(out),
            "success": _success(scores),
            "task_scores": scores,
            "mean_return": summary["mean_return"],
            "stderr_return": summary["stderr_return"],
            "invalid_action_rate": summary["invalid_action_rate"],
            "tasks": summary["tasks"],
            "shared_with_training": len({r["task_id"] for r in records} & trained),
            **_details(args, records, scores, k, result["env_kwargs"]),
        }
    return result


def stage_base_eval(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    return evaluate(args, work, args.model, "base")


def _lookup_expert_episodes(kwargs: dict[str, Any], episodes: int, seed: int) -> str:
    """Email: ``episodes`` episodes of :class:`LookupExpertPolicy` (reset seeds ``seed + g``)
    as chat records (:func:`textgym.collect.sft_record`, what ``textgym collect`` writes), one
    JSON line each."""
    knobs = {k: kwargs[k] for k in ("inbox_size", "distractors", "num_steps") if k in kwargs}
    expert = LookupExpertPolicy(**knobs)
    make = EnvRecipe(TASKS["email"].env_id, kwargs).make
    games = rollout(make, expert, [seed + g for g in range(episodes)], batch_size=64)
    return "".join(json.dumps(sft_record(g)) + "\n" for g in games)


def stage_sft_data(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Expert episodes into ``WORK/sft_data.jsonl``: ``textgym collect --policy gold``, or for
    email :class:`LookupExpertPolicy` by default (``--sft-expert``)."""
    task, stages = TASKS[args.task], _curriculum(args)
    data, parts = work / "sft_data.jsonl", []
    if args.task == "reverse_text":  # each training text up to the last length, once
        limit = [] if args.sft_episodes is None else ["--limit", args.sft_episodes]
        parts.append((stages[-1]["env_kwargs"], limit))
    else:  # --sft-episodes spread over the curriculum's settings, each from its own seeds
        n = args.sft_episodes or 400
        for i, stage in enumerate(stages):
            count = n // len(stages) + (i < n % len(stages))
            parts.append(
                (stage["env_kwargs"], ["--episodes", count, "--seed", SFT_SEED + i * 10**6])
            )
    own, rows, paths = OwnFiles(work, BENCHMARK), [], []
    for path in [data, *(work / "sft_data" / f"part-{i}.jsonl" for i in range(len(parts)))]:
        own.check(path)  # every file this stage replaces, before it writes any
    for i, (kwargs, extra) in enumerate(parts):
        part = work / "sft_data" / f"part-{i}.jsonl"
        part.parent.mkdir(parents=True, exist_ok=True)
        if args.task == "email" and args.sft_expert == "lookup":
            own.write(part, _lookup_expert_episodes(kwargs, extra[1], extra[3]))
        else:
            _run(
                "collect", task.env_id, "--policy", "gold", "--env-kwargs",
                _env_kwargs(args, work, kwargs, "train"), *extra, "--no-progress",
                "--output", part, "--overwrite",
            )  # fmt: skip
            own.record(part)
        rows += part.read_text(encoding="utf-8").splitlines(keepends=True)
        paths.append(str(part))
    own.write(data, "".join(rows))
    expert = args.sft_expert if args.task == "email" else "gold"
    return {"data": str(data), "episodes": len(rows), "parts": paths, "expert": expert}


def _packing(args: argparse.Namespace) -> list[Any]:
    """``--micro-batch-tokens N`` for ``textgym sft`` and ``train`` when asked for, else nothing."""
    return ["--micro-batch-tokens", args.micro_batch_tokens] if args.micro_batch_tokens else []


def stage_sft(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out = work / "sft"
    _run(
        "sft", "--data", work / "sft_data.jsonl", "--model", args.model, "--output-dir", out,
        "--epochs", args.sft_epochs, "--batch-size", args.sft_batch_size,
        "--learning-rate", args.sft_lr, "--lora-rank", args.lora_rank,
        "--micro-batch-size", args.micro_batch_size, *_packing(args), "--seed", args.seed,
        "--device", args.device, "--no-progress", "--no-tensorboard", "--overwrite",
    )  # fmt: skip
    return {"model": str(out), "summary": json.loads((out / "sft_summary.json").read_text())}


def stage_grpo(args: argparse.Namespace, work: Path) -> dict[str, Any] | None:
    """The curriculum: one ``textgym train`` per stage; ``None`` while a time limit stops one."""
    task, model, done = TASKS[args.task], str(work / "sft"), []
    for i, stage in enumerate(_curriculum(args)):
        out, steps = work / "grpo" / f"stage-{i}", int(stage["steps"])
        last = latest_checkpoint(out) if out.is_dir() else None
        if last is None or last.name != f"checkpoint-{steps}":
            again = ["--resume"] if last is not None else ["--overwrite"]
            _run(
                "train", task.env_id, "--model", model, "--output-dir", out,
                "--env-kwargs", _env_kwargs(args, work, stage["env_kwargs"], "train"),
                "--wrappers", *args.grpo_wrappers, "--steps", steps, "--seed", args.seed + i,
                "--groups-per-step", args.groups_per_step, "--group-size", args.group_size,
                "--rollout-batch-size", args.batch_size,
                "--micro-batch-size", args.micro_batch_size, *_packing(args),
                "--max-new-tokens", args.max_new_tokens or task.max_new_tokens,
                "--temperature", args.temperature, "--learning-rate", args.grpo_lr,
                "--lora-rank", args.lora_rank, "--eval-every", args.eval_every,
                "--eval-episodes", args.eval_every_episodes,
                "--save-every", max(1, steps // 10), "--device", args.device,
                *(["--time-limit-minutes", args.grpo_time_limit] if args.grpo_time_limit else []),
                "--no-progress", "--no-tensorboard", *again,
            )  # fmt: skip
            last = latest_checkpoint(out)
            if last is None or last.name != f"checkpoint-{steps}":
                return None
        model = str(last)
        done.append({"stage": i, **stage, "run": str(out), "checkpoint": model})
    return {"stages": done, "model": model}


def stage_eval(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    final = json.loads((work / "grpo.json").read_text())["model"]
    return {
        "sft": evaluate(args, work, str(work / "sft"), "sft"),
        "grpo": evaluate(args, work, final, "grpo"),
    }


def _difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """``b - a`` of two evaluations' success (:func:`evaluate`'s ``[mode]``).

    Returns:
        ``delta``, its standard error as of independent samples (``stderr``, the two standard
        errors in quadrature) and ``z`` (``delta / stderr``); and, since both play the same
        held-out tasks, the paired standard error of the per-task differences over the tasks
        both played (``paired_stderr``, ``paired_z``, ``paired_tasks``), smaller where the two
        models tend to solve the same tasks (the paired comparison of Miller 2024, "Adding
        Error Bars to Evals", arXiv:2411.00640). ``z`` is the conservative one.
    """
    sa, sb = a["success"], b["success"]
    delta = sb["mean"] - sa["mean"]
    stderr = math.sqrt(sa["stderr"] ** 2 + sb["stderr"] ** 2)
    scores_a, scores_b = a["task_scores"], b["task_scores"]
    common = sorted(scores_a.keys() & scores_b.keys())
    paired_mean, paired = mean_stderr([scores_b[t] - scores_a[t] for t in common])
    return {
        "delta": delta,
        "stderr": stderr,
        "z": delta / stderr if stderr > 0 else None,
        "paired_stderr": paired,
        "paired_z": paired_mean / paired if paired > 0 else None,
        "paired_tasks": len(common),
    }


def no_call_floor(kwargs: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """Email: the success of replying at once without a tool call, per reset seed, as a floor
    for the evaluations on the same seeds (a conditional request whose condition does not hold,
    "if X emailed me about Y, delete it", is done by changing nothing).

    Returns:
        ``{"mean", "stderr", "tasks", "solved_seeds"}``: the mean ``outcome`` over ``seeds`` with
        its standard error, and the seeds it solves.
    """
    outcomes = {}
    env = EnvRecipe(TASKS["email"].env_id, kwargs).make()
    for seed in seeds:  # each reset(seed) generates that seed's task afresh
        env.reset(seed=seed)
        outcomes[seed] = env.step("Done.")[-1]["reward_components"]["outcome"]
    env.close()
    mean, stderr = mean_stderr(list(outcomes.values()))
    solved = [s for s, v in outcomes.items() if v > 0]
    return {"mean": mean, "stderr": stderr, "tasks": len(seeds), "solved_seeds": solved}


def result_output(args: argparse.Namespace, work: Path) -> Path:
    """The result JSON's path (``--output``, default in WORK, with ``--update-results`` in
    ``benchmarks/results/``), checked before anything is written.

    Raises:
        SetupError: it lies under ``benchmarks/results/`` without ``--update-results``, it
            exists and is not a task_pipeline record, or the PNG beside it is not that record's
            (:func:`~_study_outputs.claim_sibling_file`); nothing was replaced.
    """
    name = f"task_pipeline_{args.task}_{Path(args.model).name}_{args.device}.json"
    where = REPO_ROOT / "benchmarks" / "results" if args.update_results else work
    output = Path(args.output) if args.output else where / name
    check_results_write(output, "--output", update_results=args.update_results)
    if output.exists() and not (output.is_file() and own_record(output, BENCHMARK)):
        raise SetupError(
            f"--output {output} exists and is not a {BENCHMARK} record; nothing was replaced: "
            f"choose another --output"
        )
    claim_sibling_file(output.with_suffix(".png"), output, BENCHMARK)
    return output


def stage_report(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    output = result_output(args, work)
    stages = {
        s: json.loads((work / f"{s}.json").read_text())
        for s in STAGES[:-1]
        if (work / f"{s}.json").exists()
    }
    if not stages:
        raise SetupError(
            f"--stage report found no stage results in --work-dir {work} (no "
            f"{', '.join(s + '.json' for s in STAGES[:-1])}); run the other stages first"
        )
    later = stages.get("eval", {})
    evals = {"base": stages.get("base-eval"), "sft": later.get("sft"), "grpo": later.get("grpo")}
    table = []
    for name, ev in evals.items():
        for mode in ("greedy", "sampled") if ev else ():
            passes = {k: v for k, v in ev[mode]["tasks"].items() if k.startswith("pass@")}
            table.append({"model": name, "mode": mode, **ev[mode]["success"], **passes})
    for row in table:
        print(
            "  ".join(
                f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    for name, ev in evals.items():
        for mode in ("greedy", "sampled") if ev else ():
            if "length_buckets" in ev[mode]:
                parts = [
                    f"{b['bucket']}: lcs {b['lcs']['mean']:.3f} exact {b['exact']['rate']:.3f}"
                    for b in ev[mode]["length_buckets"]
                ]
            else:
                parts = [f"{v} {r:.3f}" for v, r in ev[mode]["tool_calls"]["verdict_rates"].items()]
                families = ev[mode].get("families", {})  # absent from runs before families
                shares = [f"{f} {v['success']:.3f} of {v['tasks']}" for f, v in families.items()]
                if shares:
                    print(f"{name}/{mode} families: " + "; ".join(shares))
            print(f"{name}/{mode}: " + "; ".join(parts))
    rl_vs_sft = {
        mode: _difference(evals["sft"][mode], evals["grpo"][mode])
        for mode in ("greedy", "sampled")
        if evals.get("sft") and evals.get("grpo")
    }
    runs = [work / "eval" / n / m for n in ("base", "sft", "grpo") for m in ("greedy", "sampled")]
    runs = [r for r in runs if r.is_dir()] + [work / "sft_data.jsonl", work / "sft"]
    runs += sorted(p for p in (work / "grpo").glob("stage-*") if p.is_dir())
    own = OwnFiles(work, BENCHMARK)
    own.check(work / "report.html")
    _run("report", *[r for r in runs if r.exists()], "--output", work / "report.html")
    own.record(work / "report.html")
    floor = None
    if args.task == "email" and args.eval_tasks is not None:
        floor = no_call_floor(_eval_kwargs(args), [EVAL_SEED + g for g in range(args.eval_tasks)])
        print(f"no-call floor (reply at once, no tool call): {floor['mean']:.4f}")
    curves = training_curves(work)
    png = output.with_suffix(".png")
    plot_training_curves(curves, png)
    record = {
        "benchmark": BENCHMARK,
        "task": args.task,
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "command": shlex.join(["python", "benchmarks/task_pipeline.py", *sys.argv[1:]]),
        "settings": vars(args),
        "machine": machine_info(),
        "table": table,
        "rl_vs_sft": rl_vs_sft,
        "no_call_floor": floor,
        "stages": stages,
        "curves": curves,  # drawn to output.with_suffix(".png")
        "plot": {"file": png.name, "sha256": sha256_of(png)},  # what claim_sibling_file checks
        "report_html": str(work / "report.html"),
    }
    write_result(output, record)
    return {"output": str(output), "report_html": str(work / "report.html")}


def training_curves(work: Path) -> dict[str, Any]:
    """Every row of the SFT run's and each GRPO stage's ``metrics.jsonl``, so the result JSON
    keeps the curves when the work folder is gone: ``{"sft": rows, "grpo": [rows per stage]}``
    (a run not started yet: ``[]``).

    Raises:
        ValueError: a ``metrics.jsonl`` line that is not a JSON object (e.g. cut by a crash).
    """

    def rows(run: Path) -> list[dict[str, Any]]:
        path = run / METRICS_FILENAME
        return read_metrics(path) if path.is_file() else []

    stages = sorted((work / "grpo").glob("stage-*"), key=lambda p: int(p.name.split("-")[1]))
    return {"sft": rows(work / "sft"), "grpo": [rows(p) for p in stages if p.is_dir()]}


def plot_training_curves(curves: dict[str, Any], path: Path) -> None:
    """Two panels to ``path`` (PNG): SFT loss per step (nats per assistant token, as logged), and
    GRPO's mean training reward per step with the fraction of groups whose rewards are all
    equal (no advantage) and the invalid-action rate of the training turns, the curriculum's
    stages one after another."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_sft, ax_rl) = plt.subplots(1, 2, figsize=(11, 3.6))
    sft = [r for r in curves["sft"] if r.get("stage") == "train" and r.get("loss") is not None]
    ax_sft.plot([r["step"] for r in sft], [r["loss"] for r in sft], marker="o")
    ax_sft.set(title="SFT loss", xlabel="step", ylabel="nats / assistant token")
    offset = 0
    for i, stage in enumerate(curves["grpo"]):
        train = [r for r in stage if r.get("stage") == "train"]
        steps = [offset + r["step"] for r in train]
        ax_rl.plot(steps, [r["reward_mean"] for r in train], marker="o", label=f"stage {i} reward")
        flat = [r.get("zero_variance_fraction") for r in train]
        if all(f is not None for f in flat):
            ax_rl.plot(steps, flat, linestyle="--", label=f"stage {i} flat groups")
        invalid = [r.get("invalid_rate") for r in train]
        if all(f is not None for f in invalid):
            ax_rl.plot(steps, invalid, linestyle=":", label=f"stage {i} invalid actions")
        offset = max(steps, default=offset)
    ax_rl.set(title="GRPO (training rollouts)", xlabel="step")  # rewards may be negative
    if curves["grpo"]:
        ax_rl.legend(fontsize=7)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, image.getvalue())


RUNNERS: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any] | None]] = {
    "base-eval": stage_base_eval,
    "sft-data": stage_sft_data,
    "sft": stage_sft,
    "grpo": stage_grpo,
    "eval": stage_eval,
    "report": stage_report,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = one_line_errors(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument(
        "--stage",
        choices=("all", *STAGES),
        default="all",
        help="run one stage, or every stage whose JSON is missing",
    )
    parser.add_argument(
        "--curriculum",
        default=None,
        help='JSON list of {"steps": N, "env_kwargs": {...}} (default: the task\'s)',
    )
    parser.add_argument(
        "--eval-env-kwargs",
        default=None,
        help="JSON (default: reverse_text the last curriculum stage's, email the env's defaults)",
    )
    parser.add_argument(
        "--test-fraction", type=float, default=0.2, help="reverse_text: passages held out"
    )
    parser.add_argument(
        "--windows",
        type=at_least(0),
        default=8,
        help="reverse_text: also up to K word-aligned pieces of each passage, on its side of the "
        "split (more short texts than the corpus's 48 paragraphs of at most 80 characters); 0: "
        "whole passages only",
    )
    parser.add_argument(
        "--window-min-chars", type=at_least(1), default=16, help="reverse_text: the shortest piece"
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="reverse_text: a JSONL of {id, text} passages to split and window instead of the "
        "bundled corpus (e.g. ../shared/data/paragraphs/paragraphs.jsonl)",
    )
    parser.add_argument(
        "--sft-episodes",
        type=at_least(1),
        default=None,
        help="expert episodes (reverse_text: passages; None: all; email: 400)",
    )
    parser.add_argument(
        "--sft-expert",
        choices=("lookup", "gold"),
        default="lookup",
        help="email: lookup (LookupExpertPolicy: looks ids and addresses up first) or gold "
        "(textgym collect --policy gold: writes ids it never looked up)",
    )
    parser.add_argument("--sft-epochs", type=at_least(1), default=3)
    parser.add_argument("--sft-lr", type=float, default=2e-4)
    parser.add_argument("--sft-batch-size", type=at_least(1), default=16)
    parser.add_argument("--lora-rank", type=at_least(0), default=16, help="0: full fine-tuning")
    parser.add_argument("--grpo-lr", type=float, default=5e-5)
    parser.add_argument("--grpo-time-limit", type=float, default=None, help="minutes per run")
    parser.add_argument(
        "--grpo-wrappers",
        nargs="*",
        default=[],
        help="GRPO: reward wrappers by name (textgym train --wrappers, e.g. "
        "invalid_action_penalty); none by default: the env's own reward",
    )
    parser.add_argument("--groups-per-step", type=at_least(1), default=8)
    parser.add_argument("--group-size", type=at_least(2), default=8)
    parser.add_argument("--micro-batch-size", type=at_least(1), default=8)
    parser.add_argument(
        "--micro-batch-tokens",
        type=at_least(1),
        default=None,
        help="SFT and GRPO: pack each step's sequences into rows of at most this many tokens "
        "instead of micro-batches of --micro-batch-size padded to their longest (bounds memory "
        "and skips padding: email episodes run to thousands of tokens, and 8 of them in one fp32 "
        "pass ran out of 24 GiB)",
    )
    parser.add_argument("--max-new-tokens", type=at_least(1), default=None, help="None: the task's")
    parser.add_argument("--temperature", type=float, default=1.0, help="GRPO and sampled evals")
    parser.add_argument(
        "--rollouts-per-task", type=at_least(1), default=4, help="sampled evals: pass@1..K"
    )
    parser.add_argument(
        "--eval-tasks",
        type=at_least(1),
        default=None,
        help="held-out tasks (None: reverse_text all, email 100)",
    )
    parser.add_argument(
        "--eval-every", type=at_least(0), default=20, help="GRPO steps between its own evals"
    )
    parser.add_argument("--eval-every-episodes", type=at_least(1), default=32)
    parser.add_argument("--eval-dtype", default="float32")
    parser.add_argument("--batch-size", type=at_least(1), default=32, help="episodes in flight")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--work-dir", default=None, help="default runs/task_pipeline_TASK")
    parser.add_argument("--output", default=None, help="default WORK/task_pipeline_*.json")
    parser.add_argument(
        "--update-results",
        action="store_true",
        help="write into benchmarks/results/ (the default --output then): read-only without it",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model, smallest sizes (tests)")
    args = parser.parse_args(argv)
    if args.task == "email" and args.eval_tasks is None:
        args.eval_tasks = 100
    if args.smoke:
        first = TASKS[args.task].curriculum[:2]
        args.model, args.sft_episodes, args.sft_epochs, args.eval_tasks = "tiny", 2, 1, 2
        args.curriculum = json.dumps([{**s, "steps": 1} for s in first])
        args.groups_per_step, args.group_size, args.rollouts_per_task = 1, 2, 2
        args.eval_every, args.eval_every_episodes, args.max_new_tokens = 0, 1, 4
        args.batch_size, args.micro_batch_size, args.sft_batch_size = 4, 4, 2
    args.work_dir = args.work_dir or f"runs/task_pipeline_{args.task}"
    return args


def _json_arg(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise SetupError(f"expected {flag} to be JSON, got {excerpt(text)}") from None


def _check_curriculum(args: argparse.Namespace) -> None:
    """Check ``--curriculum`` and ``--eval-env-kwargs`` (a stage without env_kwargs gets ``{}``).

    Raises:
        SetupError: ``--curriculum`` is not a non-empty JSON list of ``{"steps": N >= 1,
            "env_kwargs": {...}}``, or ``--eval-env-kwargs`` is not a JSON object.
    """
    stages = _json_arg("--curriculum", args.curriculum) if args.curriculum else [{}]
    shape = '[{"steps": N, "env_kwargs": {...}}, ...] with at least one stage and N >= 1'
    if not isinstance(stages, list) or not stages:
        raise SetupError(f"expected --curriculum {shape}, got {excerpt(args.curriculum)}")
    for i, stage in enumerate(stages if args.curriculum else ()):
        steps = stage.get("steps") if isinstance(stage, dict) else None
        if (
            not isinstance(stage, dict)
            or isinstance(steps, bool)
            or not isinstance(steps, int)
            or steps < 1
            or not isinstance(stage.get("env_kwargs", {}), dict)
        ):
            raise SetupError(f"expected --curriculum {shape}, got at stage {i} {excerpt(stage)}")
        stage.setdefault("env_kwargs", {})
    if args.curriculum:
        args.curriculum = json.dumps(stages)
    if args.eval_env_kwargs is not None and not isinstance(
        _json_arg("--eval-env-kwargs", args.eval_env_kwargs), dict
    ):
        raise SetupError(
            f"expected --eval-env-kwargs a JSON object, got {excerpt(args.eval_env_kwargs)}"
        )


def _checked(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` after the checks ``argparse`` cannot make (JSON, fractions, rates, device).

    Raises:
        SetupError: a bad ``--curriculum`` or ``--eval-env-kwargs``, ``--test-fraction``
            outside (0, 1), a learning rate or time limit that is not positive, a negative
            temperature, a seed past the seed range, or a device torch does not know or have.
    """
    _check_curriculum(args)
    if args.corpus is not None:
        try:
            load_passages(data_path=args.corpus)
        except (OSError, ValueError) as exc:
            raise SetupError(
                f"--corpus {args.corpus[:200]}: {' '.join(str(exc).split())[:300]}"
            ) from None
    if not 0 < args.test_fraction < 1:
        raise SetupError(
            f"expected --test-fraction in (0, 1) (both sides of the split need passages), "
            f"got {args.test_fraction}"
        )
    for flag in ("sft_lr", "grpo_lr", "grpo_time_limit"):
        value = getattr(args, flag)
        if value is not None and not (0 < value < math.inf):
            raise SetupError(f"expected --{flag.replace('_', '-')} > 0, got {value}")
    if not 0 <= args.temperature < math.inf:
        raise SetupError(f"expected --temperature >= 0, got {args.temperature}")
    highest = MAX_SEED - (len(_curriculum(args)) - 1)  # GRPO stage i trains with seed + i
    if args.seed > highest:
        raise SetupError(
            f"expected --seed <= {highest} (the seed range [0, {MAX_SEED}] of every command, "
            f"less the curriculum's last stage index: stage i trains with --seed + i), "
            f"got {args.seed}"
        )
    try:
        resolve_device(args.device)
    except (RuntimeError, ValueError) as exc:
        text = " ".join(str(exc).split())[:200]
        raise SetupError(
            f"expected --device cpu, cuda or cuda:N, got {args.device[:40]!r} ({text})"
        ) from None
    return args


def _write_stage(own: OwnFiles, done: Path, result: dict[str, Any]) -> None:
    """``WORK/STAGE.json``; a report.json from before the manifest (its three keys) is ours."""
    if done.name == "report.json" and done.is_file() and not done.is_symlink():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if set(json.loads(done.read_text(encoding="utf-8"))) <= {*result, "stage_seconds"}:
                own.record(done)
    own.write(done, json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = _checked(parse_args(argv))
    work = Path(args.work_dir)
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot make --work-dir {work}: {exc.strerror}; choose another") from None
    own = OwnFiles(work, BENCHMARK)
    stages = STAGES if args.stage == "all" else (args.stage,)
    if "report" in stages:
        result_output(args, work)  # refused now rather than after hours of training
    for stage in stages:
        done = work / f"{stage}.json"
        if done.exists() and stage != "report":
            print(f"{stage}: done ({done})")
            continue
        began = time.perf_counter()
        result = RUNNERS[stage](args, work)
        if result is None:
            print(f"{stage}: stopped at its time limit; run again to resume")
            return 0
        result["stage_seconds"] = time.perf_counter() - began
        _write_stage(own, done, result)
        print(f"{stage}: {result['stage_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
