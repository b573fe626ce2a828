"""The ``textgym`` command line: ``list``, ``eval``, ``collect`` and ``play``.

Bad arguments (unknown env id, malformed JSON, out-of-range values, a policy that cannot play
the env, an output path that cannot be written) print one line starting with
``textgym: error:`` and exit with code 2, like any argparse usage error; they are found before
anything is played. ``eval --output`` and ``collect`` write each episode as it finishes; a
Ctrl-C stops the run, keeps what was written (marked incomplete), prints one line and exits
with code 130. An endpoint that fails while ``--policy openai`` plays (unreachable, timing out
or answering garbage through every retry) stops the run the same way, with one
``textgym: error:`` line and exit code 1.

An evaluation is a pass over the tasks: on an env that lists its tasks (``task_ids``: GSM8K-v0,
ReverseText-v0, Workplace-v0) ``eval`` and ``collect`` play each task once, in order, unless
``--limit``, ``--task-ids``, ``--rollouts-per-task`` or ``--sample-tasks`` (random draws with
replacement, as for training) say otherwise (:mod:`textgym.evaluation`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym

import textgym
from textgym.evaluation import RunningSummary, TaskResults, TaskWalk, plan_tasks
from textgym.models import DTYPE_NAMES, MODEL_NAMES
from textgym.policies import POLICY_NAMES, Policy, make_policy
from textgym.policies.gold import GOLD_INFO_KEY
from textgym.results import check_dir, check_file, hold_interrupts, open_jsonl, write_json
from textgym.rollout import Trajectory, iter_rollout, rollout
from textgym.wrappers import REWARD_WRAPPERS

__all__ = ["main"]

_WRAPPERS: dict[str, Callable[[gym.Env], gym.Env]] = REWARD_WRAPPERS


_DEFAULT_MODEL = "gemma-3-270m"


class UsageError(Exception):
    """A bad command-line argument: reported in one line, exit code 2."""


def _fail(message: str) -> NoReturn:
    print(f"textgym: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--env-kwargs is not valid JSON ({exc.msg} at char {exc.pos}): {text!r}"
        ) from None
    except RecursionError:
        raise UsageError(
            f"--env-kwargs is nested too deeply to read ({len(text)} characters); "
            "expected a JSON object of the env's keyword arguments"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(
            f"--env-kwargs must be a JSON object, got {type(value).__name__}: {text!r}"
        )
    return value


def _env_factory(
    env_id: str, env_kwargs: dict[str, Any], wrappers: Sequence[str]
) -> tuple[Callable[[], gym.Env], gym.Env]:
    """Return a factory for the env and one env it built (to read attributes from, then close).

    Raises:
        UsageError: for an unknown id or wrapper, or kwargs the env rejects.
    """
    if env_id not in gym.registry or not env_id.startswith("textgym/"):
        known = ", ".join(sorted(textgym.ENV_DESCRIPTIONS))
        raise UsageError(f"unknown env id {env_id!r}; expected one of: {known}")
    for name in wrappers:
        if name not in _WRAPPERS:
            raise UsageError(f"unknown wrapper {name!r}; expected any of {', '.join(_WRAPPERS)}")

    def make() -> gym.Env:
        env = gym.make(env_id, **env_kwargs)
        for name in wrappers:
            env = _WRAPPERS[name](env)
        return env

    try:  # build one env now so that bad kwargs or data fail here, with the env's own message
        probe = make()
    except (ValueError, TypeError, OSError, ImportError, RecursionError) as exc:
        # OSError: a data file that is missing, a hub dataset that cannot be reached.
        raise UsageError(
            f"cannot make {env_id} with {_shown(env_kwargs)}"
            + (f" and --wrappers {','.join(wrappers)}" if wrappers else "")
            + f": {_one_line(exc)}"
        ) from None
    return make, probe


def _shown(env_kwargs: dict[str, Any]) -> str:
    """The kwargs as JSON for a message, or ``--env-kwargs`` when too long or deep to show."""
    try:
        text = json.dumps(env_kwargs)
    except (RecursionError, ValueError, TypeError):
        return "--env-kwargs"
    return text if len(text) <= 200 else "--env-kwargs"


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _policy_kwargs(args: argparse.Namespace, stop: Sequence[str]) -> dict[str, Any]:
    if args.policy == "hf":
        return {
            "stop": list(stop),
            "model": args.model,
            "dtype": args.dtype,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "batch_size": args.batch_size,
            "seed": args.seed,
        }
    if args.policy == "openai":
        urls = [u.strip() for value in (args.base_url or []) for u in value.split(",") if u.strip()]
        return {
            "base_url": urls or "http://127.0.0.1:8000/v1",
            "model": None if args.model == _DEFAULT_MODEL else args.model,  # None: first served
            "max_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.seed,
            "stop": list(stop),
            **{name: value for name, value in _openai_flags(args).items() if value is not None},
        }
    if args.policy in ("random", "minimax"):
        return {"seed": args.seed, "reasoning": not args.no_reasoning}
    return {"seed": args.seed}


#: ``--flag`` -> OpenAIPolicy argument, for the flags that only ``--policy openai`` takes.
_OPENAI_FLAGS = {
    "concurrency": "max_concurrency",
    "timeout_s": "timeout_s",
    "max_retries": "max_retries",
    "api_key": "api_key",
}


def _openai_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The OpenAIPolicy arguments of the openai-only flags (``None`` where not given)."""
    return {arg: getattr(args, flag, None) for flag, arg in _OPENAI_FLAGS.items()}


def _check_openai_flags(args: argparse.Namespace) -> None:
    """Refuse the openai-only flags with another policy, and out-of-range values.

    Raises:
        UsageError: naming the flag.
    """
    given = [
        f"--{flag.replace('_', '-')}" for flag in _OPENAI_FLAGS if getattr(args, flag) is not None
    ]
    if given and args.policy != "openai":
        raise UsageError(
            f"{', '.join(given)} only apply to --policy openai, got --policy {args.policy}"
        )
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1 (requests in flight), got {args.concurrency}")
    if args.timeout_s is not None and not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
        raise UsageError(
            f"--timeout-s must be a finite number > 0 (seconds per attempt), got {args.timeout_s}"
        )
    if args.max_retries is not None and args.max_retries < 0:
        raise UsageError(f"--max-retries must be >= 0, got {args.max_retries}")


def _endpoint_failure(policy_name: str, exc: BaseException) -> str | None:
    """One line on ``exc`` if it is an endpoint failure of ``--policy openai``, else ``None``.

    An endpoint failure is a ``ConnectionError``, ``TimeoutError`` or ``openai.OpenAIError``
    (:class:`~textgym.policies.openai_compat.InvalidResponseError`, an HTTP error status)
    raised inside ``OpenAIPolicy.act``, after its retries; the same errors raised anywhere
    else (an env, a wrapper) are bugs and keep their traceback.
    """
    if policy_name != "openai":
        return None
    import openai

    from textgym.policies.openai_compat import OpenAIPolicy

    if isinstance(exc, (ConnectionError, TimeoutError, openai.OpenAIError)) and _raised_in(
        exc, OpenAIPolicy.act
    ):
        return _one_line(exc)
    return None


def _build_policy(name: str, kwargs: dict[str, Any]) -> Policy:
    try:
        return make_policy(name, **kwargs)
    except ImportError as exc:
        _fail(f"policy {name!r} needs optional dependencies: {exc}")
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise UsageError(f"cannot build policy {name!r}: {exc}") from None


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{summary['env_id']} · policy={summary['policy']}"
        + (f" · model={summary['model']}" if summary["model"] else "")
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    ret, err = summary["mean_return"], summary["stderr_return"]
    table.add_row("episodes", str(summary["episodes"]))
    tasks = summary.get("tasks")
    if tasks is not None:
        each = (
            f", {tasks['rollouts_per_task']} rollouts each"
            if tasks["rollouts_per_task"] > 1
            else ", each once"
            if tasks["played"] == summary["episodes"]
            else ""
        )
        table.add_row(
            "tasks", f"{tasks['played']} of {tasks['available'] or tasks['selected']}" + each
        )
    table.add_row("mean return", f"{ret:.4f}" if math.isnan(err) else f"{ret:.4f} ± {err:.4f}")
    for name, value in summary["reward_components"].items():
        table.add_row(f"  component {name}", f"{value:.4f}")
    if any(v for v in summary["outcomes"].values()):
        for outcome, rate in summary["outcomes"].items():
            table.add_row(outcome, f"{rate:.1%}")
    table.add_row("truncated (time limit)", f"{summary['truncated_rate']:.1%}")
    table.add_row("completions cut at --max-new-tokens", f"{summary['length_truncated_rate']:.1%}")
    table.add_row("invalid actions", f"{summary['invalid_action_rate']:.1%}")
    table.add_row("episodes with an invalid action", f"{summary['invalid_episode_rate']:.1%}")
    table.add_row("mean turns", f"{summary['mean_turns']:.2f}")
    if tasks is not None:
        k = tasks["rollouts_per_task"]
        for name in dict.fromkeys(["pass@1", f"pass@{k}"]):
            table.add_row(f"{name} (success: {tasks['success']})", f"{tasks[name]:.1%}")
        if k > 1:
            table.add_row(f"mean@{k} (mean return per task)", f"{tasks[f'mean@{k}']:.4f}")
    table.add_row("episodes / s", f"{summary['episodes_per_s']:.2f}")
    if summary.get("tokens_per_s") is not None:
        table.add_row("generated tokens / s", f"{summary['tokens_per_s']:.1f}")
    table.add_row("elapsed", f"{summary['elapsed_s']:.1f} s")
    Console().print(table)


def cmd_list(args: argparse.Namespace) -> int:
    width = max(len(i) for i in textgym.ENV_DESCRIPTIONS)
    for env_id, description in textgym.ENV_DESCRIPTIONS.items():
        print(f"{env_id:<{width}}  {description}")
    return 0


class _GroupSeeds(Sequence[int]):
    """Episode ``i``'s seed, ``first + i // group_size`` (GRPO-style groups of copies sharing
    one seed), computed when asked: no list of seeds, however many episodes."""

    def __init__(self, first: int, episodes: int, group_size: int):
        self.first, self.episodes, self.group_size = first, episodes, group_size

    def __len__(self) -> int:
        return self.episodes

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.episodes))]
        if not -self.episodes <= index < self.episodes:
            raise IndexError(f"episode {index} of {self.episodes}")
        return self.first + (index % self.episodes) // self.group_size


@dataclasses.dataclass
class _Setup:
    """What ``eval`` and ``collect`` play, checked before anything is played."""

    make_env: Callable[[], gym.Env]
    env_kwargs: dict[str, Any]
    wrappers: list[str]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)
    episodes: int
    walk: TaskWalk | None  # each episode's task, or None: each reset draws one
    tasks_available: int | None  # len(env.task_ids), None for an env without a task list

    def task_results(self, args: argparse.Namespace) -> TaskResults | None:
        """A fresh per-task tally of the walk (``None`` without one)."""
        if self.walk is None:
            return None
        return TaskResults(
            [t for t, _ in self.walk.tasks], self.walk.rollouts, args.success_threshold
        )


#: The ``info`` key each scripted policy plays from, and which envs give it.
_POLICY_NEEDS: dict[str, tuple[str, str]] = {
    "gold": (
        GOLD_INFO_KEY,
        (
            "only envs with a reference solution give (textgym/GSM8K-v0, "
            "ReverseText-v0, Workplace-v0, EmailToolUse-v0)"
        ),
    ),
    "minimax": ("board", "only textgym/TicTacToe-v0 gives"),
    "random": ("board", "only textgym/TicTacToe-v0 gives"),
}


def _setup(args: argparse.Namespace) -> _Setup:
    """Check ``eval``/``collect``'s arguments, the env, and that the policy can play it.

    Raises:
        UsageError: for a bad count or seed, an env that cannot be made, or a scripted
            policy that needs an ``info`` key the env does not give.
    """
    if args.episodes is not None and not 1 <= args.episodes <= sys.maxsize:
        raise UsageError(f"--episodes must be in [1, {sys.maxsize}], got {args.episodes}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.group_size < 1:
        raise UsageError(f"--group-size must be >= 1, got {args.group_size}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0 (episode seeds are non-negative), got {args.seed}")
    _check_task_flags(args)
    _check_openai_flags(args)
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    wrappers = [w for w in args.wrappers.split(",") if w] if args.wrappers else []
    make_env, probe = _env_factory(args.env_id, env_kwargs, wrappers)
    try:
        stop = tuple(getattr(probe.unwrapped, "stop_strings", ()))
        _, info = probe.reset(seed=args.seed)
        if args.policy in _POLICY_NEEDS and _POLICY_NEEDS[args.policy][0] not in info:
            key, who = _POLICY_NEEDS[args.policy]
            fits = [
                p
                for p in POLICY_NAMES
                if p != "human" and (p not in _POLICY_NEEDS or _POLICY_NEEDS[p][0] in info)
            ]
            raise UsageError(
                f"--policy {args.policy} cannot play {args.env_id}: it plays from "
                f"info[{key!r}], which {who}; use --policy {', '.join(fits[:-1])} or "
                f"{fits[-1]}"
            )
        env_task_ids = getattr(probe.unwrapped, "task_ids", None)
        walk = _task_walk(args, probe, env_task_ids)
    finally:
        probe.close()
    episodes = len(walk) if walk is not None else args.episodes or _DEFAULT_EPISODES
    if episodes % args.group_size:
        raise UsageError(
            f"{episodes} episodes are not a multiple of --group-size {args.group_size}; "
            "use a multiple of the group size"
        )
    return _Setup(
        make_env,
        env_kwargs,
        wrappers,
        stop,
        episodes,
        walk,
        None if env_task_ids is None else len(env_task_ids),
    )


_DEFAULT_EPISODES = 100  # on an env without a task list, or with --sample-tasks


def _check_task_flags(args: argparse.Namespace) -> None:
    """Refuse task-selection flags that contradict each other (before the env is made)."""
    if args.rollouts_per_task < 1:
        raise UsageError(f"--rollouts-per-task must be >= 1, got {args.rollouts_per_task}")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    if not math.isfinite(args.success_threshold):
        raise UsageError(
            f"--success-threshold must be a finite number, got {args.success_threshold}"
        )
    picks = [
        flag
        for flag, given in (
            ("--limit", args.limit is not None),
            ("--task-ids", args.task_ids is not None),
            ("--rollouts-per-task", args.rollouts_per_task > 1),
        )
        if given
    ]
    if args.sample_tasks and picks:
        raise UsageError(
            f"--sample-tasks draws each episode's task at random; it cannot be "
            f"combined with {', '.join(picks)}, which walk the tasks in order"
        )
    if args.rollouts_per_task > 1 and args.episodes is not None:
        raise UsageError(
            f"--episodes and --rollouts-per-task {args.rollouts_per_task} both set "
            "the number of episodes; give --rollouts-per-task (with --limit or "
            "--task-ids to choose the tasks)"
        )


def _task_walk(
    args: argparse.Namespace, probe: gym.Env, env_task_ids: Sequence[str] | None
) -> TaskWalk | None:
    """The tasks ``eval``/``collect`` walk, or ``None`` when each reset draws its task.

    On an env with a task list the default is every task once, in order; ``--episodes N``
    then walks N episodes in order (starting again after the last task). ``--task-ids`` on an
    env without a list (EmailToolUse-v0) are checked by a ``reset`` each.

    Raises:
        UsageError: for ``--limit`` / ``--rollouts-per-task`` on an env without a task list, or
            task ids the env does not know.
    """
    if args.sample_tasks:
        return None
    task_ids = None
    if args.task_ids is not None:
        task_ids = [t.strip() for t in args.task_ids.split(",") if t.strip()]
    if env_task_ids is None and task_ids is None:
        for flag, given in (
            ("--limit", args.limit is not None),
            ("--rollouts-per-task", args.rollouts_per_task > 1),
        ):
            if given:
                raise UsageError(
                    f"{flag} needs tasks to walk, and {args.env_id} has no task list "
                    "(GSM8K-v0, ReverseText-v0 and Workplace-v0 list theirs); use "
                    "--episodes, or --task-ids on an env that makes a task from its "
                    "id (EmailToolUse-v0)"
                )
        return None
    chosen = len(task_ids) if task_ids is not None else len(env_task_ids)  # type: ignore[arg-type]
    if args.limit is not None and args.limit > chosen:
        of = "--task-ids lists" if task_ids is not None else f"{args.env_id} holds"
        raise UsageError(
            f"--limit {args.limit} is more than the {chosen} tasks {of}; use at most "
            f"{chosen}, or leave --limit out to play them all"
        )
    try:
        tasks = plan_tasks(env_task_ids, limit=args.limit, task_ids=task_ids)
    except ValueError as exc:
        raise UsageError(f"--task-ids: {exc} ({args.env_id})") from None
    assert tasks is not None  # there is a task list, or ids
    if args.rollouts_per_task % args.group_size:
        raise UsageError(
            f"--group-size {args.group_size} groups copies of one task, and the walk "
            f"plays each task --rollouts-per-task {args.rollouts_per_task} times; use "
            "a number of rollouts per task that is a multiple of the group size "
            "(or --sample-tasks for random draws in groups)"
        )
    if env_task_ids is None:
        for task_id, options in tasks:
            try:
                probe.reset(seed=args.seed, options=options)
            except ValueError as exc:
                raise UsageError(
                    f"--task-ids: {args.env_id} cannot play task {task_id!r}: {_one_line(exc)}"
                ) from None
    return TaskWalk(tasks, args.rollouts_per_task, args.episodes)


def _checked_output(check: Callable[[Path, str], None], path: Path) -> Path:
    """``path`` after ``check`` (creates what it needs); its ValueError as a UsageError."""
    try:
        check(path, "--output")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return path


@dataclasses.dataclass
class _Played:
    """How a play ended: its length, and what stopped it early (if anything)."""

    elapsed: float
    interrupted: bool = False  # Ctrl-C
    error: str | None = None  # the endpoint of --policy openai failed (one line)

    @property
    def complete(self) -> bool:
        return not (self.interrupted or self.error)


def _play(
    args: argparse.Namespace,
    setup: _Setup,
    policy: Policy,
    description: str,
    keep: Callable[[int, Trajectory], None],
) -> _Played:
    """Play ``setup.episodes`` episodes; ``keep(i, episode)`` each finished one, in episode order.

    An episode that finishes before an earlier one is held back until that one is kept. A
    Ctrl-C, or an endpoint failure of ``--policy openai`` (:func:`_endpoint_failure`), stops
    the play; the episodes finished by then, held back or not, are all kept. ``keep`` runs
    with Ctrl-C held back (:func:`~textgym.results.hold_interrupts`), so it never stops half
    way.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    held: dict[int, Trajectory] = {}
    next_index = 0
    start = time.perf_counter()
    played = _Played(0.0)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=args.no_progress,
        transient=True,
    ) as progress:
        task = progress.add_task(f"{description} {args.env_id}", total=setup.episodes)
        seeds = _GroupSeeds(args.seed, setup.episodes, args.group_size)
        episodes = iter_rollout(
            setup.make_env, policy, seeds, batch_size=args.batch_size, options=setup.walk
        )
        try:
            with contextlib.closing(episodes):
                for index, traj in episodes:
                    held[index] = traj
                    while next_index in held:
                        with hold_interrupts():
                            keep(next_index, held[next_index])
                            del held[next_index]
                        next_index += 1
                    progress.advance(task)
        except KeyboardInterrupt:
            played.interrupted = True
        except Exception as exc:
            played.error = _endpoint_failure(args.policy, exc)
            if played.error is None:
                raise
    for index in sorted(held):  # finished, but after an episode the Ctrl-C cut short
        with hold_interrupts():
            keep(index, held.pop(index))
    played.elapsed = time.perf_counter() - start
    return played


def _summary(
    args: argparse.Namespace,
    setup: _Setup,
    policy: Policy,
    running: RunningSummary,
    tasks: TaskResults | None,
    played: _Played,
) -> dict[str, Any]:
    """The run's summary: settings, :class:`RunningSummary` statistics, the walk's per-task
    statistics (``tasks``, ``None`` with random draws), speed, completeness."""
    stats = running.result()
    elapsed, complete = played.elapsed, played.complete
    walked = None
    if tasks is not None:
        assert setup.walk is not None
        walked = {
            "available": setup.tasks_available,
            "selected": len(setup.walk.tasks),
            **tasks.result(),
        }
    tokens = getattr(policy, "tokens_generated", None)
    return {
        "env_id": args.env_id,
        "policy": args.policy,
        "model": {"hf": args.model, "openai": getattr(policy, "model", None)}.get(args.policy),
        "env_kwargs": setup.env_kwargs,
        "wrappers": setup.wrappers,
        "seed": args.seed,
        "group_size": args.group_size,
        # False after a Ctrl-C or an endpoint failure ("error"): then "episodes" counts those
        # finished and saved.
        "complete": complete,
        "error": played.error,
        "episodes_requested": setup.episodes,
        **stats,
        "tasks": walked,
        "elapsed_s": elapsed,
        "episodes_per_s": stats["episodes"] / elapsed if elapsed > 0 else math.inf,
        "tokens_generated": tokens,
        "tokens_per_s": tokens / elapsed if tokens is not None and elapsed > 0 else None,
    }


def verdict(summary: dict[str, Any]) -> str:
    """One plain sentence on how the policy did, and for a built-in base model what to run next."""
    who = summary["policy"] + (f" ({summary['model']})" if summary.get("model") else "")
    parts = [f"legal, parsable actions in {1.0 - summary['invalid_action_rate']:.0%} of turns"]
    outcomes = summary["outcomes"]
    if any(v for v in outcomes.values()):
        plural = {"win": "wins", "draw": "draws", "loss": "losses"}
        parts.append(
            ", ".join(
                f"{rate:.0%} {plural.get(name, name)}"
                for name, rate in outcomes.items()
                if not math.isnan(rate)
            )
        )
    else:
        parts.append(f"mean return {summary['mean_return']:.3f}")
    if summary.get("tasks") is not None:
        tasks, k = summary["tasks"], summary["tasks"]["rollouts_per_task"]
        parts.append(
            f"pass@1 {tasks['pass@1']:.0%}"
            + (f", pass@{k} {tasks[f'pass@{k}']:.0%}" if k > 1 else "")
            + f" over {tasks['played']} tasks"
        )
    if summary["truncated_rate"] > 0:
        parts.append(f"{summary['truncated_rate']:.0%} of episodes hit the turn limit")
    text = f"{who} over {summary['episodes']} episodes: " + "; ".join(parts) + "."
    if summary["policy"] == "hf" and summary.get("model") in MODEL_NAMES:  # a base model
        text += (
            " To train it: collect expert games with `textgym collect --policy minimax`, then"
            " `textgym sft` and `textgym train` (README, 'Training')."
        )
    return text


def cmd_eval(args: argparse.Namespace) -> int:
    """``textgym eval``: play, print the summary; with ``--output``, save each episode as it
    finishes to ``trajectories.jsonl`` and the summary last to ``summary.json``."""
    setup = _setup(args)
    out_dir = _checked_output(check_dir, Path(args.output)) if args.output else None
    policy = _build_policy(args.policy, _policy_kwargs(args, setup.stop))
    running, tasks = RunningSummary(), setup.task_results(args)
    with contextlib.ExitStack() as stack:
        sink = None
        if out_dir is not None:
            # The old summary and per-task rows describe trajectories about to be overwritten.
            (out_dir / "summary.json").unlink(missing_ok=True)
            (out_dir / "per_task.jsonl").unlink(missing_ok=True)
            sink = stack.enter_context(open_jsonl(out_dir / "trajectories.jsonl"))

        def keep(index: int, traj: Trajectory) -> None:
            if sink is not None:
                sink.write(traj.to_json())
            running.add(traj)
            if tasks is not None:
                tasks.add(setup.walk.task_of(index), traj)  # type: ignore[union-attr]

        played = _play(args, setup, policy, "eval", keep)
    summary = _summary(args, setup, policy, running, tasks, played)
    files = []
    if out_dir is not None:
        with hold_interrupts():
            if tasks is not None:
                with open_jsonl(out_dir / "per_task.jsonl") as rows:
                    for row in tasks.rows():
                        rows.write(json.dumps(_json_safe(row), ensure_ascii=False))
            write_json(out_dir / "summary.json", _json_safe(summary))
        files = [
            out_dir / name
            for name in ("summary.json", "trajectories.jsonl", "per_task.jsonl")
            if name != "per_task.jsonl" or tasks is not None
        ]
    if not played.complete:
        saved = (
            f'; wrote them to {_and(files[1:] + files[:1])} ("complete": false)'
            if out_dir is not None
            else "; nothing saved (no --output)"
        )
        return _stopped(played, f"{summary['episodes']} of {setup.episodes} episodes{saved}")
    _print_summary(summary)
    print(verdict(summary))
    if out_dir is not None:
        print(f"wrote {_and(files)}")
    return 0


def _and(paths: Sequence[Path]) -> str:
    """``"a and b"``, ``"a, b and c"``."""
    names = [str(p) for p in paths]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _stopped(played: _Played, what: str) -> int:
    """Say in one line why the play stopped and what it kept; the exit code (130 or 1)."""
    if played.error is not None:
        print(
            f"textgym: error: --policy openai failed: {played.error}; stopped after {what}",
            file=sys.stderr,
        )
        return 1
    print(f"textgym: interrupted after {what}", file=sys.stderr)
    return 130


def cmd_collect(args: argparse.Namespace) -> int:
    """``textgym collect``: play, append each episode the filter keeps to the JSONL file as it
    finishes."""
    from textgym.collect import parse_filter, sft_record

    try:
        wanted = parse_filter(args.filter) if args.filter else (lambda _t: True)
    except ValueError as exc:
        raise UsageError(f"--filter: {exc}") from None
    setup = _setup(args)
    out = _checked_output(check_file, Path(args.output))
    policy = _build_policy(args.policy, _policy_kwargs(args, setup.stop))
    running, tasks = RunningSummary(), setup.task_results(args)
    with open_jsonl(out) as sink:

        def keep(index: int, traj: Trajectory) -> None:
            if wanted(traj):
                sink.write(json.dumps(sft_record(traj), ensure_ascii=False))
            running.add(traj)
            if tasks is not None:
                tasks.add(setup.walk.task_of(index), traj)  # type: ignore[union-attr]

        played = _play(args, setup, policy, "collect", keep)
    summary = _summary(args, setup, policy, running, tasks, played)
    kept = f"kept {sink.count} of {summary['episodes']} episodes" + (
        f" (filter: {args.filter})" if args.filter else ""
    )
    if not played.complete:
        return _stopped(
            played,
            f"{summary['episodes']} of {setup.episodes} episodes; {kept}; "
            f"wrote {out} ({sink.count} whole records, valid JSONL)",
        )
    _print_summary(summary)
    print(f"{kept}; wrote {out}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """``textgym play``: the single-agent env against its built-in opponent, or with
    ``--against`` the two-seat tic-tac-toe against a policy (:func:`_play_against`)."""
    from textgym.policies.human import HumanPolicy

    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0 (episode seeds are non-negative), got {args.seed}")
    given = [flag for flag, value in _play_against_flags(args).items() if value is not None]
    if args.against is None and given:
        raise UsageError(f"{', '.join(given)} can only be used with --against POLICY")
    if args.against is not None:
        return _play_against(args)
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    make_env, probe = _env_factory(args.env_id, env_kwargs, [])
    template = getattr(probe.unwrapped, "action_template", None)
    probe.close()
    policy = HumanPolicy(action_template=template)
    print(f"Playing {args.env_id}. Type your answer and press Enter; Ctrl-D quits.")
    try:
        while True:
            (traj,) = rollout(make_env, policy, [args.seed], batch_size=1)
            print(
                f"\n{traj.messages[-1]['content']}\n\nreturn {traj.episode_return:.2f}"
                + (f", outcome {traj.outcome}" if traj.outcome else "")
            )
            args.seed = None if args.seed is None else args.seed + 1
            if not args.repeat:
                return 0
    except (EOFError, KeyboardInterrupt):
        print("\nbye")
        return 0


_TWO_SEAT_ENV_ID = "textgym/TicTacToe-v0"
_PLAY_AGAINST = ("hf", "openai", "minimax", "random")
#: Defaults of the options that only apply with ``--against`` (None in the parser, so that
#: giving one without ``--against`` can be reported).
_PLAY_AGAINST_DEFAULTS: dict[str, Any] = {
    "model": _DEFAULT_MODEL,
    "dtype": "auto",
    "max_new_tokens": 256,
    "temperature": 0.0,
    "top_p": 1.0,
    "mark": "X",
    "prompt_style": "compact",
}


def _play_against_flags(args: argparse.Namespace) -> dict[str, Any]:
    """``{flag: value}`` of the options that only apply with ``--against``."""
    names = [*_PLAY_AGAINST_DEFAULTS, "base_url"]
    flags = {f"--{name.replace('_', '-')}": getattr(args, name) for name in names}
    flags["--show-completions"] = args.show_completions or None
    return flags


class _ShowCompletions:
    """Wraps a policy and prints each completion it returns (``play --show-completions``)."""

    def __init__(self, policy: Policy, label: str):
        self.policy, self.label = policy, label
        self.name = getattr(policy, "name", type(policy).__name__)

    def act(self, conversations: Any, infos: Any) -> list[Any]:
        completions = self.policy.act(conversations, infos)
        for completion in completions:
            print(f"[{self.label}] {completion.text!r}", flush=True)
        return completions


def _play_against(args: argparse.Namespace) -> int:
    """``textgym play textgym/TicTacToe-v0 --against POLICY``: a person against a policy.

    The person sits in seat ``player_0`` and reads the full prompts; the policy sits in
    ``player_1`` and gets the ``--prompt-style`` prompts (compact by default, the style the
    trained tic-tac-toe models saw). Games are played with :func:`textgym.selfplay.selfplay` on
    the two-seat env, one at a time; ``--mark`` picks the person's mark (``random``: drawn
    from the game's seed).

    Raises:
        UsageError: for another env id, ``--env-kwargs``, or a policy that cannot be built.
        SystemExit: (code 2) when PettingZoo or the policy's extras are not installed.
    """
    if args.env_id != _TWO_SEAT_ENV_ID:
        raise UsageError(
            f"--against plays two-seat tic-tac-toe only; use {_TWO_SEAT_ENV_ID}, "
            f"got {args.env_id!r}"
        )
    if _parse_env_kwargs(args.env_kwargs):
        raise UsageError(
            "--env-kwargs does not apply with --against; use --mark and --prompt-style"
        )
    for name, default in _PLAY_AGAINST_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    try:
        pettingzoo_env = importlib.import_module("textgym.envs.tictactoe.pettingzoo_env")
    except ImportError as exc:
        _fail(f'textgym play --against needs PettingZoo ({exc}); pip install "textgym[multiagent]"')
    from textgym.envs.tictactoe.env import TicTacToeEnv
    from textgym.policies.human import HumanPolicy

    policy_args = argparse.Namespace(
        **vars(args), policy=args.against, batch_size=1, no_reasoning=False
    )
    stop = TicTacToeEnv.stop_strings  # the answer ends at </move>
    model: Policy = _build_policy(args.against, _policy_kwargs(policy_args, stop))
    if args.show_completions:
        model = _ShowCompletions(model, args.against)
    human = HumanPolicy(action_template=TicTacToeEnv.action_template)
    styles = {"player_0": "full", "player_1": args.prompt_style}

    def make_env() -> Any:
        return pettingzoo_env.env(prompt_style=styles)

    served = getattr(model, "model", None) if args.against == "openai" else None
    who = {"hf": f"hf {args.model}", "openai": f"openai {served or '(first model served)'}"}
    print(
        f"Playing {args.env_id} against {who.get(args.against, args.against)}, which sees the "
        f"{args.prompt_style} prompt. Type a cell number 0-8 and press Enter; Ctrl-D quits."
    )
    first = {"X": "player_0", "O": "player_1", "random": "random"}[args.mark]
    return _play_games(args, [human, model], make_env, first)


def _play_games(
    args: argparse.Namespace, policies: list[Any], make_env: Callable[[], Any], first: str
) -> int:
    """Play games of ``policies[0]`` (the person) against ``policies[1]`` until done."""
    from textgym.selfplay import selfplay

    try:
        while True:
            (game,) = selfplay(
                policies, [args.seed], batch_size=1, first_player=first, make_env=make_env
            )
            mine = game.trajectories["player_0"]
            outcome = game.outcomes["player_0"]
            print(f"\n{mine.messages[-1]['content']}\n")
            if outcome is None:
                print(
                    f"Result: no result, the game hit the limit of actions per seat "
                    f"(you played {game.marks['player_0']})."
                )
            else:
                said = {"win": "you win", "draw": "a draw", "loss": "you lose"}[outcome]
                print(f"Result: {said} (you played {game.marks['player_0']}).")
            args.seed = None if args.seed is None else args.seed + 1
            if not args.repeat:
                return 0
    except (EOFError, KeyboardInterrupt):
        print("\nbye")
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="textgym", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"textgym {textgym.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="list the registered environments")
    p_list.set_defaults(func=cmd_list)

    def add_play_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("env_id", help="registered id, e.g. textgym/TicTacToe-v0")
        p.add_argument(
            "--policy", choices=[p for p in POLICY_NAMES if p != "human"], default="minimax"
        )
        p.add_argument(
            "--model",
            default=_DEFAULT_MODEL,
            help="for --policy hf: 'tiny', 'gemma-3-270m', a HF id or a local path; for "
            "--policy openai: a served model name (default: the first one served)",
        )
        p.add_argument(
            "--base-url",
            action="append",
            default=None,
            help="for --policy openai: endpoint URL (default http://127.0.0.1:8000/v1); "
            "repeat or separate with commas to spread requests over several",
        )
        p.add_argument(
            "--dtype",
            choices=DTYPE_NAMES,
            default="auto",
            help="weights of an hf model; auto: bfloat16 where the CPU/GPU computes it "
            "natively, else float32",
        )
        p.add_argument(
            "--episodes",
            type=int,
            default=None,
            help=f"episodes to play (default {_DEFAULT_EPISODES}); on an env with a task "
            "list (GSM8K, ReverseText, Workplace) the default is one pass over the "
            "tasks, and N episodes walk them in order, from the first again after "
            "the last",
        )
        p.add_argument(
            "--limit",
            type=int,
            default=None,
            help="play only the first N tasks (of the env's list, or of --task-ids)",
        )
        p.add_argument(
            "--task-ids",
            default=None,
            help="comma-separated task ids to play, in this order (any env whose "
            "reset takes options['task_id'])",
        )
        p.add_argument(
            "--rollouts-per-task",
            type=int,
            default=1,
            help="play each task K times (consecutive episodes) and report pass@K "
            "and mean@K; eval --output writes per_task.jsonl",
        )
        p.add_argument(
            "--success-threshold",
            type=float,
            default=1.0,
            help="an episode succeeds (for pass@k) when its task component (correct, "
            "lcs or outcome; the return for an env without one) is >= this; "
            "default 1.0: a right answer, an exact reversal, a win, matching tables",
        )
        p.add_argument(
            "--sample-tasks",
            action="store_true",
            help="draw each episode's task at random, with replacement (as for "
            "training), instead of walking the task list; --episodes counts them",
        )
        p.add_argument(
            "--seed",
            type=int,
            default=0,
            help="group g of episodes is reset with seed + g (one group per episode by default)",
        )
        p.add_argument(
            "--group-size",
            type=int,
            default=1,
            help="copies of each task sharing one seed, as in a GRPO group (walking "
            "a task list: a divisor of --rollouts-per-task)",
        )
        p.add_argument("--env-kwargs", default="{}", help="JSON object passed to gymnasium.make")
        p.add_argument(
            "--wrappers",
            default="",
            help=f"comma-separated, applied in order: {', '.join(_WRAPPERS)}",
        )
        p.add_argument(
            "--batch-size",
            type=int,
            default=32,
            help="episodes played at once (and sequences per generate call)",
        )
        p.add_argument("--max-new-tokens", type=int, default=256)
        p.add_argument("--temperature", type=float, default=0.7)
        p.add_argument("--top-p", type=float, default=1.0)
        p.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="--policy openai: most requests in flight at once (default 8)",
        )
        p.add_argument(
            "--timeout-s",
            type=float,
            default=None,
            help="--policy openai: seconds one attempt of a request may take (default 120)",
        )
        p.add_argument(
            "--max-retries",
            type=int,
            default=None,
            help="--policy openai: retries of a request after a transient failure (default 3)",
        )
        p.add_argument(
            "--api-key",
            default=None,
            help="--policy openai: bearer token (default: $OPENAI_API_KEY, which keeps "
            "it out of the process list; else 'EMPTY')",
        )
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        p.add_argument(
            "--no-reasoning",
            action="store_true",
            help="random/minimax: answer <move>N</move> without a <think> block",
        )

    p_eval = sub.add_parser("eval", help="play episodes with a policy and report statistics")
    add_play_args(p_eval)
    p_eval.add_argument(
        "--output",
        default=None,
        help="directory for summary.json, trajectories.jsonl and, when the tasks "
        "are walked, per_task.jsonl",
    )
    p_eval.set_defaults(func=cmd_eval)

    p_collect = sub.add_parser("collect", help="play episodes and write chat-format JSONL for SFT")
    add_play_args(p_collect)
    p_collect.add_argument("--output", required=True, help="JSONL file to write")
    p_collect.add_argument(
        "--filter",
        default=None,
        help="keep episodes matching e.g. 'outcome in win,draw' or 'return >= 0.5'",
    )
    p_collect.set_defaults(func=cmd_collect)

    # The trainers parse their own flags from their config dataclasses (see _run_trainer);
    # these entries only list them in `textgym --help`.
    sub.add_parser(
        "sft",
        help="supervised fine-tuning on collected chat JSONL (textgym sft --help)",
        add_help=False,
    )
    sub.add_parser(
        "train",
        help="GRPO training of an LLM policy on an env (textgym train --help)",
        add_help=False,
    )

    p_play = sub.add_parser("play", help="play an environment yourself in the terminal")
    p_play.add_argument("env_id")
    p_play.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the first episode (then +1 each); with --against, also the policy's seed",
    )
    p_play.add_argument("--env-kwargs", default="{}")
    p_play.add_argument("--repeat", action="store_true", help="start a new episode after each one")
    p_play.add_argument(
        "--against",
        choices=_PLAY_AGAINST,
        default=None,
        help=f"play {_TWO_SEAT_ENV_ID} against this policy instead of the env's "
        "built-in opponent (needs PettingZoo)",
    )
    p_play.add_argument(
        "--mark",
        choices=("X", "O", "random"),
        default=None,
        help="with --against: your mark (default X; X moves first)",
    )
    p_play.add_argument(
        "--prompt-style",
        choices=("compact", "full"),
        default=None,
        help="with --against: the prompts the policy sees (default compact, the "
        "style of the trained tic-tac-toe models); you see the full ones",
    )
    p_play.add_argument(
        "--model",
        default=None,
        help=f"with --against hf: 'tiny', '{_DEFAULT_MODEL}' (default), a HF "
        "id, or a local model or LoRA adapter directory; with --against "
        "openai: a served model name (default: the first one served)",
    )
    p_play.add_argument(
        "--base-url",
        action="append",
        default=None,
        help="with --against openai: endpoint URL (default http://127.0.0.1:8000/v1)",
    )
    p_play.add_argument(
        "--dtype",
        choices=DTYPE_NAMES,
        default=None,
        help="with --against hf: weights' dtype (default auto)",
    )
    p_play.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="with --against hf|openai: tokens per answer (default 256)",
    )
    p_play.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="with --against hf|openai: sampling temperature (default 0, greedy)",
    )
    p_play.add_argument(
        "--top-p",
        type=float,
        default=None,
        help="with --against hf|openai: nucleus sampling (default 1.0)",
    )
    p_play.add_argument(
        "--show-completions",
        action="store_true",
        help="with --against: print each raw answer of the policy",
    )
    p_play.set_defaults(func=cmd_play)

    p_compare = sub.add_parser(
        "compare", help="compare training runs: last metrics and overlaid plots"
    )
    p_compare.add_argument(
        "runs", nargs="+", help="two or more run directories (with metrics.jsonl)"
    )
    p_compare.add_argument("--plots", default=None, help="directory for the overlaid PNG plots")
    p_compare.set_defaults(func=cmd_compare)
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        from textgym.algos.metrics import compare_runs

        rows, paths = compare_runs(args.runs, args.plots)
    except ImportError as exc:
        _fail(f'textgym compare needs the training extras ({exc}); pip install "textgym[train]"')
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(f"compare: {exc}") from None
    from rich.console import Console
    from rich.table import Table

    names = [Path(run).name for run in args.runs]
    table = Table(title="last value of each metric (train: last step; eval: last evaluation)")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(row["metric"], *(f"{row[n]:.4g}" if n in row else "-" for n in names))
    Console(width=200).print(table)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _run_trainer(command: str, argv: Sequence[str]) -> int:
    """``textgym sft`` / ``textgym train``: flags from the config dataclass (``tyro``).

    What can be checked before training starts is, and is reported as a usage error: the
    config's own validation, the env, wrappers and kwargs (``train``), the output directory,
    and the errors of loading the model or reading the data.
    """
    try:
        import tyro

        from textgym.algos.common import check_resumable
        from textgym.algos.sft import read_conversations
        from textgym.data import read_jsonl
        from textgym.models import load_model

        if command == "sft":
            from textgym.algos.sft import SFTConfig as Config
            from textgym.algos.sft import train
        else:
            from textgym.algos.grpo import GRPOConfig as Config
            from textgym.algos.grpo import train
    except ImportError as exc:
        _fail(
            f'textgym {command} needs the training extras ({exc}); pip install "textgym[llm,train]"'
        )
    config = _trainer_config(Config, command, argv, tyro)
    if getattr(config, "env_id", None) is not None:  # train: build the env once, as train will
        _, probe = _env_factory(config.env_id, dict(config.env_kwargs), list(config.wrappers))
        probe.close()
    try:
        check_dir(Path(config.output_dir), "--output-dir")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        result = train(config)
    except (ValueError, OSError, ImportError) as exc:
        # Raised while loading the model or the data, or refusing a resume: before training.
        if _raised_in(exc, load_model, read_jsonl, check_resumable, read_conversations):
            raise UsageError(_one_line(exc)) from None
        raise
    print(json.dumps(_json_safe(result), indent=2))
    return 0


def _trainer_config(config_class: type, command: str, argv: Sequence[str], tyro: Any) -> Any:
    """Parse ``argv`` into ``config_class``; its validation error as a one-line UsageError.

    ``tyro`` parses into a subclass without ``__post_init__`` (tyro would print a validation
    error as a multi-line box); the config is then built here, where its ``ValueError`` can
    be reported like any usage error. The ``--help`` text is the config's own.
    """
    unchecked = dataclasses.make_dataclass(
        config_class.__name__,
        [],
        bases=(config_class,),
        kw_only=True,
        namespace={
            "__post_init__": lambda self: None,
            "__doc__": config_class.__doc__,
            "__module__": config_class.__module__,
        },
    )
    parsed = tyro.cli(
        unchecked, args=list(argv), prog=f"textgym {command}", config=(tyro.conf.FlagConversionOff,)
    )
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(config_class) if f.init}
    try:
        return config_class(**values)
    except ValueError as exc:  # __post_init__ validation: one line, exit 2
        raise UsageError(_one_line(exc)) from None


def _raised_in(exc: BaseException, *functions: Callable[..., Any]) -> bool:
    """Whether ``exc`` was raised inside one of ``functions`` (its traceback passes through one)."""
    codes = {getattr(f, "__code__", None) for f in functions}
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``textgym`` console script; returns the exit code.

    0: done; 1: the endpoint of ``--policy openai`` failed while playing (one
    ``textgym: error:`` line; ``eval``/``collect`` keep and report what they saved, as after a
    Ctrl-C); 2: a usage error (one ``textgym: error:`` line); 130: interrupted by Ctrl-C (one
    line; ``eval``/``collect`` keep and report what they saved).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ("sft", "train"):
            return _run_trainer(argv[0], argv[1:])
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        print("textgym: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
