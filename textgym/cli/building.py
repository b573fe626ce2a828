"""The env and the policy a subcommand plays, built from its options through
:mod:`textgym.builder`, with what the builder refuses reported as one usage error.

:func:`build_env` checks the env recipe by building one env; :func:`policy_kwargs` turns the
shared model options into ``make_policy`` arguments and :func:`build_policy` builds the
policy; :func:`episode_policy` is the policy ``eval`` and ``collect`` play with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from textgym.builder import GENERAL_POLICIES
from textgym.checks import one_line
from textgym.cli._options import ModelOptions, PolicyOptions, split_list
from textgym.cli.usage import fail
from textgym.errors import UsageError

__all__ = ["build_env", "build_policy", "episode_policy", "policy_kwargs"]


def build_env(
    env_id: str,
    env_kwargs: dict[str, Any],
    wrappers: Sequence[str],
    opponent_random_move_prob: tuple[float, float] | None = None,
) -> tuple[Callable[[], gym.Env], gym.Env]:
    """Return a factory for the env and one env it built (to read the env contract from, then
    close): :func:`textgym.builder.env_factory`, with its errors as usage errors.

    Raises:
        UsageError: for an unknown id or wrapper, an env that is not a ``textgym.TextEnv``,
            kwargs the env rejects, or an opponent range for an env without an opponent.
    """
    from textgym.builder import EnvRecipe, env_factory

    try:
        return env_factory(
            EnvRecipe(env_id, env_kwargs, tuple(wrappers), opponent_random_move_prob)
        )
    except ValueError as exc:
        hint = "; separate wrappers with spaces" if any("," in w for w in wrappers) else ""
        raise UsageError(one_line(exc) + hint) from None


def build_policy(name: str, kwargs: dict[str, Any], make: Callable[..., Any] | None = None) -> Any:
    """``make(**kwargs)``, by default ``textgym.builder.make_policy(name, **kwargs)``.

    Raises:
        UsageError: the policy cannot be built from these arguments.
        SystemExit: (code 2, one line) its optional dependencies are not installed.
    """
    from textgym.builder import make_policy

    try:
        return make(**kwargs) if make is not None else make_policy(name, **kwargs)
    except ImportError as exc:
        fail(f"policy {name!r} needs optional dependencies: {exc}")
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise UsageError(f"cannot build policy {name!r}: {exc}") from None


def episode_policy(
    config: Any,
    stop: Sequence[str],
    random_action: Any = None,
    make_expert: Callable[..., Any] | None = None,
) -> Any:
    """The policy that ``eval`` and ``collect`` play with, built from their shared options;
    ``random_action`` is the env's action grammar (:attr:`textgym.TextEnv.random_action`),
    which ``--policy random`` draws from; ``make_expert`` the env class's
    :meth:`~textgym.TextEnv.make_expert` when ``config.policy`` is the env's own expert.

    Raises:
        UsageError: the policy cannot be built (see :func:`build_policy`).
    """
    kwargs = policy_kwargs(
        config.policy, config, stop, seed=config.seed, batch_size=config.rollout_batch_size
    )
    if config.policy == "random" and random_action is not None:
        kwargs["sample_action"] = random_action
    return build_policy(config.policy, kwargs, make_expert)


def policy_kwargs(
    name: str, config: ModelOptions, stop: Sequence[str], *, seed: int | None, batch_size: int
) -> dict[str, Any]:
    """The keyword arguments of ``make_policy(name, ...)`` from a config's
    :class:`~textgym.cli._options.ModelOptions` fields (and its
    :class:`~textgym.cli._options.PolicyOptions` ones, ``--reasoning`` and the endpoint's
    options, when it has them) and the env's stop strings."""
    reasoning, openai_options = True, {}
    if isinstance(config, PolicyOptions):
        reasoning, openai_options = config.reasoning, config.openai_options()
    if name == "hf":
        return {
            "stop": list(stop),
            "model": config.model,
            "dtype": config.dtype,
            "max_new_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "batch_size": batch_size,
            "seed": seed,
        }
    if name == "openai":
        return {
            "base_url": split_list(config.base_url) or "http://127.0.0.1:8000/v1",
            "model": config.served_model(),
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "seed": seed,
            "stop": list(stop),
            **openai_options,
        }
    if name not in GENERAL_POLICIES:  # an env's own expert (textgym.TextEnv.make_expert)
        own = {"seed": seed, "env_kwargs": dict(getattr(config, "env_kwargs", {}))}
        if name == "minimax" and isinstance(config, PolicyOptions):  # its own options
            own.update(
                reasoning=reasoning, style=config.minimax_style, tie_break=config.minimax_tie_break
            )
        return own
    if name == "random":
        return {"seed": seed, "reasoning": reasoning}
    return {"seed": seed}
