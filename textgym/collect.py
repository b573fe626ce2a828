"""SFT data from rollouts: episode filters and chat-format records (``textgym collect``).

A record is one episode as the chat messages a supervised fine-tuning trainer reads
(``{"messages": [{"role", "content"}, ...]}``, the form ``datasets.load_dataset("json", ...)``
and TRL's ``SFTTrainer`` accept), plus the episode's return, reward components, outcome and
seed for filtering and analysis. The final observation (e.g. "Game over: win.") is kept apart
as ``final_observation``: no assistant turn follows it, so it would only cost tokens.

Filters are a tiny, safe language (no ``eval`` of user text): clauses ``FIELD OP VALUE`` joined
by ``and``. Fields: ``return``, ``outcome``, ``num_steps``, ``invalid_actions`` (count),
``truncated``, ``terminated``, ``component.NAME`` (episode total of a reward component).
Operators: ``== != >= <= > <`` and ``in`` with a comma-separated list. Examples:
``"outcome in win,draw"``, ``"return >= 0.5 and invalid_actions == 0"``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from textgym.rollout import Trajectory

__all__ = ["parse_filter", "sft_record"]

_CLAUSE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(==|!=|>=|<=|>|<|\bin\b)\s*(.+?)\s*$")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
    ">": operator.gt, "<": operator.lt,
}
_FIELDS: dict[str, Callable[[Trajectory], Any]] = {
    "return": lambda t: t.episode_return,
    "outcome": lambda t: t.outcome,
    "num_steps": lambda t: t.num_steps,
    "invalid_actions": lambda t: sum(t.invalid_actions),
    "truncated": lambda t: t.truncated,
    "terminated": lambda t: t.terminated,
}


def _field(name: str) -> Callable[[Trajectory], Any]:
    if name.startswith("component."):
        component = name.split(".", 1)[1]
        return lambda t: t.component_totals().get(component, 0.0)
    if name not in _FIELDS:
        raise ValueError(
            f"Unknown filter field {name!r}; expected one of {', '.join(_FIELDS)} or component.NAME"
        )
    return _FIELDS[name]


def _literal(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    try:
        return float(text)
    except ValueError:
        return text.strip("'\"")


def parse_filter(expression: str) -> Callable[[Trajectory], bool]:
    """Compile a filter expression (see the module docstring) into a predicate.

    Raises:
        ValueError: for a clause that is not ``FIELD OP VALUE`` or an unknown field.
    """
    clauses = []
    for clause in re.split(r"\s+and\s+", expression.strip()):
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError(
                f"Cannot read filter clause {clause!r}; expected FIELD OP VALUE, e.g. 'outcome in win,draw'"
            )
        name, op, raw = match.groups()
        get = _field(name)
        if op == "in":
            allowed = {_literal(v.strip()) for v in raw.split(",")}
            clauses.append(lambda t, get=get, allowed=allowed: get(t) in allowed)
        else:
            value, compare = _literal(raw), _COMPARE[op]
            if op not in ("==", "!=") and not isinstance(value, float):
                raise ValueError(f"Operator {op} needs a number, got {raw!r} in {clause!r}")
            clauses.append(lambda t, get=get, value=value, compare=compare: compare(get(t), value))
    return lambda t: all(clause(t) for clause in clauses)


def sft_record(trajectory: Trajectory) -> dict[str, Any]:
    """The chat-format record of one episode (see the module docstring)."""
    messages = [dict(m) for m in trajectory.messages]
    final = messages.pop()["content"] if messages and messages[-1]["role"] == "user" and trajectory.num_steps else None
    return {
        "messages": messages,
        "final_observation": final,
        "env_id": trajectory.env_id,
        "seed": trajectory.seed,
        "task_id": trajectory.task_id,
        "return": trajectory.episode_return,
        "reward_components": trajectory.component_totals(),
        "outcome": trajectory.outcome,
        "num_steps": trajectory.num_steps,
        "invalid_actions": sum(trajectory.invalid_actions),
    }
