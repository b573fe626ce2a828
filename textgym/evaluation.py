"""Summary statistics of evaluation episodes (the numbers ``textgym eval`` prints and saves).

An evaluation is a pass over the tasks. :func:`plan_tasks` picks the tasks of a dataset env
(all of them in order, the first ``limit``, or a list of ids), :class:`TaskWalk` gives each
episode the ``reset`` options of its task (``k`` consecutive episodes per task),
:class:`GroupSeeds` gives those ``k`` episodes one seed, and :class:`TaskResults` gathers each
task's rollouts into pass@k (:func:`pass_at_k`, the unbiased estimator of Chen et al., 2021)
and mean@k. Success is :func:`task_score` reaching a threshold:
the env's own grade of the task, never a shaping term. :class:`RunningSummary` /
:func:`summarize` give the per-episode statistics.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from textgym.checks import check_int, check_number
from textgym.errors import NonFiniteError
from textgym.rollout import Trajectory

__all__ = [
    "OUTCOMES",
    "TASK_COMPONENTS",
    "GroupSeeds",
    "RunningSummary",
    "TaskResults",
    "TaskWalk",
    "check_finite_return",
    "mean_stderr",
    "pass_at_k",
    "plan_tasks",
    "summarize",
    "task_score",
]

OUTCOMES = ("win", "draw", "loss")

#: The reward component that grades the task itself, looked up in this order: ``correct``
#: (GSM8K-v0: the right number), ``lcs`` (ReverseText-v0: 1.0 exactly for the exact reversal),
#: ``outcome`` (TicTacToe-v0: win 1, draw 0.5; Workplace-v1 and EmailToolUse-v1: 1 when the
#: final tables match). Format and wrapper terms (``format``, ``invalid_action``) shape the
#: reward; they never make an episode a success.
TASK_COMPONENTS = ("correct", "lcs", "outcome")


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and its standard error, computed without overflow.

    The standard error is the sample standard deviation (``n - 1``) over ``sqrt(n)``. Every
    value is first scaled by the power of two just above the largest magnitude ``m`` (so each
    lies in ``(-1, 1)``), the sums are taken with :func:`math.fsum` (correctly rounded) and the
    results scaled back: returns near ``1.8e308`` give a finite mean and standard error (both
    at most ``m``) instead of an ``OverflowError`` from squaring or an ``inf`` from summing.

    Args:
        values: Finite floats (episode returns, reward units).

    Returns:
        ``(mean, stderr)``; ``(nan, nan)`` for no values, ``(value, nan)`` for one.

    Raises:
        ValueError: a value is NaN or infinite (named in the message).
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise NonFiniteError(
                f"Expected finite values, got {v} at position {i} of {n}; statistics of "
                "NaN or infinite returns mean nothing: find where the reward came from"
            )
    largest = max(abs(v) for v in values)
    if largest == 0.0:
        return 0.0, (math.nan if n == 1 else 0.0)
    # Scale by a power of two, 2**e >= largest: exact, so ordinary returns give the same
    # numbers as the plain formulas (ldexp, since 2**1024 itself is not a float).
    e = math.frexp(largest)[1]
    unit = [math.ldexp(v, -e) for v in values]  # each in (-1, 1)
    mean_unit = math.fsum(unit) / n  # in (-1, 1)
    # The exact mean lies between the extremes; rounding (fsum of n equal values, / n) may not.
    mean = min(max(math.ldexp(mean_unit, e), min(values)), max(values))
    if n == 1:
        return mean, math.nan
    var_unit = math.fsum((u - mean_unit) ** 2 for u in unit) / (n - 1)  # < 4 n / (n - 1)
    # The sample std is at most largest * sqrt(n / (n - 1)), so stderr <= largest: finite.
    return mean, math.ldexp(math.sqrt(var_unit / n), e)


def check_finite_return(trajectory: Trajectory) -> float:
    """The episode's return, checked to be a finite number.

    Returns:
        ``trajectory.episode_return``.

    Raises:
        NonFiniteError: the return (or a reward component's episode total) is NaN or infinite;
            the message names the value, the task and the seed, and says when finite step
            rewards overflowed in their sum (e.g. two rewards of 1e308).
    """
    value = trajectory.episode_return
    where = f"task {trajectory.task_id!r}, seed {trajectory.seed}"
    if not math.isfinite(value):
        steps = [float(r) for r in trajectory.rewards]
        why = (
            f"its {len(steps)} step rewards are finite (largest magnitude "
            f"{max(map(abs, steps)):.3g}) but their sum overflows a float"
            if steps and all(math.isfinite(r) for r in steps)
            else "a step reward is not finite"
        )
        raise NonFiniteError(
            f"Episode return {value} ({where}) is not a finite number: {why}; rewards come "
            "from the env and its wrappers: check their reward components"
        )
    for name, total in trajectory.component_totals().items():
        if not math.isfinite(total):
            raise NonFiniteError(
                f"Reward component {name!r} totals {total} over an episode ({where}); expected "
                "a finite number: check the env's or wrapper's reward components"
            )
    return value


class RunningSummary:
    """The statistics of :func:`summarize`, gathered one finished episode at a time.

    Keeps counts, and one float per episode for its return and for each reward component's
    total (for the overflow-free two-pass statistics of :func:`mean_stderr`), never the
    trajectories: an evaluation that streams its episodes to disk holds no more.
    """

    def __init__(self) -> None:
        self.returns = array("d")
        self.component_totals: dict[str, array] = {}  # name -> one total per episode
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.truncated = 0
        self.actions = 0
        self.invalid = 0
        self.invalid_episodes = 0
        self.length_cut = 0

    def add(self, trajectory: Trajectory) -> None:
        """Count one finished episode.

        Raises:
            ValueError: its return or a component total is NaN or infinite
                (:func:`check_finite_return`); nothing is counted then.
        """
        t = trajectory
        check_finite_return(t)
        n = len(self.returns)
        self.returns.append(t.episode_return)
        for name, total in t.component_totals().items():
            # A component an earlier episode did not report counts 0 there.
            self.component_totals.setdefault(name, array("d", bytes(8 * n))).append(total)
        for totals in self.component_totals.values():
            if len(totals) == n:
                totals.append(0.0)
        if t.outcome in self.outcomes:
            self.outcomes[t.outcome] += 1
        # A step can be both (a time limit landing on the final move): the game still ended.
        self.truncated += bool(t.truncated and not t.terminated)
        self.actions += t.num_steps
        self.invalid += sum(t.invalid_actions)
        self.invalid_episodes += any(t.invalid_actions)
        self.length_cut += sum(r == "length" for r in t.finish_reasons)

    def result(self) -> dict[str, Any]:
        """The summary of the episodes added so far (see :func:`summarize`)."""
        n = len(self.returns)
        mean_return, stderr_return = mean_stderr(self.returns)
        names = sorted(self.component_totals)
        return {
            "episodes": n,
            "mean_return": mean_return,
            "stderr_return": stderr_return,
            "reward_components": {
                name: mean_stderr(self.component_totals[name])[0] for name in names
            },
            "outcomes": {o: (self.outcomes[o] / n if n else math.nan) for o in OUTCOMES},
            "truncated_rate": self.truncated / n if n else math.nan,
            "invalid_action_rate": self.invalid / self.actions if self.actions else 0.0,
            "invalid_episode_rate": self.invalid_episodes / n if n else math.nan,
            "mean_turns": self.actions / n if n else math.nan,
            "length_truncated_rate": self.length_cut / self.actions if self.actions else 0.0,
        }


def summarize(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """Aggregate finished episodes.

    Returns:
        A dict with ``episodes``; ``mean_return`` and ``stderr_return`` (sample standard
        deviation / sqrt(n), NaN for fewer than 2 episodes); ``reward_components`` (mean per
        episode of each component's episode total); ``outcomes`` (share of episodes per
        ``win``/``draw``/``loss``; games cut by the time limit count in none and appear in
        ``truncated_rate``); ``invalid_action_rate`` (invalid actions / all actions);
        ``invalid_episode_rate`` (episodes with any invalid action); ``mean_turns`` (agent
        actions per episode); ``length_truncated_rate`` (completions that hit the token limit).
        The means and the standard error are computed without overflow (:func:`mean_stderr`):
        returns near ``1e308`` give finite statistics.

    Raises:
        ValueError: an episode's return or a component total is NaN or infinite, naming the
            value, task and seed (:func:`check_finite_return`).
    """
    running = RunningSummary()
    for trajectory in trajectories:
        running.add(trajectory)
    return running.result()


def task_score(trajectory: Trajectory) -> tuple[str, float]:
    """The env's grade of the task: ``(name, episode total)`` of the first of
    :data:`TASK_COMPONENTS` the episode reports, else ``("return", episode return)`` (an env
    outside textgym). An episode is a success when this reaches the success threshold, 1.0 by
    default: a right GSM8K answer, an exact reversal, a won game, matching Workplace tables.
    """
    totals = trajectory.component_totals()
    for name in TASK_COMPONENTS:
        if name in totals:
            return name, totals[name]
    return "return", trajectory.episode_return


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` succeeded.

    pass@k is the probability that at least one of ``k`` samples succeeds. Drawing ``k`` of
    the ``n`` samples without replacement, it is ``1 - C(n - c, k) / C(n, k)``: Chen et al.,
    2021, "Evaluating Large Language Models Trained on Code" (arXiv 2107.03374), eq. 1 and the
    numerically stable product of their Figure 3, ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``.
    With ``k == n`` it is 1.0 if any sample succeeded; with ``k == 1`` it is ``c / n``.

    Args:
        n: Samples (rollouts) of the task, >= 1.
        c: Successful ones, in ``[0, n]``.
        k: In ``[1, n]``.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: if ``n``, ``c`` or ``k`` is not an ``int`` (a ``bool`` included), for
            ``n < 1``, ``c`` outside ``[0, n]`` or ``k`` outside ``[1, n]``.
    """
    n = check_int("n", n, low=1)
    c = check_int("c", c, low=0, high=n, hint="successes of the n samples")
    k = check_int("k", k, low=1, high=n, hint="at most the n samples")
    if n - c < k:  # every k-subset holds a success
        return 1.0
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail


def plan_tasks(
    env_task_ids: Sequence[str] | None,
    *,
    limit: int | None = None,
    task_ids: Sequence[str] | None = None,
) -> list[tuple[str, dict[str, Any]]] | None:
    """The tasks an evaluation plays, in order, each with the ``reset`` options that pick it.

    Args:
        env_task_ids: The env's task ids in order (a dataset env's ``task_ids``), or ``None``
            for an env without a task list.
        limit: Keep the first ``limit`` of the chosen tasks, ``>= 1``.
        task_ids: Play these tasks, in this order. On an env with a task list each becomes
            ``{"task_index": i}`` of its first occurrence; on one without (EmailToolUse-v1
            makes any task from its id) each is passed as ``{"task_id": id}``, and the env's
            ``reset`` judges it.

    Returns:
        ``[(task_id, options), ...]``; ``None`` when the env has no task list and no
        ``task_ids`` were given (nothing to walk: episodes draw their tasks).

    Raises:
        ValueError: for an unknown or repeated id, an empty list, or a ``limit`` below 1 or
            above the number of tasks chosen.
    """
    if task_ids is not None:
        if not task_ids:
            raise ValueError("Expected at least one task id, got none")
        seen: set[str] = set()
        for task_id in task_ids:
            if task_id in seen:
                raise ValueError(
                    f"Task id {task_id!r} is listed twice; list each task once "
                    "(use rollouts per task to play one several times)"
                )
            seen.add(task_id)
        if env_task_ids is None:
            tasks = [(t, {"task_id": t}) for t in task_ids]
        else:
            index_of: dict[str, int] = {}
            for i, task_id in enumerate(env_task_ids):
                index_of.setdefault(task_id, i)
            unknown = [t for t in task_ids if t not in index_of]
            if unknown:
                raise ValueError(
                    f"Unknown task id {unknown[0]!r} ({len(unknown)} of {len(task_ids)} unknown); "
                    f"expected ids of the env's {len(env_task_ids)} tasks, e.g. {env_task_ids[0]!r}"
                )
            tasks = [(t, {"task_index": index_of[t]}) for t in task_ids]
    elif env_task_ids is None:
        return None
    else:
        tasks = [(t, {"task_index": i}) for i, t in enumerate(env_task_ids)]
    if limit is not None:
        check_int("limit", limit, low=1, high=len(tasks), hint="the tasks chosen")
        tasks = tasks[:limit]
    return tasks


class _PerEpisode(Sequence[Any]):
    """A lazy sequence with one entry per episode (``episodes`` of them), each computed when
    asked by :meth:`_at`: no list, however many episodes. Negative indices and slices work as
    on a list."""

    episodes: int

    def _at(self, episode: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.episodes

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.episodes))]
        if not -self.episodes <= index < self.episodes:
            raise IndexError(f"episode {index} of {self.episodes}")
        return self._at(index % self.episodes)


class GroupSeeds(_PerEpisode):
    """Episode ``e``'s seed, ``first + e // group_size``: the ``group_size`` consecutive
    episodes of a group (a task's rollouts, a GRPO group) share one seed. A lazy sequence, one
    entry per episode, for :func:`~textgym.rollout.iter_rollout`'s ``seeds``.

    Example:
        >>> list(GroupSeeds(first=10, episodes=5, group_size=2))
        [10, 10, 11, 11, 12]
    """

    def __init__(self, first: int, episodes: int, group_size: int):
        self.first, self.episodes, self.group_size = first, episodes, group_size

    def _at(self, episode: int) -> int:
        return self.first + episode // self.group_size


class TaskWalk(_PerEpisode):
    """Episode ``e``'s ``reset`` options in a pass over ``tasks``, ``rollouts`` episodes each.

    Episode ``e`` plays task ``(e // rollouts) % len(tasks)``: the ``rollouts`` episodes of a
    task are consecutive, and with ``episodes == len(tasks) * rollouts`` (the default) each task
    is played exactly ``rollouts`` times; more episodes start again at the first task. A lazy
    sequence, one entry per episode, for :func:`~textgym.rollout.iter_rollout`'s ``options``.

    Args:
        tasks: ``[(task_id, options), ...]`` from :func:`plan_tasks`, not empty.
        rollouts: Episodes per task, >= 1.
        episodes: Length of the walk; default ``len(tasks) * rollouts``.

    Raises:
        ValueError: for no tasks, ``rollouts < 1`` or ``episodes < 1``.
    """

    def __init__(
        self,
        tasks: Sequence[tuple[str, Mapping[str, Any]]],
        rollouts: int = 1,
        episodes: int | None = None,
    ):
        if not tasks:
            raise ValueError("Expected at least one task to walk, got none")
        self.tasks = list(tasks)
        self.rollouts = check_int("rollouts", rollouts, low=1, hint="per task")
        self.episodes = check_int(
            "episodes", len(self.tasks) * rollouts if episodes is None else episodes, low=1
        )

    def task_of(self, episode: int) -> int:
        """The position in ``tasks`` of the task episode ``episode`` plays."""
        return (episode // self.rollouts) % len(self.tasks)

    def _at(self, episode: int) -> dict[str, Any]:
        return dict(self.tasks[self.task_of(episode)][1])


class TaskResults:
    """Each task's rollouts, gathered one finished episode at a time, into pass@k and mean@k.

    Args:
        task_ids: The walked tasks' ids, in walk order (``[t for t, _ in plan_tasks(...)]``).
        k: Rollouts per task: pass@k and mean@k are taken over the tasks with at least ``k``.
        success_threshold: An episode succeeds when its :func:`task_score` is >= this.
    """

    def __init__(self, task_ids: Sequence[str], k: int = 1, success_threshold: float = 1.0):
        self.task_ids = list(task_ids)
        self.k = check_int("k", k, low=1)
        self.success_threshold = check_number("success_threshold", success_threshold)
        self.score_names: set[str] = set()
        self._returns: list[list[float]] = [[] for _ in self.task_ids]
        self._successes: list[list[bool]] = [[] for _ in self.task_ids]
        self._components: list[dict[str, list[float]]] = [{} for _ in self.task_ids]

    def add(self, task: int, trajectory: Trajectory) -> None:
        """Count one finished rollout of the task at position ``task`` of ``task_ids``."""
        name, score = task_score(trajectory)
        self.score_names.add(name)
        n = len(self._returns[task])
        self._returns[task].append(trajectory.episode_return)
        self._successes[task].append(score >= self.success_threshold)
        components = self._components[task]
        for comp, total in trajectory.component_totals().items():
            components.setdefault(comp, [0.0] * n).append(total)
        for values in components.values():  # a component this rollout did not report: 0
            values.extend([0.0] * (n + 1 - len(values)))

    @property
    def success_rule(self) -> str:
        """How success was judged, e.g. ``"correct >= 1"``."""
        names = " or ".join(sorted(self.score_names)) or "task score"
        return f"{names} >= {self.success_threshold:g}"

    def rows(self) -> Iterator[dict[str, Any]]:
        """One JSON-ready row per task played at least once, in walk order: ``task_id``,
        ``rollouts``, ``successes`` (count), ``returns`` and ``success`` (one per rollout),
        ``reward_components`` (name -> one episode total per rollout)."""
        for task_id, returns, successes, components in zip(
            self.task_ids, self._returns, self._successes, self._components
        ):
            if returns:
                yield {
                    "task_id": task_id,
                    "rollouts": len(returns),
                    "successes": sum(successes),
                    "returns": list(returns),
                    "success": list(successes),
                    "reward_components": {name: list(v) for name, v in sorted(components.items())},
                }

    def result(self) -> dict[str, Any]:
        """``played`` (tasks played at least once), ``complete`` (tasks played >= ``k``
        times), ``rollouts_per_task`` (``k``), ``success`` (the rule) and
        ``success_threshold``, and over the complete tasks ``pass@1``, ``pass@k`` and
        ``mean@k`` (mean over tasks of the mean return of their rollouts); NaN when no task is
        complete."""
        complete = [(r, s) for r, s in zip(self._returns, self._successes) if len(r) >= self.k]
        out: dict[str, Any] = {
            "played": sum(bool(r) for r in self._returns),
            "complete": len(complete),
            "rollouts_per_task": self.k,
            "success": self.success_rule,
            "success_threshold": self.success_threshold,
        }
        for k in sorted({1, self.k}):
            out[f"pass@{k}"] = (
                sum(pass_at_k(len(s), sum(s), k) for _, s in complete) / len(complete)
                if complete
                else math.nan
            )
        out[f"mean@{self.k}"] = (
            mean_stderr([mean_stderr(r)[0] for r, _ in complete])[0] if complete else math.nan
        )
        return out
