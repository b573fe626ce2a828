"""``env_card``: one env's quality card, what ``textgym check`` prints and writes as JSON.

The card answers, for any registered id (textgym's, or one of yours), whether the env is sound
enough to train on (the questions OpenEnv's hub asks of every env, its RFC 008):

- **checks** (:func:`textgym.env_checker.text_env_checks`): Gymnasium's API check;
  determinism (the same seed twice on one env, and twin envs stepped side by side, give equal
  observations, rewards and infos); spaces (observations and the env's own actions inside
  their ``Text`` spaces, rewards finite and inside ``reward_range`` where declared); the
  hostile-action corpus (:data:`textgym.check_episodes.HOSTILE_ACTIONS`: empty, huge, binary,
  unparsable, format-only) never raising; pickling; the env contract; the gold completions;
  the documented info keys. Each is ``pass``, ``fail`` (with the broken rule) or ``skip``.
- **oracle**: the env's expert (:attr:`textgym.TextEnv.expert_policy`: ``gold``, or
  ``minimax`` for TicTacToe-v0) over ``tasks`` tasks (the first ones of a task list, else
  seeds ``seed ..``), its mean return against the maximum (:func:`max_return`), and the tasks
  where it falls short.
- **floors**: the empty action, a no-op (:data:`NO_OP_ACTION`, the reply without a tool call
  of the email study's no-call floor) and the random policy (``--policy random``), each played
  every turn on the same tasks, with mean return and standard error. A floor above 0 is
  shown; one that solves every task (the task's grade at 1) or reaches the maximum is a
  failure (a verifier that pays for nothing). The
  random floor is skipped for an env without an action grammar (no ``random_action``, no
  ``legal_moves`` or ``tools`` in its info).
- **leakage**: on the oracle's gold episodes, no gold completion (nor the text inside its last
  answer tag, when that is 8 characters or more) appears in what the policy is shown before
  it acts: the system prompt, the tool schemas and the observations so far. The gold answer
  itself travels in ``info["gold_completion"]`` by design (the gold policy reads it); an LLM
  policy is shown the chat only (:mod:`textgym.rollout`). Skipped for an expert without
  gold completions.

``textgym check`` (:mod:`textgym.cli.check`) runs it for one id or every registered one
(about 10 s for textgym's five ids on 2 cores with the default 20 tasks); the values are
deterministic for a seed, except ``seconds``.

Example:
    >>> from textgym.card import env_card
    >>> card = env_card("textgym/GSM8K-v0", tasks=4)
    >>> card["oracle"]["mean"], card["oracle"]["maximum"], card["oracle"]["status"]
    (1.1, 1.1, 'pass')
    >>> card["floors"]["empty"]["mean"], card["leakage"]["status"]
    (0.0, 'pass')
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.builder import EnvRecipe, env_factory, make_expert, make_policy
from textgym.cli.outputs import json_safe
from textgym.env_checker import CHECKS, text_env_checks
from textgym.errors import NonFiniteError
from textgym.evaluation import mean_stderr, plan_tasks, task_score
from textgym.policies import RandomPolicy
from textgym.rollout import Trajectory, rollout
from textgym.types import Completion, Message

__all__ = ["FLOORS", "NO_OP_ACTION", "SECTIONS", "ConstantPolicy", "env_card", "max_return"]

#: The no-op reply: an answer that does nothing (no tool call, no answer tag); on a tool env it
#: ends the episode with the state unchanged (the no-call floor of docs/suite_learning.md).
NO_OP_ACTION = "Done."

#: The floors of a card, in the order shown.
FLOORS = ("empty", "no-op", "random")

#: The card's verdicts: the checks of :data:`textgym.env_checker.CHECKS`, then these.
SECTIONS = (*CHECKS, "oracle", "floors", "leakage")

#: Return below the maximum by more than this is short of it (float sums of components).
_TOLERANCE = 1e-9
#: Failing tasks listed by name in a card.
_LISTED = 10
#: Shortest answer-tag text the leakage check looks for (shorter text matches by chance).
_MIN_LEAK = 8
_LAST_TAG = re.compile(r"<(\w+)>(.*?)</\1>\s*$", flags=re.S)


class ConstantPolicy:
    """Answers every turn of every episode with the same completion (the card's empty and
    no-op floors).

    Args:
        text: The completion.
        name: The policy's name, as a run records it.
    """

    tokens_generated = None  # generates no model tokens

    def __init__(self, text: str, name: str = "constant"):
        self.text, self.name = text, name

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        return [Completion(self.text) for _ in conversations]


def max_return(base: Any) -> float:
    """The most an episode of ``base`` (an env's ``unwrapped``) can return: what the card's
    oracle must reach.

    An env's own ``max_return`` attribute where it declares one (TicTacToe-v0: 0.5 against an
    optimal opponent, the value of the game), else 1.0 for the task's grade plus the ``format``
    weight the env pays itself (:attr:`textgym.TextEnv.format_weight`: GSM8K-v0 1.1).
    """
    declared = getattr(base, "max_return", None)
    if declared is not None:
        return float(declared)
    return 1.0 + float(getattr(base, "format_weight", None) or 0.0)


def env_card(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    tasks: int = 20,
    seed: int = 0,
    actions: Sequence[str] = (),
) -> dict[str, Any]:
    """The quality card of one env (see the module for its sections).

    Args:
        env_id: A registered id, ``module:EnvName-v0``, or an id an installed package registers
            through the ``textgym.envs`` entry point.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        tasks: Episodes of the oracle and of each floor, >= 1: the first ``tasks`` tasks of an
            env with a task list (all of them if it has fewer), else seeds ``seed ..``.
        seed: Seed of the first episode, and of the policies' generators.
        actions: Completions in the task's format that the checks drive episodes with, beside
            the env's random and gold ones (:func:`textgym.env_checker.check_text_env`).

    Returns:
        A JSON-ready dict: ``env_id``, ``env_kwargs``, ``tasks``, ``seed``, ``status``
        (``"pass"`` when no section failed, else ``"fail"``), ``failed`` (the sections that
        failed), ``checks``, ``oracle``, ``floors``, ``leakage``, ``seconds``. Standard errors
        of one episode are ``None``.

    Raises:
        ValueError: the env cannot be built (unknown id, bad kwargs, spaces that are not
            text), or ``tasks`` < 1.
    """
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"Expected tasks to be an int >= 1, got {tasks!r}")
    started = time.perf_counter()
    make_env, probe = env_factory(EnvRecipe(env_id, dict(env_kwargs or {})))
    try:
        base = probe.unwrapped
        maximum = max_return(base)
        checks = text_env_checks(probe, actions)
        _, first_info = probe.reset(seed=seed)
    finally:
        probe.close()
    seeds, options = _plan(base.task_ids, tasks, seed)
    oracle, gold_episodes = _oracle(make_env, base, seeds, options, maximum, seed, env_kwargs)
    playable = _floor_policies(base, seed)
    if not _has_action_grammar(base, first_info):
        playable.pop("random")
    floors = {
        name: _floor(make_env, policy, seeds, options, maximum) for name, policy in playable.items()
    }
    floors.setdefault("random", {"status": "skip", "detail": _NO_GRAMMAR})
    floors["status"] = "fail" if any(floors[n].get("status") == "fail" for n in FLOORS) else "pass"
    leakage = _leakage(gold_episodes)
    verdicts = {**{n: c["status"] for n, c in checks.items()}}
    verdicts.update(oracle=oracle["status"], floors=floors["status"], leakage=leakage["status"])
    failed = [name for name in SECTIONS if verdicts.get(name) == "fail"]
    return json_safe(
        {
            "env_id": env_id,
            "env_kwargs": dict(env_kwargs or {}),
            "tasks": len(seeds),
            "seed": seed,
            "status": "fail" if failed else "pass",
            "failed": failed,
            "checks": checks,
            "oracle": oracle,
            "floors": floors,
            "leakage": leakage,
            "seconds": round(time.perf_counter() - started, 2),
        }
    )


def _plan(
    task_ids: Sequence[str] | None, tasks: int, seed: int
) -> tuple[list[int], list[dict[str, Any]] | None]:
    """Seeds and ``reset`` options of the card's episodes: the first tasks of a task list,
    else seeds ``seed .. seed + tasks - 1``."""
    planned = plan_tasks(task_ids, limit=min(tasks, len(task_ids)) if task_ids else None)
    if planned is None:
        return list(range(seed, seed + tasks)), None
    return [seed + i for i in range(len(planned))], [dict(opt) for _, opt in planned]


_NO_GRAMMAR = (
    "the env declares no action grammar for --policy random: give it a random_action "
    "(TextEnv.random_action), or info['legal_moves'] or info['tools']"
)


def _has_action_grammar(base: Any, info: Mapping[str, Any]) -> bool:
    """Whether :class:`textgym.policies.RandomPolicy` can play the env (its reset info)."""
    return base.random_action is not None or "legal_moves" in info or bool(info.get("tools"))


def _floor_policies(base: Any, seed: int) -> dict[str, Any]:
    return {
        "empty": ConstantPolicy("", "empty"),
        "no-op": ConstantPolicy(NO_OP_ACTION, "no-op"),
        "random": RandomPolicy(seed, sample_action=base.random_action),
    }


def _play(
    make_env: Any, policy: Any, seeds: list[int], options: list[dict[str, Any]] | None
) -> list[Trajectory]:
    return rollout(make_env, policy, seeds, options=options, batch_size=8)


def _reaches(base: Any, trajectory: Trajectory, maximum: float) -> bool:
    """Whether an episode returns its maximum: ``maximum``, or for a mixture its member's
    (:meth:`textgym.mixture.EnvMixture.max_return_of`)."""
    own = getattr(base, "max_return_of", None)
    target = own(trajectory.task_id) if own is not None else maximum
    return trajectory.episode_return >= target - _TOLERANCE


def _stats(trajectories: Sequence[Trajectory], maximum: float, base: Any = None) -> dict[str, Any]:
    """Mean return, its standard error, episodes, those reaching their maximum
    (:func:`_reaches`), and those that solve their task (:func:`textgym.evaluation.task_score`
    reaches 1: the task's own grade)."""
    returns = [t.episode_return for t in trajectories]
    try:
        mean, stderr = mean_stderr(returns)
    except NonFiniteError as exc:
        return {"status": "fail", "detail": str(exc)[:500], "episodes": len(returns)}
    reached = sum(_reaches(base, t, maximum) for t in trajectories)
    return {
        "mean": round(mean, 6),
        "stderr": stderr if math.isnan(stderr) else round(stderr, 6),
        "episodes": len(returns),
        "at_maximum": reached,
        "solved": sum(task_score(t)[1] >= 1.0 - _TOLERANCE for t in trajectories),
    }


def _failure(exc: Exception) -> dict[str, Any]:
    """A section whose policy or env raised: the finding, reported (never a reward of 0)."""
    return {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"[:500]}


def _oracle(
    make_env: Any,
    base: Any,
    seeds: list[int],
    options: list[dict[str, Any]] | None,
    maximum: float,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """The expert's section of the card, and the gold completions' episodes (the expert's when
    it is ``gold``, else played apart for the leakage check where the env has them)."""
    expert = base.expert_policy
    if expert is None:
        detail = "the env names no expert_policy (TextEnv.expert_policy is None)"
        return {"status": "skip", "detail": detail, "maximum": maximum}, []
    try:
        episodes = _play(make_env, make_expert(base, env_kwargs, seed), seeds, options)
    except Exception as exc:  # the expert cannot play its own env: that is the finding
        return {**_failure(exc), "policy": expert, "maximum": maximum}, []
    stats = _stats(episodes, maximum, base)
    short = [
        {"task": t.task_id, "seed": t.seed, "return": t.episode_return}
        for t in episodes
        if not _reaches(base, t, maximum)
    ]
    section = {
        "status": stats.get("status") or ("fail" if short else "pass"),
        "policy": expert,
        "maximum": maximum,
        **stats,
        "failing": len(short),
        "failing_tasks": short[:_LISTED],
    }
    if expert != "gold" and base.has_gold_completion:
        try:
            episodes = _play(make_env, make_policy("gold", seed=seed), seeds, options)
        except Exception:  # noqa: BLE001  (the leakage section then says it has no episodes)
            episodes = []
    return section, episodes if expert == "gold" or base.has_gold_completion else []


def _floor(
    make_env: Any,
    policy: Any,
    seeds: list[int],
    options: list[dict[str, Any]] | None,
    maximum: float,
) -> dict[str, Any]:
    try:
        stats = _stats(_play(make_env, policy, seeds, options), maximum)
    except Exception as exc:  # e.g. the random policy has no grammar for this env
        return _failure(exc)
    if "status" in stats:
        return stats
    # A floor that solves every task, or reaches the maximum, is a verifier that pays for
    # nothing (one hub verifier returned 1.0 for the empty string).
    free = stats["solved"] == stats["episodes"] or stats["mean"] >= maximum - _TOLERANCE
    return {"status": "fail" if free else "pass", **stats, "above_zero": stats["mean"] > 0}


def _leak_texts(gold: str) -> list[str]:
    """The gold completion, and the text inside its last answer tag when long enough."""
    texts = [gold.strip()]
    tag = _LAST_TAG.search(gold)
    if tag and len(tag.group(2).strip()) >= _MIN_LEAK:
        texts.append(tag.group(2).strip())
    return [t for t in texts if t]


def _leakage(episodes: Sequence[Trajectory]) -> dict[str, Any]:
    """Whether a gold completion shows in the chat before the turn that plays it."""
    if not episodes:
        detail = "no gold episodes: the oracle plays no gold completions, or did not run"
        return {"status": "skip", "detail": detail}
    leaks, checked = [], 0
    for trajectory in episodes:
        seen = [json.dumps(trajectory.tools or [], ensure_ascii=False)]
        for message in trajectory.messages:
            content = str(message.get("content") or "")
            if message.get("role") == "assistant":
                checked += 1
                shown = "\n".join(seen)
                found = next((t for t in _leak_texts(content) if t in shown), None)
                if found is not None:
                    leaks.append({"task": trajectory.task_id, "text": found[:80]})
            seen.append(content)
    status = "fail" if leaks else "pass"
    return {
        "status": status,
        "completions": checked,
        "leaks": len(leaks),
        "leaked": leaks[:_LISTED],
    }
