"""A textgym env as a ``verifiers`` (0.4, ``verifiers.v1``) environment.

verifiers 0.4 composes an environment from a *taskset* (config in, tasks out) and an ``Env``
whose ``run(task, agents)`` plays one episode with the agent under evaluation; it has no
separate single-turn and multi-turn classes: the env's own loop decides how many turns there
are, as verifiers' TextArena taskset does for games. This module provides that pair for any
registered textgym env, single-turn or multi-turn:

* :class:`TextgymTaskset` resets the env once per seed: the task's ``prompt`` is the first
  observation, its ``system_prompt`` the env's, and ``info`` holds the reset arguments;
* :class:`TextgymEnv` replays that reset, then steps the env with each reply of the agent
  (the reply's whole text is the action) and sends the observation back as the next user turn,
  until the episode is terminated or truncated. Each reward component, summed over the
  episode's steps, is recorded as its own reward with weight 1; the components are already
  weighted and sum to the env's reward (the env contract), so the trace's reward equals the
  env's return.

The agent's default harness is verifiers' tool-less chat loop (``null``, exported here so that
verifiers picks it for this taskset), run in a local subprocess.

verifiers finds a taskset by importing its id as a top-level module; :func:`load_environment`
registers this module under the top-level name :data:`TASKSET_ID` and builds the env directly::

    from textgym.integrations.verifiers import load_environment

    env = load_environment("textgym/TicTacToe-v0", num_tasks=50)
    # then verifiers' own loop: env.run_slot(slot, ModelContext(client=..., model=...)) or
    # the `vf-eval` runner with the same EnvConfig (see docs/integrations.md)

A reward that raises fails the episode in verifiers (its ``errors``), never a 0.

The verifiers classes are built on first use (module ``__getattr__``), so this module imports
without the ``verifiers`` extra; using them without it raises ``ImportError`` with the fix.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import textgym  # noqa: F401  (registers the textgym/* ids)
from textgym.builder import EnvRecipe, resolve_env_id
from textgym.errors import MissingExtraError

# The verifiers classes in __all__ are module attributes through __getattr__ (built on first use).
# ruff: noqa: F822
__all__ = [
    "TASKSET_ID",
    "NullHarness",
    "NullHarnessConfig",
    "TextgymData",
    "TextgymEnv",
    "TextgymEnvConfig",
    "TextgymTask",
    "TextgymTaskset",
    "TextgymTasksetConfig",
    "episode_rewards",
    "load_environment",
]

#: The top-level module name verifiers imports for this taskset (its ``taskset.id``).
TASKSET_ID = "textgym_verifiers"


def episode_rewards(step_components: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each reward component summed over an episode's steps.

    A component missing from a step's ``info["reward_components"]`` adds 0 for that step (the
    components sum to the step reward, so its term was 0).

    Example:
        >>> episode_rewards([{"outcome": 0.0, "format": 0.2}, {"outcome": 1.0, "format": 0.2}])
        {'outcome': 1.0, 'format': 0.4}
    """
    totals: dict[str, float] = {}
    for components in step_components:
        for name, value in components.items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def _reply(segment: Any) -> str:
    """The text of a verifiers segment's last assistant message, unstripped (the action)."""
    from verifiers.v1.types import AssistantMessage

    for message in reversed(segment.messages):
        if isinstance(message, AssistantMessage):
            return message.content if isinstance(message.content, str) else ""
    return ""


@functools.cache
def _classes() -> dict[str, Any]:
    """Build the verifiers classes (imports ``verifiers`` once)."""
    try:
        import verifiers.v1 as vf
        from pydantic import Field
        from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig  # noqa: F401
        from verifiers.v1.runtimes import SubprocessConfig
    except ImportError as error:
        raise MissingExtraError(
            f"textgym.integrations.verifiers needs verifiers>=0.4 ({error}); "
            "install it with: pip install 'textgym[verifiers]'"
        ) from error

    class TextgymTasksetConfig(vf.TasksetConfig):
        """Which textgym env and which episodes (``--env.taskset.*``)."""

        env: str = "textgym/GSM8K-v0"
        """A registered Gymnasium id (``textgym/...`` or any env with the textgym contract)."""
        env_kwargs: dict[str, Any] = Field(default_factory=dict)
        """Keyword arguments of ``gymnasium.make``."""
        seeds: list[int] | None = None
        """Reset seeds, one task each; ``None``: ``range(first_seed, first_seed + num_tasks)``."""
        first_seed: int = 0
        num_tasks: int = Field(100, ge=1)
        options: dict[str, Any] = Field(default_factory=dict)
        """``reset`` options of every task (e.g. an opponent's ``random_move_prob``)."""

    class TextgymData(vf.TaskData):
        info: dict[str, Any]
        """``env``, ``env_kwargs``, ``seed`` and ``options``: what the reset is replayed from."""

    class TextgymTask(vf.Task[TextgymData, vf.State, vf.TaskConfig]):
        """One episode of a textgym env (rewards are recorded by ``TextgymEnv``)."""

    class TextgymTaskset(vf.Taskset[TextgymTask, TextgymTasksetConfig]):
        """One task per seed: the first observation of ``reset(seed=s, options=...)``."""

        def load(self) -> Iterator[TextgymTask]:
            return _tasks(self.config, TextgymTask, TextgymData)

    def default_agent() -> vf.AgentConfig:
        return vf.AgentConfig(harness=NullHarnessConfig(id="null"), runtime=SubprocessConfig())

    class TextgymEnvConfig(vf.EnvConfig):
        """The env's one seat, ``agent`` (``--env.agent.*``)."""

        agent: vf.AgentConfig = default_agent()

    class TextgymEnv(vf.Env[TextgymEnvConfig]):
        """Plays a textgym episode with the agent; records each reward component as a reward."""

        async def run(self, task: TextgymTask, agents: Any) -> None:
            await _play(task, agents)

    # The classes of __all__ (NullHarness is served as imported) and load_environment's default.
    return _named({k: v for k, v in locals().items() if k in __all__ or k == "default_agent"})


def _named(classes: dict[str, Any]) -> dict[str, Any]:
    """``classes`` with each class built here named by its key (not ``_classes.<locals>``)."""
    for name, cls in classes.items():
        if isinstance(cls, type) and cls.__module__ == __name__:
            cls.__qualname__ = name
    return classes


def _tasks(config: Any, task_cls: type, data_cls: type) -> Iterator[Any]:
    """The tasks of :class:`TextgymTaskset` (``task_cls`` of ``data_cls``), one per seed."""
    seeds = (
        config.seeds
        if config.seeds is not None
        else range(config.first_seed, config.first_seed + config.num_tasks)
    )
    env = EnvRecipe(config.env, dict(config.env_kwargs)).make()
    try:
        for seed in seeds:
            obs, info = env.reset(seed=int(seed), options=dict(config.options) or None)
            task_id = info.get("task_id")
            # A game started part-way through (info["history"]) is a conversation, not one turn.
            history = [dict(m) for m in info.get("history", ())]
            yield task_cls(
                data_cls(
                    id=None if task_id is None else f"{task_id}@seed{seed}",
                    name=f"{config.env}#seed{seed}",
                    prompt=[*history, {"role": "user", "content": obs}] if history else obs,
                    system_prompt=info.get("system_prompt") or None,
                    info={
                        "env": config.env,
                        "env_kwargs": dict(config.env_kwargs),
                        "seed": int(seed),
                        "options": dict(config.options),
                    },
                ),
                config.task,
            )
    finally:
        env.close()


async def _play(task: Any, agents: Any) -> None:
    """:meth:`TextgymEnv.run`: one episode of ``task``'s env with the agent, each reward
    component recorded as a reward of the trace."""
    info = task.data.info
    env = EnvRecipe(info["env"], dict(info["env_kwargs"])).make()
    steps: list[dict[str, float]] = []
    outcome: dict[str, Any] = {}
    try:
        obs, _ = env.reset(seed=info["seed"], options=dict(info["options"]) or None)
        if obs != task.data.prompt:
            raise ValueError(
                f"{info['env']}: reset(seed={info['seed']}) no longer gives the task's "
                "prompt; load the taskset with the same env and env_kwargs"
            )
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                obs, reward, terminated, truncated, step_info = env.step(_reply(segment))
                components = step_info.get("reward_components", {"env": float(reward)})
                steps.append({k: float(v) for k, v in components.items()})
                if terminated or truncated:
                    outcome = {"terminated": bool(terminated), "truncated": bool(truncated)}
                    if step_info.get("outcome") is not None:
                        outcome["outcome"] = str(step_info["outcome"])
                    break
                segment = await interaction.turn(obs)
    finally:
        env.close()
    trace = interaction.trace
    for name, value in episode_rewards(steps).items():
        trace.record_reward(name, value, 1.0)
    trace.info["textgym"] = {"steps": len(steps), **outcome}


def __getattr__(name: str) -> Any:
    """The verifiers classes, built on first access (PEP 562)."""
    if name in __all__ and name not in globals():
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_environment(
    env: str = "textgym/GSM8K-v0",
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    num_tasks: int = 100,
    options: Mapping[str, Any] | None = None,
    agent: Any = None,
) -> Any:
    """Wrap a registered textgym env as a verifiers environment.

    Args:
        env: A registered Gymnasium id.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        seeds: Reset seeds, one task each; ``None`` means ``range(num_tasks)``.
        num_tasks: Number of tasks when ``seeds`` is ``None``, >= 1.
        options: ``reset`` options of every task.
        agent: A ``verifiers.v1.AgentConfig``; default verifiers' ``null`` chat harness (no
            tools) in a local subprocess runtime.

    Returns:
        A ``TextgymEnv`` (a ``verifiers.v1.Env``) over a ``TextgymTaskset``, registered under
        :data:`TASKSET_ID` so that verifiers' loaders (``vf-eval``'s runner) resolve it too.

    Raises:
        ValueError: ``env`` is not registered, nor a ``module:EnvName-v0`` id whose module
            registers it, nor registered through the ``textgym.envs`` entry point
            (:func:`textgym.builder.resolve_env_id`).
        MissingExtraError: ``verifiers`` is not installed.
        pydantic.ValidationError: an argument of the wrong type or range.
    """
    resolve_env_id(env)  # an unknown id fails here, in one line, not inside verifiers
    classes = _classes()
    sys.modules.setdefault(TASKSET_ID, sys.modules[__name__])
    taskset = classes["TextgymTasksetConfig"](
        id=TASKSET_ID,
        env=env,
        env_kwargs=dict(env_kwargs or {}),
        seeds=None if seeds is None else [int(s) for s in seeds],
        num_tasks=num_tasks,
        options=dict(options or {}),
    )
    config = classes["TextgymEnvConfig"](taskset=taskset, agent=agent or classes["default_agent"]())
    return classes["TextgymEnv"](config)
