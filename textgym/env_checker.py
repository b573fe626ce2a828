"""``check_text_env``: the checks every textgym env passes, for any env, beside Gymnasium's own.

Gymnasium's :func:`gymnasium.utils.env_checker.check_env` checks the Gymnasium API (spaces,
seeding, the types ``reset`` and ``step`` return). :func:`check_text_env` runs it and then what
textgym's tools rely on (``docs/authoring.md`` §3 and §5; the same checks run over every
registered textgym id in ``tests/test_registry.py``):

- **determinism**: two envs built alike, reset with the same seed and stepped side by side
  with the same actions, play the same episode (observations, rewards, flags, infos), and so
  does one env reset twice with that seed, for each of ``seeds``;
- **types, sums and spaces**: rewards are finite Python ``float`` (inside ``reward_range``
  where the env declares one), ``terminated`` / ``truncated`` Python ``bool``,
  ``info["invalid_action"]`` a ``bool``, the values of ``info["reward_components"]`` sum to
  the reward, observations lie in the observation space, and the env's own random and gold
  actions in the action space;
- **untrusted actions**: the hostile corpus
  (:data:`textgym.check_episodes.HOSTILE_ACTIONS`: empty, a lone surrogate,
  a chat-template token, 5,000 digits, binary, unparsable, format-only tags; per env one
  character over the action space's ``max_length`` and the empty ``action_template``) never
  raises and keeps the observation in its space and the reward finite;
- **pickling**: a pickled copy of an env mid-episode continues it identically;
- **the contract tells the truth** (:class:`textgym.TextEnv`): reset infos hold
  ``system_prompt``, ``tools`` and ``task_id``; ``gold_completion`` is there exactly when
  ``has_gold_completion`` says; ``stop_strings`` is a tuple of non-empty strings;
  ``is_well_formed`` answers a ``bool``; ``task_ids[i]`` is the task that ``task_index`` ``i``
  plays; each ``evaluation_settings`` entry is a valid ``reset`` option; an env with an opponent
  reports the ``random_move_prob`` it was given; ``random_action`` gives, for one generator seed,
  one completion in the action space; ``expert_policy`` names a known policy;
- **the gold completions solve the episode** (``has_gold_completion``): the task's grade
  (the first of :data:`textgym.evaluation.TASK_COMPONENTS` reported) reaches 1;
- **documented info keys**: where the class docstring has an ``Information:`` section (lines
  ``- ``key`` [reset, step]: ...``), the keys it lists are exactly those emitted.

Episodes are played by :class:`textgym.check_episodes.EpisodeDriver` with the env's random
and gold actions and the ``actions`` the caller passes (well-formed and malformed completions
of the task's format).

:func:`text_env_checks` runs the same checks (named in :data:`CHECKS`) and reports each as
passed, failed (with the message) or skipped, for ``textgym check`` (:mod:`textgym.card`).

A plain ``gymnasium.Env`` with text spaces is checked through
:class:`textgym.core.TextEnvAdapter` (what the tools play it through), without the checks of
what only a ``TextEnv`` declares (reset info keys, reward components, documented keys).

Example:
    >>> from textgym.env_checker import check_text_env
    >>> check_text_env("textgym/GSM8K-v0", ["#### 7", "no answer", "\\\\boxed{3}"])
"""

from __future__ import annotations

import inspect
import math
import pickle
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from textgym.check_episodes import EpisodeDriver, hostile_actions, twin_env
from textgym.checks import check_stop_strings
from textgym.core import TextEnv, TextEnvAdapter, as_text_env

__all__ = [
    "CHECKS",
    "TextEnvCheckError",
    "check_text_env",
    "documented_info_keys",
    "reward_range",
    "text_env_checks",
]

#: The checks of :func:`check_text_env`, in the order it runs them (the keys of
#: :func:`text_env_checks`).
CHECKS = ("api", "determinism", "spaces", "hostile", "pickle", "contract", "gold", "info_docs")

_INFO_LINE = re.compile(r"^\s*- ``(\w+)`` \[([a-z, ]+)\]", flags=re.M)


class TextEnvCheckError(AssertionError):
    """An env broke a rule of :func:`check_text_env`; the message names the rule and the fix.

    An ``AssertionError``, as Gymnasium's checker raises, so a test reports it as a failure.
    """


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TextEnvCheckError(message)


def documented_info_keys(env_cls: type) -> dict[str, set[str]]:
    """The info keys a class docstring's ``Information:`` section lists, by ``reset``/``step``
    (the docstring of the nearest class in the MRO that has one).

    Lines of the form ``- ``key`` [reset, step]: ...`` between ``Information:`` and
    ``Arguments:`` (the Gymnasium docstring sections textgym's envs use); ``optional`` among
    the brackets (``[reset, optional]``) marks a key only some episodes have, listed under
    ``"optional"`` as well.
    """
    doc = inspect.getdoc(env_cls) or ""  # a subclass without a docstring: its base's
    section = doc.split("Information:", 1)[-1].split("Arguments:", 1)[0]
    keys: dict[str, set[str]] = {"reset": set(), "step": set()}
    for key, where in _INFO_LINE.findall(section):
        for part in where.split(","):
            keys.setdefault(part.strip(), set()).add(key)
    return keys


def reward_range(base: TextEnv) -> tuple[float, float]:
    """The env's declared ``reward_range`` (an attribute Gymnasium before 1.0 had on every env;
    an env may still declare it), else ``(-inf, inf)``."""
    declared = getattr(base, "reward_range", None)
    if isinstance(declared, (tuple, list)) and len(declared) == 2:
        return float(declared[0]), float(declared[1])
    return -math.inf, math.inf


def _check_step(base: TextEnv, record: tuple[Any, ...], strict: bool, where: str) -> None:
    obs, reward, terminated, truncated, info = record
    _require(
        type(reward) is float and math.isfinite(reward),
        f"{where}: expected the reward to be a finite Python float, got {reward!r} "
        f"({type(reward).__name__}); return float(reward)",
    )
    low, high = reward_range(base)
    _require(
        low <= reward <= high,
        f"{where}: the reward {reward} is outside the env's reward_range [{low}, {high}]",
    )
    _require(
        type(terminated) is bool and type(truncated) is bool,
        f"{where}: expected terminated and truncated to be Python bool, got "
        f"{type(terminated).__name__} and {type(truncated).__name__}",
    )
    _require(
        base.observation_space.contains(obs),
        f"{where}: the observation {str(obs)[:80]!r} is not in {base.observation_space}",
    )
    if strict or "invalid_action" in info:
        _require(
            type(info.get("invalid_action")) is bool,
            f"{where}: expected info['invalid_action'] to be a bool on every step, got "
            f"{info.get('invalid_action')!r}",
        )
    if strict or "reward_components" in info:
        components = info.get("reward_components")
        _require(
            isinstance(components, Mapping),
            f"{where}: expected info['reward_components'] (name -> value) on every step, "
            f"got {components!r}",
        )
        total = sum(components.values())
        _require(
            math.isclose(total, reward, rel_tol=1e-9, abs_tol=1e-9),
            f"{where}: reward_components {dict(components)} do not sum to the reward "
            f"{reward} (sum {total}); every term of the reward must be a component",
        )


def _check_contract(env: gym.Env, base: TextEnv, strict: bool) -> None:
    name = type(base).__name__
    _, info = env.reset(seed=0)
    if strict:
        missing = {"system_prompt", "tools", "task_id"} - set(info)
        _require(not missing, f"{name}.reset info lacks {sorted(missing)}; every reset gives them")
    _require(
        ("gold_completion" in info) == bool(base.has_gold_completion),
        f"{name}.has_gold_completion is {base.has_gold_completion}, but the reset info "
        f"{'has' if 'gold_completion' in info else 'lacks'} gold_completion",
    )
    try:
        stop = check_stop_strings("stop_strings", base.stop_strings)
    except ValueError as exc:
        raise TextEnvCheckError(f"{name}.stop_strings: {exc}") from None
    _require(stop == base.stop_strings, f"{name}.stop_strings must be a tuple, got {stop!r}")
    if base.is_well_formed is not None:
        verdict = base.is_well_formed("")
        _require(
            type(verdict) is bool, f"{name}.is_well_formed('') returned {verdict!r}, not a bool"
        )
    if base.task_ids is not None:
        _require(
            len(base.task_ids) > 0 and all(isinstance(t, str) for t in base.task_ids),
            f"{name}.task_ids must be a non-empty tuple of str, or None",
        )
        for index in (0, len(base.task_ids) - 1):
            got = env.reset(options={"task_index": index})[1].get("task_id")
            _require(
                got == base.task_ids[index],
                f"reset(options={{'task_index': {index}}}) played task {got!r}, but "
                f"{name}.task_ids[{index}] is {base.task_ids[index]!r}",
            )
    for setting, options in base.evaluation_settings.items():
        try:
            env.reset(seed=0, options=dict(options))
        except Exception as exc:
            raise TextEnvCheckError(
                f"{name}.evaluation_settings[{setting!r}] = {dict(options)} is not a valid "
                f"reset option: {exc}"
            ) from exc
    if base.has_opponent:
        got = env.reset(seed=0, options={"random_move_prob": 0.25})[1].get("random_move_prob")
        _require(
            got == 0.25,
            f"{name}.has_opponent is True, but reset(options={{'random_move_prob': 0.25}}) "
            f"reported info['random_move_prob'] = {got!r}",
        )
    if base.random_action is not None:
        obs, info = env.reset(seed=0)
        drawn = [base.random_action(obs, info, np.random.default_rng(1)) for _ in range(2)]
        _require(
            isinstance(drawn[0], str) and base.action_space.contains(drawn[0]),
            f"{name}.random_action returned {drawn[0]!r}, not a str in {base.action_space}",
        )
        _require(
            drawn[0] == drawn[1],
            f"{name}.random_action drew {drawn[0]!r} and {drawn[1]!r} from generators of one "
            "seed; draw every random choice from the rng it is given",
        )
    _check_expert(base)


def _check_expert(base: TextEnv) -> None:
    """``expert_policy`` is ``None``, a policy of any env (``gold``), or one the env's class
    builds (:meth:`~textgym.TextEnv.make_expert`, a policy of that name)."""
    from textgym.builder import GENERAL_POLICIES, make_expert

    name, expert = type(base).__name__, base.expert_policy
    if expert is None or expert in GENERAL_POLICIES:
        _require(
            expert != "gold" or base.has_gold_completion,
            f"{name}.expert_policy is 'gold', but has_gold_completion is False",
        )
        return
    try:
        policy = make_expert(base, {})
    except NotImplementedError:
        raise TextEnvCheckError(
            f"{name}.expert_policy is {expert!r}, but {name} does not override make_expert "
            f"to build it; override it, or name one of {GENERAL_POLICIES} or None"
        ) from None
    _require(
        getattr(policy, "name", None) == expert and callable(getattr(policy, "act", None)),
        f"{name}.make_expert() built {policy!r}, not a policy named {expert!r} with act()",
    )


def _check_gold(env: gym.Env, base: TextEnv) -> None:
    from textgym.evaluation import TASK_COMPONENTS

    name = type(base).__name__
    _, info = env.reset(seed=0)
    terminated = truncated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(info["gold_completion"])
    components = info.get("reward_components", {})
    grade = next((n for n in TASK_COMPONENTS if n in components), None)
    _require(
        terminated and (grade is None or components[grade] == 1.0),
        f"{name}: playing info['gold_completion'] from reset(seed=0) ended with "
        f"terminated={terminated}, components {components}; the gold completions must "
        f"solve the episode ({' or '.join(TASK_COMPONENTS)} = 1)",
    )


def check_text_env(
    env: gym.Env | str,
    actions: Sequence[str] = (),
    *,
    seeds: Sequence[int] = (0, 7, 2**31 - 1),
    info_seeds: int = 20,
) -> None:
    """Check that ``env`` keeps the rules textgym's tools rely on (see the module for the list).

    Args:
        env: A registered id (built with ``gymnasium.make``, twice for the determinism check),
            or an env as ``gymnasium.make`` returned it (its twin is built from ``env.spec``,
            else a pickled copy). Wrappers are allowed; the contract is read from
            ``env.unwrapped``. A plain ``gymnasium.Env`` with text spaces is checked through
            :class:`textgym.core.TextEnvAdapter`.
        actions: Completions to drive episodes with besides the env's random and gold ones:
            give a mix of well-formed and malformed answers in the task's format.
        seeds: Episode seeds of the determinism and type checks.
        info_seeds: Episodes (seeds ``0 .. info_seeds - 1``) over which the emitted info keys
            are gathered and compared with the documented ones.

    Raises:
        TextEnvCheckError: (an ``AssertionError``) naming the first rule broken and the fix.
        ValueError: if ``env`` is an env whose spaces are not text.
        Exception: whatever ``env`` raises where it must not (``step`` on a hostile ``str``).
    """
    made = as_text_env(gym.make(env), env) if isinstance(env, str) else as_text_env(env)
    twin = twin_env(env)
    try:
        for _, check in _checks(made, twin, actions, seeds, info_seeds):
            if check is not None:
                check()
    finally:
        made.close()
        twin.close()


def text_env_checks(
    env: gym.Env | str,
    actions: Sequence[str] = (),
    *,
    seeds: Sequence[int] = (0, 7, 2**31 - 1),
    info_seeds: int = 20,
) -> dict[str, dict[str, str]]:
    """Run every check of :func:`check_text_env` and report each instead of stopping at the
    first broken rule (what ``textgym check`` shows).

    Args:
        env, actions, seeds, info_seeds: As :func:`check_text_env`.

    Returns:
        For each name of :data:`CHECKS`, ``{"status": "pass" | "fail" | "skip", "detail":
        str}``: the broken rule's message (or what the env raised, as ``TypeName: message``,
        at most 500 characters) for a failure, why for a skip (``gold``: the env has no gold
        completions; ``info_docs``: its docstring has no ``Information:`` section), else
        ``""``. A check after a failed one still runs on a fresh ``reset``.

    Raises:
        ValueError: if ``env`` is an env whose spaces are not text.
    """
    made = as_text_env(gym.make(env), env) if isinstance(env, str) else as_text_env(env)
    twin = twin_env(env)
    report: dict[str, dict[str, str]] = {}
    try:
        for name, check in _checks(made, twin, actions, seeds, info_seeds):
            if check is None:
                report[name] = {"status": "skip", "detail": _SKIPPED[name]}
                continue
            try:
                check()
            except TextEnvCheckError as exc:
                report[name] = {"status": "fail", "detail": str(exc)[:500]}
            except Exception as exc:  # the env raised where it must not: that is the finding
                report[name] = {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"[:500]}
            else:
                report[name] = {"status": "pass", "detail": ""}
    finally:
        made.close()
        twin.close()
    return report


#: Why :func:`text_env_checks` skips a check.
_SKIPPED = {
    "gold": "the env gives no gold completions (has_gold_completion is False)",
    "info_docs": "the env's docstring has no Information: section (or it is not a TextEnv)",
}


def _checks(
    made: gym.Env,
    twin: gym.Env,
    actions: Sequence[str],
    seeds: Sequence[int],
    info_seeds: int,
) -> Iterator[tuple[str, Callable[[], None] | None]]:
    """``(name, check)`` of each of :data:`CHECKS` in order; ``None`` for one that does not
    apply to the env."""
    base: TextEnv = made.unwrapped  # as_text_env makes it a TextEnv
    strict = not isinstance(base, TextEnvAdapter)
    driver = EpisodeDriver(base, actions)
    hostile = list(hostile_actions(base).values())
    documented = strict and "Information:" in (inspect.getdoc(type(base)) or "")
    yield "api", lambda: check_env(base, skip_render_check=True)
    yield "determinism", lambda: _check_determinism(made, twin, base, driver, seeds)
    yield "spaces", lambda: _check_spaces(made, base, driver, seeds, strict)
    yield "hostile", lambda: _check_hostile(made, base, seeds, hostile, strict)
    yield "pickle", lambda: _check_pickle(made, base, driver)
    yield "contract", lambda: _check_contract(made, base, strict)
    yield "gold", (lambda: _check_gold(made, base)) if base.has_gold_completion else None
    info_docs = lambda: _check_info_docs(made, base, driver, range(info_seeds), hostile)  # noqa: E731
    yield "info_docs", info_docs if documented else None


def _check_determinism(
    made: gym.Env, twin: gym.Env, base: TextEnv, driver: EpisodeDriver, seeds: Sequence[int]
) -> None:
    """Twin envs stepped side by side, and one env replaying a seed, play the same episode."""
    name = type(base).__name__
    for seed in seeds:
        first, second = driver.lockstep([made, twin], seed)
        for step, (a, b) in enumerate(zip(first, second)):
            _require(
                a == b,
                f"{name}: two envs built alike, reset with seed {seed} and given the same "
                f"actions, differ at step {step}; draw every random choice from "
                "self.np_random (seeded by super().reset(seed=seed))",
            )
        _require(
            len(first) == len(second), f"{name}: twin episodes of seed {seed} differ in length"
        )
        again = driver.episode(made, seed)
        for step, (a, b) in enumerate(zip(first, again)):
            _require(
                a == b,
                f"{name}: one env reset twice with seed {seed} and given the same actions "
                f"differs at step {step}; reset must restore every piece of episode state",
            )


def _check_spaces(
    made: gym.Env, base: TextEnv, driver: EpisodeDriver, seeds: Sequence[int], strict: bool
) -> None:
    """Types, sums and spaces of every step; the env's own random and gold actions in its
    action space."""
    name = type(base).__name__
    driver.env_actions.clear()
    for seed in seeds:
        for step, record in enumerate(driver.episode(made, seed)[1:], 1):
            _check_step(base, record, strict, f"{name}, seed {seed}, step {step}")
    for action in driver.env_actions:
        _require(
            base.action_space.contains(action),
            f"{name}: the env's own random or gold action {action[:80]!r} is not in "
            f"{base.action_space}; propose only actions the action space holds",
        )


def _check_hostile(
    made: gym.Env, base: TextEnv, seeds: Sequence[int], hostile: Sequence[str], strict: bool
) -> None:
    """Each hostile action, on a fresh episode of each seed, never raises and steps legally."""
    name = type(base).__name__
    for seed in seeds:
        for action in hostile:
            made.reset(seed=seed)
            record = made.step(action)
            _check_step(base, record, strict, f"{name}, seed {seed}, action {action[:20]!r}")


def _check_pickle(made: gym.Env, base: TextEnv, driver: EpisodeDriver) -> None:
    obs, info = made.reset(seed=3)
    clone = pickle.loads(pickle.dumps(made))
    _require(
        driver.play_on(made, obs, info, 3) == driver.play_on(clone, obs, info, 3),
        f"{type(base).__name__}: a pickled copy of the env, taken after reset(seed=3), played "
        "the same actions differently; keep all episode state in picklable attributes",
    )


def _check_info_docs(
    made: gym.Env,
    base: TextEnv,
    driver: EpisodeDriver,
    seeds: Sequence[int],
    hostile: Sequence[str],
) -> None:
    """The info keys emitted over ``seeds`` equal those the docstring documents."""
    name = type(base).__name__
    emitted: dict[str, set[str]] = {"reset": set(), "step": set()}
    for seed in seeds:
        records = driver.episode(made, seed)
        emitted["reset"] |= set(records[0][1])
        for record in records[1:]:
            emitted["step"] |= set(record[-1])
        for action in hostile:
            made.reset(seed=seed)
            emitted["step"] |= set(made.step(action)[-1])
    documented = documented_info_keys(type(base))
    optional = documented.get("optional", set())
    for where in ("reset", "step"):
        listed = documented.get(where, set())
        _require(
            listed - optional <= emitted[where] <= listed,
            f"{name}'s docstring (Information:) lists the {where} info keys {sorted(listed)} "
            f"(optional: {sorted(listed & optional)}), but {where} emitted "
            f"{sorted(emitted[where])}; document each key as - ``key`` [{where}]: ...",
        )
