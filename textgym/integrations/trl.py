"""A textgym env as what TRL's ``GRPOTrainer`` takes: a dataset, reward functions, a rollout.

Single-turn envs (``textgym/GSM8K-v0``, ``textgym/ReverseText-v0``, any env whose episode ends
after one step) need two pieces::

    from trl import GRPOConfig, GRPOTrainer
    from textgym.integrations.trl import grpo_dataset, reward_funcs

    env_id = "textgym/GSM8K-v0"
    trainer = GRPOTrainer(
        model=model,
        args=GRPOConfig(output_dir="out", num_generations=8),
        train_dataset=grpo_dataset(env_id, seeds=range(1000)),
        reward_funcs=reward_funcs(env_id),  # one per reward component: rewards/correct/mean, ...
    )

* :func:`grpo_dataset` resets the env once per seed and stores the episode's first turn in
  TRL's conversational format (``prompt`` = system prompt + first observation), with the
  columns that rebuild the episode (``seed``, ``options``, ``task_id``).
* :func:`reward_funcs` returns one reward function per reward component, named after it, so
  TRL logs ``rewards/<component>/mean`` and sums them with weight 1: the components are already
  weighted and sum to the env's reward (the env contract), so TRL's total is the env's reward.
  Each function replays the episode: ``reset`` with the row's seed and options, ``step`` with
  the completion text, read ``info["reward_components"][name]``.

Multi-turn envs (``textgym/TicTacToe-v0``) also need :func:`rollout_func`, passed as
``GRPOTrainer(rollout_func=...)``: TRL 1.16's hook for custom multi-turn generation. It plays
whole episodes with the trainer's model through :func:`textgym.rollout.rollout` (token-in /
token-out, the env's stop strings), and returns the episode as one completion: the model's ids
and the environment's ids in between, marked apart by ``env_mask`` so that only the model's
tokens enter the loss. The reward functions then read each episode's summed components from the
rollout instead of replaying. TRL 1.16's other multi-turn interface, ``environment_factory``,
exposes env methods as *tools* and needs a chat template with tool calling; a textgym action is
the whole completion text, which ``rollout_func`` keeps as it is, for any chat template.

TRL hands ``rollout_func`` the prompts only, not the other dataset columns, so every prompt
carries its episode's reset arguments in the key ``textgym_episode`` of its last message (a
JSON string ``{"seed": ..., "options": ...}``; chat templates read only ``role`` and
``content``).

Errors are never scored: an env that raises, a component the reward functions do not know, or a
row whose prompt the env no longer produces raises, as the STYLE rule for rewards asks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

import textgym  # noqa: F401  (registers the textgym/* ids)
from textgym.checks import check_int
from textgym.core import TextEnv
from textgym.errors import SetupError
from textgym.policies.base import conversation_start

__all__ = ["EPISODE_KEY", "grpo_dataset", "reward_components", "reward_funcs", "rollout_func"]

#: Key of the last prompt message that holds the episode's reset arguments (JSON).
EPISODE_KEY = "textgym_episode"

#: Extra rollout field with each episode's reward components summed over its steps.
RETURNS_FIELD = "textgym_returns"

#: Extra rollout field with each episode's actions (the completion text of every turn).
ACTIONS_FIELD = "textgym_actions"

EnvSource = str | Callable[[], gym.Env]


def _env_factory(env: EnvSource, env_kwargs: Mapping[str, Any] | None) -> Callable[[], gym.Env]:
    """``env`` as a zero-argument factory: a registered id (``gymnasium.make``) or a callable.

    Raises:
        TypeError: ``env`` is neither, or a callable is given together with ``env_kwargs``.
    """
    if isinstance(env, str):
        from textgym.builder import EnvRecipe

        return EnvRecipe(env, dict(env_kwargs or {})).make
    if callable(env):
        if env_kwargs:
            raise TypeError(
                "Expected env_kwargs only with a registered env id, got a factory and "
                f"env_kwargs={dict(env_kwargs)!r}; pass the arguments inside the factory"
            )
        return env
    raise TypeError(
        f"Expected env to be a registered env id or a factory returning a gymnasium.Env, "
        f"got {type(env).__name__}"
    )


def _name(env: gym.Env) -> str:
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def _components(env: gym.Env, reward: float, info: Mapping[str, Any]) -> dict[str, float]:
    """The step's reward components; an env without any is one component ``"env"``.

    Raises:
        SetupError: the components do not sum to the step reward (the env contract).
    """
    components = {k: float(v) for k, v in info.get("reward_components", {"env": reward}).items()}
    if not math.isclose(sum(components.values()), float(reward), rel_tol=1e-6, abs_tol=1e-6):
        raise SetupError(
            f"{_name(env)}: reward components {components} sum to "
            f"{sum(components.values())}, not to the step reward {reward}; the env breaks the "
            "contract that the components sum to the reward"
        )
    return components


def reward_components(env: EnvSource, *, env_kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """Names of the env's reward components, read from one probe step.

    The probe resets with seed 0 and steps with the empty completion (an invalid action in every
    textgym env), so it costs one step and no model call.

    Args:
        env: A registered env id or a factory returning a ``gymnasium.Env``.
        env_kwargs: Keyword arguments of ``gymnasium.make`` (with an id only).

    Returns:
        The names, in the order the env reports them.
    """
    probe = _env_factory(env, env_kwargs)()
    try:
        probe.reset(seed=0)
        _, reward, _, _, info = probe.step("")
        return list(_components(probe, float(reward), info))
    finally:
        probe.close()


def _episode(seed: int | None, options: Mapping[str, Any] | None) -> str:
    return json.dumps({"seed": seed, "options": dict(options or {})}, sort_keys=True)


def grpo_dataset(
    env: EnvSource,
    seeds: Iterable[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
) -> Any:
    """One row per episode: the prompt of ``reset(seed=s, options=...)`` in TRL's format.

    Args:
        env: A registered env id or a factory returning a ``gymnasium.Env``.
        seeds: One ``reset`` seed per row (each row is one GRPO group: TRL repeats it
            ``num_generations`` times, and every copy replays the same task and opponent).
        env_kwargs: Keyword arguments of ``gymnasium.make`` (with an id only).
        options: ``reset`` options: one mapping for every row or one per seed (e.g.
            ``{"task_id": ...}``). Must be JSON-serializable.

    Returns:
        A ``datasets.Dataset`` with the columns ``prompt`` (list of ``{"role", "content"}``
        messages: the system prompt if the env has one, then the first observation, whose message
        also carries :data:`EPISODE_KEY`), ``seed`` (int), ``options`` (JSON string) and
        ``task_id`` (``info["task_id"]``, or ``None``).

    Raises:
        SetupError: no seeds, or ``options`` is a sequence of another length than ``seeds``.
        TypeError: an option is not JSON-serializable.
    """
    from datasets import Dataset

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise SetupError("Expected at least one seed, got none")
    if options is None or isinstance(options, Mapping):
        per_row = [options] * len(seeds)
    else:
        per_row = list(options)
        if len(per_row) != len(seeds):
            raise SetupError(
                f"Expected one options mapping per seed ({len(seeds)}), got {len(per_row)}"
            )
    instance = _env_factory(env, env_kwargs)()
    rows = []
    try:
        for seed, opts in zip(seeds, per_row):
            obs, info = instance.reset(seed=seed, options=dict(opts) if opts else None)
            prompt = conversation_start(obs, info)
            prompt[-1] = {**prompt[-1], EPISODE_KEY: _episode(seed, opts)}
            rows.append(
                {
                    "prompt": prompt,
                    "seed": seed,
                    "options": json.dumps(dict(opts or {}), sort_keys=True),
                    "task_id": None if info.get("task_id") is None else str(info["task_id"]),
                }
            )
    finally:
        instance.close()
    return Dataset.from_list(rows)


def _completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or a single assistant message."""
    if isinstance(completion, str):
        return completion
    if (
        isinstance(completion, list)
        and len(completion) == 1
        and isinstance(completion[0], Mapping)
        and completion[0].get("role") == "assistant"
    ):
        return str(completion[0].get("content") or "")
    raise SetupError(
        "Expected a single-turn completion (a string or one assistant message), got "
        f"{str(completion)[:200]!r}; for a multi-turn env pass rollout_func=rollout_func(...) "
        "to GRPOTrainer"
    )


class _Scorer:
    """Replays single-turn episodes; the component functions of one batch share one replay."""

    def __init__(self, make_env: Callable[[], gym.Env], components: Sequence[str]) -> None:
        self.make_env = make_env
        self.components = tuple(components)
        self._env: gym.Env | None = None
        self._last: tuple[Any, list[dict[str, float]]] | None = None

    def batch(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        seeds: Sequence[int],
        options: Sequence[str],
    ) -> list[dict[str, float]]:
        texts = [_completion_text(c) for c in completions]
        key = (tuple(seeds), tuple(options), tuple(texts))
        if self._last is None or self._last[0] != key:
            rows = zip(prompts, seeds, options, texts, strict=True)
            self._last = (key, [self.replay(p, s, o, t) for p, s, o, t in rows])
        return self._last[1]

    def replay(self, prompt: Any, seed: int, options: str, text: str) -> dict[str, float]:
        if self._env is None:
            self._env = self.make_env()
        env = self._env
        obs, _ = env.reset(seed=int(seed), options=json.loads(options) or None)
        if isinstance(prompt, list) and prompt and prompt[-1].get("content") != obs:
            raise SetupError(
                f"{_name(env)}: reset(seed={seed}, options={options}) no longer gives this row's "
                "prompt; rebuild the dataset with the same env and env_kwargs as the rewards"
            )
        _, reward, terminated, truncated, info = env.step(text)
        if not (terminated or truncated):
            raise SetupError(
                f"{_name(env)}: the episode did not end after one step (seed {seed}); it is a "
                "multi-turn env: pass rollout_func=rollout_func(...) to GRPOTrainer"
            )
        return _check_known(_components(env, float(reward), info), self.components)


def _check_known(components: Mapping[str, float], known: Sequence[str]) -> dict[str, float]:
    unknown = sorted(set(components) - set(known))
    if unknown:
        raise SetupError(
            f"Reward components {unknown} have no reward function (known: {list(known)}); "
            "pass components=None to reward_funcs to read them from the env"
        )
    return dict(components)


def reward_funcs(
    env: EnvSource,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    components: Sequence[str] | None = None,
) -> list[Callable[..., list[float]]]:
    """One TRL reward function per reward component, each named after its component.

    Each function takes TRL's arguments (``prompts``, ``completions``, and the dataset columns
    ``seed`` and ``options`` as keyword arguments) and returns one float per completion: the
    component's value for that episode. After :func:`rollout_func` (multi-turn) it reads the
    component summed over the episode's steps from the rollout; otherwise it replays the
    single-turn episode. A component that an episode does not report counts 0 (the components
    sum to the reward, so its term was 0).

    Args:
        env: A registered env id or a factory returning a ``gymnasium.Env``; the same as the
            dataset's.
        env_kwargs: Keyword arguments of ``gymnasium.make`` (with an id only).
        components: Component names; ``None`` reads them from the env
            (:func:`reward_components`).

    Returns:
        The functions, in the order of ``components``. Give them to ``GRPOTrainer`` with the
        default weights (all 1): TRL's reward is then the env's reward.

    Raises:
        SetupError: when called, for a completion that is not single-turn without a rollout, an
            episode that does not end after one step, a component without a function, or a row
            whose prompt the env no longer gives.
    """
    make_env = _env_factory(env, env_kwargs)
    names = list(components) if components is not None else reward_components(make_env)
    if not names or len(set(names)) != len(names):
        raise SetupError(f"Expected distinct component names, got {names}")
    scorer = _Scorer(make_env, names)

    def make(name: str) -> Callable[..., list[float]]:
        def reward(
            prompts: Sequence[Any],
            completions: Sequence[Any],
            seed: Sequence[int] | None = None,
            options: Sequence[str] | None = None,
            **kwargs: Any,
        ) -> list[float]:
            returns = kwargs.get(RETURNS_FIELD)
            if returns is not None:  # multi-turn: the rollout summed the components
                return [_check_known(r, names).get(name, 0.0) for r in returns]
            if seed is None or options is None:
                raise SetupError(
                    "Expected the dataset columns 'seed' and 'options' (build the dataset with "
                    "textgym.integrations.trl.grpo_dataset)"
                )
            rows = scorer.batch(prompts, completions, seed, options)
            return [row.get(name, 0.0) for row in rows]

        reward.__name__ = reward.__qualname__ = name
        return reward

    return [make(name) for name in names]


def _episode_args(prompt: Any) -> tuple[int | None, dict[str, Any]]:
    """The reset seed and options carried by a prompt from :func:`grpo_dataset`."""
    raw = prompt[-1].get(EPISODE_KEY) if isinstance(prompt, list) and prompt else None
    if raw is None:
        raise SetupError(
            f"Expected each prompt's last message to carry {EPISODE_KEY!r} (build the dataset "
            "with textgym.integrations.trl.grpo_dataset); got a prompt without it"
        )
    episode = json.loads(raw)
    return episode["seed"], episode["options"]


def rollout_func(
    env: EnvSource,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``GRPOTrainer(rollout_func=...)`` that plays whole multi-turn episodes.

    For the prompts of one generation batch (TRL already repeated each row
    ``num_generations`` times) it plays one episode each with the trainer's model, sampling with
    the trainer's ``temperature``, ``top_p`` and ``top_k``, ending each completion at an end of
    turn, at the env's ``stop_strings`` or after ``max_new_tokens``, through
    :func:`textgym.rollout.rollout` (token-in / token-out: the ids the model sampled are the ids
    TRL scores).

    Args:
        env: A registered env id or a factory returning a ``gymnasium.Env``; the same as the
            dataset's.
        env_kwargs: Keyword arguments of ``gymnasium.make`` (with an id only).
        max_new_tokens: Most tokens per turn, >= 1; ``None`` takes the trainer's
            ``max_completion_length``. An episode's completion holds all its turns and the
            environment's messages between them, so it may be longer than that.
        batch_size: Episodes played at once (one model call per turn over them); ``None`` plays
            the whole generation batch at once.

    Returns:
        ``rollout(prompts, trainer) -> dict`` with, per prompt: ``prompt_ids`` ``[P]`` (the
        first turn), ``completion_ids`` ``[C]`` (every later id of the episode, ending with the
        last completion), ``logprobs`` ``[C]`` (sampling log-probs, 0.0 on environment ids),
        ``env_mask`` ``[C]`` (1 on model ids, 0 on environment ids), and the extra fields
        ``textgym_returns`` (each component summed over the episode) and ``textgym_actions``
        (the completion text of each turn), which TRL passes to the reward functions.

    Raises:
        SetupError: ``max_new_tokens`` or ``batch_size`` < 1; when called, a prompt without the
            episode key (:data:`EPISODE_KEY`).
    """
    from textgym.policies.hf import HFPolicy
    from textgym.rollout import rollout

    for label, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
        if value is not None:
            check_int(label, value, low=1, hint="or None")
    make_env = _env_factory(env, env_kwargs)
    probe = make_env()
    # The env contract (textgym.TextEnv) says where a completion may stop; a factory's env
    # that is not a TextEnv declares no stop strings.
    stop = list(probe.unwrapped.stop_strings) if isinstance(probe.unwrapped, TextEnv) else []
    probe.close()

    def play(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        episodes = [_episode_args(p) for p in prompts]
        policy = HFPolicy(
            trainer.accelerator.unwrap_model(trainer.model),
            trainer.processing_class,
            max_new_tokens=max_new_tokens or trainer.max_completion_length,
            temperature=trainer.temperature,
            top_p=trainer.top_p,
            top_k=trainer.top_k or 0,
            batch_size=len(prompts),
            stop=stop,
        )
        trajectories = rollout(
            make_env,
            policy,
            [seed for seed, _ in episodes],
            batch_size=batch_size or len(prompts),
            options=[opts or None for _, opts in episodes],
            token_level=True,
        )
        out: dict[str, list[Any]] = {
            k: []
            for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")
            + (RETURNS_FIELD, ACTIONS_FIELD)
        }
        for traj in trajectories:
            start = traj.loss_mask.index(1)  # every turn generates at least one token
            out["prompt_ids"].append(traj.token_ids[:start])
            out["completion_ids"].append(traj.token_ids[start:])
            out["logprobs"].append(traj.token_logprobs[start:])
            out["env_mask"].append(traj.loss_mask[start:])
            totals: dict[str, float] = {}
            for step, reward in zip(traj.reward_components, traj.rewards):
                for name, value in (step or {"env": reward}).items():
                    totals[name] = totals.get(name, 0.0) + float(value)
            out[RETURNS_FIELD].append(totals)
            out[ACTIONS_FIELD].append(
                [m["content"] for m in traj.messages if m["role"] == "assistant"]
            )
        return out

    return play
