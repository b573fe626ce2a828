"""The one table of textgym's registered environments, registered by one loop.

Ids follow Gymnasium's ``namespace/Name-vN`` form; bump ``-vN`` on any change of behaviour.
Keyword arguments given to :func:`gymnasium.make` pass through to the env's constructor, whose
signature holds every default (the table copies none of them).
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym

__all__ = ["COMPOSITES", "ENVS", "ENV_DESCRIPTIONS", "EnvEntry", "register_envs"]


class EnvEntry(NamedTuple):
    """One registered env: its id, ``module:Class`` entry point, step limit and description."""

    id: str
    entry_point: str
    max_episode_steps: int | None
    description: str


#: Every textgym env, in the order ``textgym list`` shows them.
ENVS: tuple[EnvEntry, ...] = (
    EnvEntry(
        "textgym/TicTacToe-v0",
        "textgym.envs.tictactoe.env:TicTacToeEnv",
        10,
        "play X or O against a seeded minimax opponent of controllable skill "
        "(win 1, draw 0.5, loss 0)",
    ),
    EnvEntry(
        "textgym/ReverseText-v0",
        "textgym.envs.reverse_text.env:ReverseTextEnv",
        None,  # single turn
        "reverse a paragraph character by character inside <reversed_text> tags "
        "(normalized LCS similarity in [0, 1], + 0.1 format)",
    ),
    EnvEntry(
        "textgym/GSM8K-v0",
        "textgym.envs.gsm8k.env:GSM8KEnv",
        None,  # single turn
        "grade-school math, final answer after #### or in \\boxed{} (1 if it equals the gold "
        "number, + 0.1 format; bundled sample set unless data_path/dataset)",
    ),
    EnvEntry(
        "textgym/EmailToolUse-v1",
        "textgym.envs.email_tool_use.env:EmailToolUseEnv",
        10,
        "carry out a generated email request by calling tools on a sandboxed mailbox "
        "(1 if the final mailbox equals the gold outcome)",
    ),
    EnvEntry(
        "textgym/Workplace-v1",
        "textgym.envs.workplace.env:WorkplaceEnv",
        10,
        "WorkBench workplace tasks: call 27 tools on sandboxed tables "
        "(1 if the final tables equal the gold outcome; bundled sample unless data_dir)",
    ),
)

#: Envs made of other envs (not tasks of their own), registered beside :data:`ENVS`.
COMPOSITES: tuple[EnvEntry, ...] = (
    EnvEntry(
        "textgym/Mixture-v0",
        "textgym.mixture:EnvMixture",
        None,  # each member keeps its own step limit
        "several envs as one, each episode's env drawn by weight from its seed "
        "(envs=[{env_id, env_kwargs, wrappers, weight, name}]; the members' rewards)",
    ),
)

#: One-line description per registered id (shown by ``textgym list``).
ENV_DESCRIPTIONS: dict[str, str] = {entry.id: entry.description for entry in ENVS}


def register_envs() -> None:
    """Register every env of :data:`ENVS` and :data:`COMPOSITES` with Gymnasium (idempotent).

    Gymnasium's passive env checker is off for these ids (``disable_env_checker=True``): it
    marks its reset check done before the reset returns, so after a first ``reset`` that the
    env refuses (``options={"board": "garbage"}``), every later ``step`` raised ``TypeError:
    cannot unpack non-iterable NoneType object`` from the checker itself (gymnasium 1.4,
    ``PassiveEnvChecker.reset``). What it checks, every registered id passes in the test suite
    (:func:`textgym.env_checker.check_text_env`, which runs Gymnasium's ``check_env``).
    """
    for entry in (*ENVS, *COMPOSITES):
        if entry.id not in gym.registry:
            gym.register(
                id=entry.id,
                entry_point=entry.entry_point,
                max_episode_steps=entry.max_episode_steps,
                disable_env_checker=True,
            )
