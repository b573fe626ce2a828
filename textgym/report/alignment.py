"""Eval and train runs on the same rows: the evaluation numbers both kinds of run hold.

``textgym eval`` writes one ``summary.json`` for the env as it was made (``mean_return``,
``outcomes``, ``invalid_action_rate`` ...); a trainer's evaluation (``final_eval.json``, the
``eval`` rows of ``metrics.jsonl``) holds ``"<setting>/<metric>"`` for each of the env's named
evaluation settings (``TextEnv.evaluation_settings``: tic-tac-toe's ``random`` and
``optimal`` opponents), or ``eval/<metric>`` for an env that names none. :func:`eval_setting`
finds the setting an eval run played (its env's keyword arguments hold the setting's options),
and :func:`shared_eval` reads both layouts as ``setting -> metric -> value`` with one set of
metric names (:data:`SHARED_METRICS`), so ``textgym compare`` and ``textgym report`` put an eval
run's return beside a train run's return against the same opponent.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from textgym.checks import is_number

__all__ = ["SHARED_METRICS", "eval_setting", "shared_eval", "train_eval"]

#: The metrics both layouts hold, by their trainer names: the mean return (and its standard
#: error where the run has it), the win / draw / loss rates and the invalid-action rate (of turns).
SHARED_METRICS = (
    "return_mean",
    "return_stderr",
    "win_rate",
    "draw_rate",
    "loss_rate",
    "invalid_rate",
)


def _env_defaults(env_id: str) -> tuple[dict[str, Any], dict[str, Mapping[str, Any]]]:
    """The keyword arguments an env is made with by default (its constructor's defaults under
    its registration's) and its named evaluation settings; both empty for an unknown env."""
    try:
        import gymnasium
        from gymnasium.envs.registration import load_env_creator

        import textgym  # noqa: F401  (registers the envs)

        spec = gymnasium.spec(env_id)
        creator = (
            load_env_creator(spec.entry_point)
            if isinstance(spec.entry_point, str)
            else spec.entry_point
        )
        parameters = inspect.signature(creator).parameters.values()
    except Exception:  # noqa: BLE001  (an env that is not installed here: nothing to align on)
        return {}, {}
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    defaults.update(spec.kwargs or {})
    settings = dict(getattr(creator, "evaluation_settings", None) or {})
    return defaults, settings


def eval_setting(summary: Mapping[str, Any]) -> str | None:
    """The evaluation setting an eval run played, from its ``summary.json``.

    ``"eval"`` for an env that names no settings (a trainer's name for it); the name of the
    setting whose options all equal the env's keyword arguments (its defaults, then the run's
    ``env_kwargs``): tic-tac-toe made with no arguments plays the ``optimal`` opponent
    (``minimax``, ``random_move_prob`` 0); ``None`` when no setting matches (e.g.
    ``random_move_prob=0.3``) or the env is unknown.
    """
    env_id = summary.get("env_id")
    if not isinstance(env_id, str):
        return None
    defaults, settings = _env_defaults(env_id)
    if not defaults and not settings:
        return None
    if not settings:
        return "eval"
    kwargs = {**defaults, **(summary.get("env_kwargs") or {})}
    for name, options in settings.items():
        if all(name_ in kwargs and kwargs[name_] == value for name_, value in options.items()):
            return name
    return None


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if is_number(v) and math.isfinite(float(v))}


def _from_summary(summary: Mapping[str, Any]) -> dict[str, float]:
    outcomes = summary.get("outcomes") or {}
    values: dict[str, Any] = {
        "return_mean": summary.get("mean_return"),
        "return_stderr": summary.get("stderr_return"),
        "invalid_rate": summary.get("invalid_action_rate"),
    }
    if any(is_number(v) and v > 0 for v in outcomes.values()):
        values.update({f"{o}_rate": outcomes.get(o) for o in ("win", "draw", "loss")})
    return _numbers(values)


def train_eval(
    final_eval: Mapping[str, Any] | None, metrics: list[dict[str, Any]]
) -> dict[str, float]:
    """A train run's last evaluation, ``"<setting>/<metric>"`` -> value: ``final_eval.json``,
    else the last ``eval`` row of ``metrics.jsonl`` (a run still going or stopped early)."""
    if final_eval:
        return dict(final_eval)
    evals = [r for r in metrics if r.get("stage") == "eval"]
    return {k: v for k, v in (evals[-1] if evals else {}).items() if "/" in k}


def shared_eval(run: Any) -> dict[str, dict[str, float]]:
    """The evaluation numbers of a run (:class:`textgym.report.runs.Run`) by setting, with the
    names of :data:`SHARED_METRICS`.

    An eval run gives its summary under :func:`eval_setting` (nothing when no setting matches);
    a train run its last evaluation, setting by setting (``eval/return_mean`` is the setting
    ``eval``); an SFT or collect run nothing.
    """
    if run.kind == "eval" and run.summary is not None:
        setting = eval_setting(run.summary)
        return {setting: _from_summary(run.summary)} if setting is not None else {}
    if run.kind != "train":
        return {}
    final = train_eval(run.final_eval, run.metrics)
    out: dict[str, dict[str, float]] = {}
    for key, value in _numbers(final).items():
        setting, _, metric = key.rpartition("/")
        if setting and metric in SHARED_METRICS:
            out.setdefault(setting, {})[metric] = value
    return out
