"""Playing a policy on an env's tasks in batches, as ``eval`` and ``collect`` do: checking the
env and the policy before anything is played, walking the tasks, playing the episodes in
batches, and the run's summary.

Episodes finished are handed on in episode order as they finish; a Ctrl-C, or an endpoint that
fails under ``--policy openai``, stops the play and keeps what was finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from textgym.builder import GENERAL_POLICIES, env_bound_expert_ids, gold_env_ids
from textgym.checks import check_urls, one_line
from textgym.cli._options import (
    DEFAULT_EPISODES,
    EnvOptions,
    EpisodeOptions,
    PolicyOptions,
    split_list,
)
from textgym.cli.building import build_env
from textgym.errors import EndpointError, NonFiniteError, OutputWriteError, UsageError
from textgym.evaluation import (
    GroupSeeds,
    RunningSummary,
    TaskResults,
    TaskWalk,
    check_finite_return,
    plan_tasks,
)
from textgym.policies import Policy
from textgym.policies.gold import GOLD_INFO_KEY
from textgym.progress import EpisodeProgress
from textgym.results import hold_interrupts
from textgym.rollout import Trajectory, iter_rollout
from textgym.serving.client import RemoteEnvError

__all__ = [
    "BatchPlayConfig",
    "Played",
    "Setup",
    "checked_output",
    "endpoint_failure",
    "play",
    "print_summary",
    "run_summary",
    "setup",
    "stopped",
]


@dataclasses.dataclass(kw_only=True)
class BatchPlayConfig(EpisodeOptions, PolicyOptions, EnvOptions):
    """The options of ``eval`` and ``collect``: env, policy, episodes."""

    opponent_random_move_prob: tuple[float, float] | None = None
    """Envs with an opponent (tic-tac-toe): the range (low, high) from which each episode's
    opponent random-move probability is drawn uniformly (1 is a uniformly random opponent, 0
    the optimal one); None keeps the env's own setting. Not with --env-url."""

    def __post_init__(self) -> None:
        if hasattr(self, "env_url"):  # the commands that take EnvUrlOptions
            self.env_url = check_urls("--env-url", self.env_url)
        if getattr(self, "env_url", ()) and self.opponent_random_move_prob is not None:
            raise ValueError(
                "--opponent-random-move-prob applies to a local env; a served env keeps its "
                "own opponent (leave out --env-url or this option)"
            )
        self.check_env()
        self.check_episodes()
        self.check_policy()


def endpoint_failure(policy_name: str, exc: BaseException) -> str | None:
    """One line on ``exc`` if it is an endpoint failure of ``--policy openai``, else ``None``.

    An endpoint failure is an :class:`~textgym.errors.EndpointError` (what
    :class:`~textgym.policies.openai_compat.OpenAIPolicy` raises once its retries are spent) or
    another ``openai.OpenAIError`` (an HTTP error status), which only the client raises; a
    ``ConnectionError`` or ``TimeoutError`` of an env or a wrapper is a bug and keeps its
    traceback.
    """
    if policy_name != "openai":
        return None
    import openai

    if isinstance(exc, (EndpointError, openai.OpenAIError)):
        return one_line(exc)
    return None


@dataclasses.dataclass
class Setup:
    """What ``eval`` and ``collect`` play, checked before anything is played."""

    make_env: Callable[[], gym.Env]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)
    episodes: int
    walk: TaskWalk | None  # each episode's task, or None: each reset draws one
    tasks_available: int | None  # len(env.task_ids), None for an env without a task list
    random_action: Any = None  # the env's TextEnv.random_action, for --policy random
    expert_policy: str | None = None  # the env's TextEnv.expert_policy, for hints
    # The env class's TextEnv.make_expert when the policy that plays is the env's own expert.
    make_expert: Callable[..., Policy] | None = None

    def task_results(self, config: BatchPlayConfig) -> TaskResults | None:
        """A fresh per-task tally of the walk (``None`` without one)."""
        if self.walk is None:
            return None
        return TaskResults(
            [t for t, _ in self.walk.tasks], self.walk.rollouts, config.success_threshold
        )


def _random_can_play(base: Any, info: dict[str, Any]) -> bool:
    """Whether ``--policy random`` has an action grammar to draw from (RandomPolicy's order)."""
    return base.random_action is not None or "legal_moves" in info or bool(info.get("tools"))


def setup(config: BatchPlayConfig) -> Setup:
    """Check the env and that the policy can play it; plan the episodes. Without ``--policy``
    (or with ``--policy expert``) the env's expert plays (:attr:`textgym.TextEnv.expert_policy`),
    without one ``random``; the choice is written into ``config.policy``.

    Raises:
        UsageError: an env that cannot be made, a policy that cannot play it (``gold`` without
            gold answers, ``random`` without an action grammar, another env's expert), or
            tasks that cannot be walked.
    """
    make_env, probe = build_env(
        config.env_id, config.env_kwargs, config.wrappers, config.opponent_random_move_prob
    )
    try:
        base = probe.unwrapped
        stop = base.stop_strings
        _, info = probe.reset(seed=config.seed)
        make_expert = _choose_policy(config, base, info)
        env_task_ids = base.task_ids
        walk = _task_walk(config, probe, env_task_ids)
        random_action, expert = base.random_action, base.expert_policy
    finally:
        probe.close()
    episodes = len(walk) if walk is not None else config.episodes or DEFAULT_EPISODES
    available = None if env_task_ids is None or config.sample_tasks else len(env_task_ids)
    return Setup(make_env, stop, episodes, walk, available, random_action, expert, make_expert)


def _choose_policy(
    config: BatchPlayConfig, base: Any, info: dict[str, Any]
) -> Callable[..., Policy] | None:
    """Resolve ``--policy`` (none, or ``expert``: the env's expert, else ``random``) into
    ``config.policy`` and check that it can play the env ``base`` whose reset gave ``info``;
    return the env class's :meth:`~textgym.TextEnv.make_expert` when the policy is the env's
    own expert (it builds it, for an env outside textgym's registry too), else ``None``.

    Raises:
        UsageError: ``--policy expert`` on an env without one, ``random`` without an action
            grammar, ``gold`` without gold answers, or the expert of another env.
    """
    name = config.env_id
    if config.policy == "expert" and base.expert_policy is None:
        raise UsageError(
            f"--policy expert: {name} declares no expert policy (textgym.TextEnv."
            "expert_policy); use --policy random, hf or openai"
        )
    defaulted = config.policy is None
    if config.policy in (None, "expert"):  # the env's expert, else the floor of a grammar
        config.policy = base.expert_policy or "random"
    fallback = (
        "use --policy "
        + (f"expert (its {base.expert_policy})" if base.expert_policy else "random")
        + ", hf or openai"
    )
    if config.policy == "random" and not _random_can_play(base, info):
        default = " (the default on an env without an expert policy)" if defaulted else ""
        raise UsageError(
            f"--policy random{default} cannot play {name}: it draws from the env's action "
            f"grammar, and {type(base).__name__} declares no random_action "
            "(textgym.TextEnv.random_action) while its reset info lists neither "
            "legal_moves nor tools; declare one, or use --policy gold, hf or openai"
        )
    if config.policy == "gold" and GOLD_INFO_KEY not in info:
        raise UsageError(
            f"--policy gold cannot play {name}: it plays from info[{GOLD_INFO_KEY!r}], which "
            f"only envs with a reference solution give ({', '.join(gold_env_ids())}); " + fallback
        )
    if config.policy in GENERAL_POLICIES:
        return None
    if config.policy != base.expert_policy:
        own = env_bound_expert_ids(config.policy) or []
        raise UsageError(
            f"--policy {config.policy} cannot play {name}: it is the expert of "
            f"{', '.join(own) or 'another env'} only; " + fallback
        )
    return type(base).make_expert


def _task_walk(
    config: BatchPlayConfig, probe: gym.Env, env_task_ids: Sequence[str] | None
) -> TaskWalk | None:
    """The tasks ``eval``/``collect`` walk, or ``None`` when each reset draws its task.

    On an env with a task list the default is every task once, in order; ``--episodes N``
    then walks N episodes in order (starting again after the last task). ``--task-ids`` on an
    env without a list (EmailToolUse-v1) are checked by a ``reset`` each. On an env without a
    list (or with ``--sample-tasks``) the seeds are the tasks: with ``--rollouts-per-task K``
    or ``--limit N`` the walk plays K episodes of each of N seeds (default 100), task ``g``
    reset with seed ``--seed + g`` (:class:`~textgym.evaluation.GroupSeeds`).

    Raises:
        UsageError: for ``--episodes`` with ``--limit`` on a walk over seeds, or task ids the
            env does not know.
    """
    task_ids = split_list(config.task_ids)
    if config.sample_tasks or (env_task_ids is None and task_ids is None):
        if config.rollouts_per_task == 1 and config.limit is None:
            return None  # --episodes seeds, once each, no per-task tally
        if config.episodes is not None:
            raise UsageError(
                f"--episodes and --limit {config.limit} both set the number of episodes; on "
                f"{config.env_id} without a task list --limit N plays the N seeds --seed, "
                "--seed + 1, ... (each --rollouts-per-task times); give one of them"
            )
        seeds = range(config.seed, config.seed + (config.limit or DEFAULT_EPISODES))
        return TaskWalk([(f"seed={s}", {}) for s in seeds], config.rollouts_per_task)
    chosen = len(task_ids) if task_ids is not None else len(env_task_ids)  # type: ignore[arg-type]
    if config.limit is not None and config.limit > chosen:
        of = "--task-ids lists" if task_ids is not None else f"{config.env_id} holds"
        raise UsageError(
            f"--limit {config.limit} is more than the {chosen} tasks {of}; use at most "
            f"{chosen}, or leave --limit out to play them all"
        )
    try:
        tasks = plan_tasks(env_task_ids, limit=config.limit, task_ids=task_ids)
    except ValueError as exc:
        raise UsageError(f"--task-ids: {exc} ({config.env_id})") from None
    assert tasks is not None  # there is a task list, or ids
    if env_task_ids is None:
        for task_id, options in tasks:
            try:
                probe.reset(seed=config.seed, options=options)
            except ValueError as exc:
                raise UsageError(
                    f"--task-ids: {config.env_id} cannot play task {task_id!r}: {one_line(exc)}"
                ) from None
    return TaskWalk(tasks, config.rollouts_per_task, config.episodes)


def checked_output(check: Callable[[Path, str], None], path: Path, flag: str) -> Path:
    """``path`` after ``check`` (creates what it needs); its ValueError as a UsageError."""
    try:
        check(path, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return path


@dataclasses.dataclass
class Played:
    """How a play ended: its length, and what stopped it early (if anything)."""

    elapsed: float
    interrupted: bool = False  # Ctrl-C
    # One line: the endpoint of --policy openai failed, or an episode's return is not finite.
    error: str | None = None
    endpoint: bool = True  # the error is the endpoint's (said so in the message)

    @property
    def complete(self) -> bool:
        return not (self.interrupted or self.error)


def play(
    config: BatchPlayConfig,
    plan: Setup,
    policy: Policy,
    description: str,
    keep: Callable[[int, Trajectory], None],
) -> Played:
    """Play ``plan.episodes`` episodes; ``keep(i, episode)`` each finished one, in episode order.

    An episode that finishes before an earlier one is held back until that one is kept. A
    Ctrl-C, an endpoint failure of ``--policy openai`` (:func:`endpoint_failure`), or an
    episode whose return is NaN or infinite (:func:`~textgym.evaluation.check_finite_return`;
    that episode is not kept) stops the play; the episodes finished by then, held back or
    not, are all kept. A record ``keep`` cannot write (:meth:`JsonlWriter.write`: a full
    disk) stops it too, and the episodes held back are dropped (the file holds whole
    records). ``keep`` runs with Ctrl-C held back
    (:func:`~textgym.results.hold_interrupts`), so it never stops half way.

    Progress (``--progress``, :class:`~textgym.progress.EpisodeProgress`) advances as each
    episode finishes, and its action count with every batched turn.
    """
    held: dict[int, Trajectory] = {}
    next_index = 0
    start = time.perf_counter()
    played = Played(0.0)
    with EpisodeProgress(
        f"{description} {config.env_id}", plan.episodes, enabled=config.progress
    ) as progress:
        seeds = GroupSeeds(config.seed, plan.episodes, config.rollouts_per_task)
        episodes = iter_rollout(
            plan.make_env,
            policy,
            seeds,
            batch_size=config.rollout_batch_size,
            options=plan.walk,
            on_turn=progress.actions,
        )
        try:
            with contextlib.closing(episodes):
                for index, traj in episodes:
                    check_finite_return(traj)  # statistics and JSON need a finite number
                    held[index] = traj
                    while next_index in held:
                        with hold_interrupts():
                            keep(next_index, held[next_index])
                            del held[next_index]
                        next_index += 1
                    progress.episode_done()
        except KeyboardInterrupt:
            played.interrupted = True
        except Exception as exc:
            played.error = endpoint_failure(config.policy, exc)
            if isinstance(exc, OutputWriteError):
                # The output cannot be written (a full disk): what it holds is whole records.
                played.error = f"cannot write {exc.filename}: {exc.strerror}"
                played.endpoint = False
                held.clear()  # not saved: the summary counts what the file holds
            if played.error is None and isinstance(exc, RemoteEnvError):
                played.error, played.endpoint = one_line(exc), False  # an env server failed
            if played.error is None and isinstance(exc, NonFiniteError):
                played.error, played.endpoint = one_line(exc), False
            if played.error is None:
                raise
    for index in sorted(held):  # finished, but after an episode the Ctrl-C cut short
        with hold_interrupts():
            keep(index, held.pop(index))
    played.elapsed = time.perf_counter() - start
    return played


def run_summary(
    config: BatchPlayConfig,
    plan: Setup,
    policy: Policy,
    running: RunningSummary,
    tasks: TaskResults | None,
    played: Played,
) -> dict[str, Any]:
    """The run's summary: settings, :class:`RunningSummary` statistics, the walk's per-task
    statistics (``tasks``, ``None`` with random draws), speed, completeness."""
    stats = running.result()
    elapsed = played.elapsed
    walked = None
    if tasks is not None:
        assert plan.walk is not None
        walked = {"available": plan.tasks_available, "selected": len(plan.walk.tasks)}
        walked.update(tasks.result())
    tokens = policy.tokens_generated
    return {
        "env_id": config.env_id,
        "policy": config.policy,
        "model": {"hf": config.model, "openai": getattr(policy, "model", None)}.get(config.policy),
        "env_kwargs": config.env_kwargs,
        "wrappers": list(config.wrappers),
        "seed": config.seed,
        "rollouts_per_task": config.rollouts_per_task,
        # False after a Ctrl-C or an endpoint failure ("error"): then "episodes" counts those
        # finished and saved.
        "complete": played.complete,
        "error": played.error,
        "episodes_requested": plan.episodes,
        **stats,
        "tasks": walked,
        "elapsed_s": elapsed,
        "episodes_per_s": stats["episodes"] / elapsed if elapsed > 0 else math.inf,
        "tokens_generated": tokens,
        "tokens_per_s": tokens / elapsed if tokens is not None and elapsed > 0 else None,
    }


#: The policies that generate with a token limit (--max-new-tokens); the others are scripted.
_LLM_POLICIES = ("hf", "openai")


def print_summary(summary: dict[str, Any]) -> None:
    """The summary as a table on the terminal."""
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
    # A scripted policy's actions have no token limit: the row only where one applies or cut.
    if summary["policy"] in _LLM_POLICIES or summary["length_truncated_rate"] > 0:
        cut = f"{summary['length_truncated_rate']:.1%}"
        table.add_row("completions cut at --max-new-tokens", cut)
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


def stopped(played: Played, what: str) -> int:
    """Say in one line why the play stopped and what it kept; the exit code (130 or 1)."""
    import sys

    if played.error is not None:
        cause = "--policy openai failed: " if played.endpoint else ""
        print(f"textgym: error: {cause}{played.error}; stopped after {what}", file=sys.stderr)
        return 1
    print(f"textgym: interrupted after {what}", file=sys.stderr)
    return 130
