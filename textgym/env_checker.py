"""``check_text_env``: the checks every textgym env passes, for any env, beside Gymnasium's own.

Gymnasium's :func:`gymnasium.utils.env_checker.check_env` checks the Gymnasium API (spaces,
seeding, the types ``reset`` and ``step`` return). :func:`check_text_env` runs it and then what
textgym's tools rely on (``docs/authoring.md`` §3 and §5; the same checks run over every
registered textgym id in ``tests/test_registry.py``):

- **determinism**: two envs built alike, reset with the same seed and given the same actions,
  play the same episode (observations, rewards, flags, infos), for each of ``seeds``;
- **types and sums**: rewards are finite Python ``float``, ``terminated`` / ``truncated``
  Python ``bool``, ``info["invalid_action"]`` a ``bool``, the values of
  ``info["reward_components"]`` sum to the reward, observations lie in the observation space;
- **untrusted actions**: hostile text (empty, a lone surrogate, a chat-template token, 5,000
  digits, one character over the action space's ``max_length``) never raises and keeps the
  observation in its space and the reward finite;
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

Episodes are driven by actions chosen, per step and with a generator seeded by the episode's
seed, among the env's random action (what ``--policy random`` plays:
:class:`textgym.policies.RandomPolicy`), its gold completion when it gives one, and the
``actions`` the caller passes (well-formed and malformed completions of the task's format).

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
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from textgym.checks import check_stop_strings
from textgym.core import TextEnv, TextEnvAdapter, as_text_env

__all__ = ["TextEnvCheckError", "check_text_env", "documented_info_keys"]

#: Actions no env may raise on: empty, a lone surrogate, a chat-template token, 5,000 digits
#: (Python's int() refuses more than 4,300); one over ``max_length`` is added per env.
HOSTILE_ACTIONS = ("", "\ud800", "<|im_end|>", "9" * 5000)

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
    ``Arguments:`` (the Gymnasium docstring sections textgym's envs use).
    """
    doc = inspect.getdoc(env_cls) or ""  # a subclass without a docstring: its base's
    section = doc.split("Information:", 1)[-1].split("Arguments:", 1)[0]
    keys: dict[str, set[str]] = {"reset": set(), "step": set()}
    for key, where in _INFO_LINE.findall(section):
        for part in where.split(","):
            keys.setdefault(part.strip(), set()).add(key)
    return keys


class _Driver:
    """Chooses each step's action: the env's random action, its gold completion, or one of
    the given actions, with generators seeded by the episode's seed."""

    def __init__(self, base: TextEnv, actions: Sequence[str]):
        self.base, self.actions = base, list(actions)

    def episode(self, env: gym.Env, seed: int) -> list[tuple[Any, ...]]:
        """``[(obs, info), (obs, reward, terminated, truncated, info), ...]`` of one episode."""
        obs, info = env.reset(seed=seed)
        return [(obs, info), *self.play_on(env, obs, info, seed)]

    def play_on(
        self, env: gym.Env, obs: str, info: Mapping[str, Any], seed: int, limit: int = 30
    ) -> list[tuple[Any, ...]]:
        """The steps from ``(obs, info)`` to the episode's end (at most ``limit``)."""
        from textgym.policies import RandomPolicy

        rng = np.random.default_rng(seed)
        random = RandomPolicy(seed, sample_action=self.base.random_action)
        tools = info.get("tools")
        records: list[tuple[Any, ...]] = []
        for _ in range(limit):
            candidates = list(self.actions)
            acting = dict(info) if "tools" in info or not tools else {**info, "tools": tools}
            if (
                self.base.random_action is not None
                or "legal_moves" in acting
                or acting.get("tools")
            ):
                conversation = [{"role": "user", "content": obs}]
                candidates.append(random.act([conversation], [acting])[0].text)
            if isinstance(info.get("gold_completion"), str):
                candidates.append(info["gold_completion"])
            if not candidates:
                candidates = ["", "hello"]
            action = candidates[int(rng.integers(len(candidates)))]
            obs, reward, terminated, truncated, info = env.step(action)
            records.append((obs, reward, terminated, truncated, info))
            if terminated or truncated:
                break
        return records


def _twin(env: gym.Env | str) -> gym.Env:
    """A second env built like ``env``: from its id or spec, else a pickled copy."""
    if isinstance(env, str):
        return as_text_env(gym.make(env), env)
    if env.spec is not None:
        return as_text_env(gym.make(env.spec))
    return pickle.loads(pickle.dumps(env))


def _check_step(base: TextEnv, record: tuple[Any, ...], strict: bool, where: str) -> None:
    obs, reward, terminated, truncated, info = record
    _require(
        type(reward) is float and math.isfinite(reward),
        f"{where}: expected the reward to be a finite Python float, got {reward!r} "
        f"({type(reward).__name__}); return float(reward)",
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
    from textgym.builder import POLICY_NAMES

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
    expert = base.expert_policy
    _require(
        expert is None or expert in POLICY_NAMES,
        f"{name}.expert_policy is {expert!r}; expected None or one of {POLICY_NAMES}",
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
    twin = _twin(env)
    try:
        base: TextEnv = made.unwrapped  # as_text_env makes it a TextEnv
        strict = not isinstance(base, TextEnvAdapter)
        check_env(base, skip_render_check=True)
        driver = _Driver(base, actions)
        hostile = [*HOSTILE_ACTIONS, "x" * (base.action_space.max_length + 1)]
        _check_episodes(made, twin, base, driver, seeds, hostile, strict)
        _check_contract(made, base, strict)
        if base.has_gold_completion:
            _check_gold(made, base)
        if strict and "Information:" in (inspect.getdoc(type(base)) or ""):
            _check_info_docs(made, base, driver, range(info_seeds), hostile)
    finally:
        made.close()
        twin.close()


def _check_episodes(
    made: gym.Env,
    twin: gym.Env,
    base: TextEnv,
    driver: _Driver,
    seeds: Sequence[int],
    hostile: Sequence[str],
    strict: bool,
) -> None:
    """Determinism on twin envs, types and sums of every step, hostile text, pickling."""
    name = type(base).__name__
    for seed in seeds:
        first, second = driver.episode(made, seed), driver.episode(twin, seed)
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
        for step, record in enumerate(first[1:], 1):
            _check_step(base, record, strict, f"{name}, seed {seed}, step {step}")
    for seed in seeds:
        for action in hostile:
            made.reset(seed=seed)
            record = made.step(action)
            _check_step(base, record, strict, f"{name}, seed {seed}, action {action[:20]!r}")
    obs, info = made.reset(seed=3)
    clone = pickle.loads(pickle.dumps(made))
    _require(
        driver.play_on(made, obs, info, 3) == driver.play_on(clone, obs, info, 3),
        f"{name}: a pickled copy of the env, taken after reset(seed=3), played the same "
        "actions differently; keep all episode state in picklable attributes",
    )


def _check_info_docs(
    made: gym.Env, base: TextEnv, driver: _Driver, seeds: Sequence[int], hostile: Sequence[str]
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
    for where in ("reset", "step"):
        _require(
            emitted[where] == documented.get(where, set()),
            f"{name}'s docstring (Information:) lists the {where} info keys "
            f"{sorted(documented.get(where, set()))}, but {where} emitted "
            f"{sorted(emitted[where])}; document each key as - ``key`` [{where}]: ...",
        )
