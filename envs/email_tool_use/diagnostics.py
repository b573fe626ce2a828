"""Per-tool-call diagnostics of an EmailToolUse episode: what the agent got wrong, call by call.

An episode's reward says only whether the final mailbox matched. These pure functions compare the
tool calls the agent wrote with the generator's gold calls (:func:`task_of`, regenerated
from the task id and the env's knobs) and give every call a kind (:data:`CALL_KINDS`):

- ``invalid_json``: a ``<tool_call>`` block that is not a JSON object with a string ``name`` and
  an object ``arguments`` (the env's ``"malformed_tool_call"``).
- ``wrong_tool``: a tool the task lacks, or a writing tool that no gold call uses.
- ``wrong_arguments``: arguments that fail the tool's schema, or a call to a writing tool some
  unmatched gold call uses, with other arguments (a wrong email id, recipient, body...).
- ``wrong_order``: a call equal to a gold call, made out of the gold order (the calls outside a
  longest run of matched calls in gold order).
- ``correct``: a call equal to a gold call, in order.
- ``lookup``: a valid read-only call (:data:`READ_ONLY_TOOLS`: search, get by id, directory).
  Looking things up changes nothing, so lookups are never compared with the gold, and the
  gold's own lookups (the search of "find the email then forward it") are not required: only
  the gold calls that write are.
- ``extra``: a write to a tool the gold writes use, when each gold call of that tool is matched
  (a repeat, or one recipient too many).
- ``not_run``: a valid call in a reply the env rejected whole because another call of it was
  invalid (:func:`textgym.toolcalls.validate_reply`); it is not compared with the gold.

Calls are equal when their names are equal and their arguments are, strings compared after
stripping and case-folding (the verifier compares text case-insensitively). Each episode also
gets a ``verdict``: ``"correct"`` when the calls that ran are the gold calls in order (lookups
aside), else the first of :data:`VERDICTS` that applies (``"missing"``: a gold call never made,
with nothing else wrong).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from textgym.envs.email_tool_use.env import EMAIL_TOOL_NAMES
from textgym.envs.email_tool_use.generator import EmailTask, generate_task
from textgym.envs.workplace.tools import TOOL_SCHEMAS
from textgym.toolcalls import ToolCall, build_validators, parse_tool_calls, validate_reply

__all__ = [
    "CALL_KINDS",
    "READ_ONLY_TOOLS",
    "VERDICTS",
    "CallDiagnosis",
    "diagnose_tool_calls",
    "task_of",
    "summarize_call_diagnoses",
]

#: Every kind a call can get (module docstring), failures first.
CALL_KINDS = (
    "invalid_json",
    "wrong_tool",
    "wrong_arguments",
    "wrong_order",
    "extra",
    "not_run",
    "lookup",
    "correct",
)
#: An episode's verdict, checked in this order after ``"correct"``.
VERDICTS = (
    "correct",
    "invalid_json",
    "wrong_tool",
    "wrong_arguments",
    "wrong_order",
    "extra",
    "missing",
)
#: Tools that change nothing in the mailbox.
READ_ONLY_TOOLS = frozenset(
    {
        "email_search_emails",
        "email_get_email_information_by_id",
        "company_directory_find_email_address",
    }
)
_REASON_KIND = {
    "malformed_tool_call": "invalid_json",
    "unknown_tool": "wrong_tool",
    "invalid_arguments": "wrong_arguments",
}
_PREFIX = "email-"
#: Kinds of a call that ran and made the outcome differ from the gold.
_RAN_FAILURES = frozenset({"wrong_tool", "wrong_arguments", "wrong_order", "extra"})


def task_of(
    task_id: str, inbox_size: int = 20, distractors: int = 2, num_steps: int = 1
) -> EmailTask:
    """The task ``"email-<16 hex digits>"`` regenerated under the env's knobs (the same
    ``env_kwargs`` the episode was played with; other knobs give another task): its gold calls
    (``.gold_calls``) and request templates (``.templates``, ``"family/k"``).

    Raises:
        ValueError: a task id of another form, or a knob out of range.
    """
    digits = task_id[len(_PREFIX) :]
    if not task_id.startswith(_PREFIX) or len(digits) != 16:
        raise ValueError(f"Expected a task id like 'email-00000000000004d2', got {task_id!r}")
    seed = int(digits, 16)
    return generate_task(np.random.default_rng(seed), inbox_size, distractors, num_steps)


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _same(call: ToolCall, gold: Mapping[str, Any]) -> bool:
    return call.name == gold["name"] and _normal(call.arguments) == _normal(gold["arguments"])


def _in_order(indices: Sequence[int]) -> set[int]:
    """Positions of ``indices`` on one longest strictly increasing run (patience sorting)."""
    tails: list[int] = []  # value at the end of the best run of each length
    tail_at: list[int] = []  # its position
    parent = [-1] * len(indices)
    for pos, value in enumerate(indices):
        k = bisect.bisect_left(tails, value)
        parent[pos] = tail_at[k - 1] if k else -1
        if k == len(tails):
            tails.append(value)
            tail_at.append(pos)
        else:
            tails[k], tail_at[k] = value, pos
    kept, pos = set(), tail_at[-1] if tail_at else -1
    while pos != -1:
        kept.add(pos)
        pos = parent[pos]
    return kept


@dataclass(frozen=True)
class CallDiagnosis:
    """One episode's diagnosis: each call as ``{"reply", "name", "kind"}`` in the order written,
    the number of gold writes compared (``gold_calls``; lookups left out) and of those never
    made exactly (``missing``), the episode's ``verdict`` and the calls per kind (``kinds``)."""

    calls: tuple[dict[str, Any], ...]
    gold_calls: int
    missing: int
    verdict: str
    kinds: dict[str, int] = field(default_factory=dict)


def diagnose_tool_calls(
    replies: Sequence[str], gold_calls: Sequence[Mapping[str, Any]], max_calls_per_step: int = 32
) -> CallDiagnosis:
    """Compare an episode's tool calls with the gold calls (module docstring).

    Args:
        replies: The agent's replies (assistant messages) in order; a reply without
            ``<tool_call>`` is a final answer and has no calls.
        gold_calls: ``({"name", "arguments"}, ...)``, e.g. ``task_of(...).gold_calls``; its
            read-only calls are left out (module docstring).
        max_calls_per_step: The env's ``max_calls_per_step``: a reply with more calls runs none
            (all of them ``not_run``), as in the env.

    Returns:
        A :class:`CallDiagnosis`.
    """
    validators = build_validators([s for s in TOOL_SCHEMAS if s["name"] in EMAIL_TOOL_NAMES])
    calls: list[dict[str, Any]] = []
    ran: list[tuple[int, ToolCall]] = []  # (index in calls, call) of the writes that ran
    for r, reply in enumerate(replies):
        checked, reason = validate_reply(parse_tool_calls(reply), validators, max_calls_per_step)
        for call in checked:
            kind = None
            if reason is not None:
                kind = _REASON_KIND.get(call.reason or "", "not_run")
            elif call.name in READ_ONLY_TOOLS:
                kind = "lookup"
            else:  # a write that ran: compared with the gold writes below
                ran.append((len(calls), call))
            calls.append({"reply": r, "name": call.name, "kind": kind})
    gold_calls = [g for g in gold_calls if g["name"] not in READ_ONLY_TOOLS]
    matched: list[int | None] = [None] * len(gold_calls)  # gold index -> index in ran
    for j, (_, call) in enumerate(ran):
        for g, gold in enumerate(gold_calls):
            if matched[g] is None and _same(call, gold):
                matched[g] = j
                break
    gold_of = {j: g for g, j in enumerate(matched) if j is not None}
    order = sorted(gold_of)  # ran positions of matched calls, in the order written
    in_order = {order[p] for p in _in_order([gold_of[j] for j in order])}
    open_names = {gold_calls[g]["name"] for g, j in enumerate(matched) if j is None}
    gold_names = {g["name"] for g in gold_calls}
    for j, (i, call) in enumerate(ran):
        if j in gold_of:
            kind = "correct" if j in in_order else "wrong_order"
        elif call.name in open_names:
            kind = "wrong_arguments"
        elif call.name in gold_names:
            kind = "extra"
        else:
            kind = "wrong_tool"
        calls[i]["kind"] = kind
    kinds = Counter(c["kind"] for c in calls)
    missing = sum(j is None for j in matched)
    ran_wrong = any(calls[i]["kind"] in _RAN_FAILURES for i, _ in ran)
    if not missing and not ran_wrong:
        verdict = "correct"  # rejected replies aside: the agent recovered from them
    else:
        verdict = next((v for v in VERDICTS[1:-1] if kinds[v]), "missing")
    return CallDiagnosis(
        tuple(calls), len(gold_calls), missing, verdict, {k: kinds[k] for k in CALL_KINDS}
    )


def summarize_call_diagnoses(diagnoses: Iterable[CallDiagnosis]) -> dict[str, Any]:
    """Totals over episodes: calls per kind (count and share of all calls), verdicts (count and
    share of episodes), gold calls and the share of them never made exactly."""
    diagnoses = list(diagnoses)
    kinds = Counter(dict.fromkeys(CALL_KINDS, 0))
    for d in diagnoses:
        kinds.update(d.kinds)
    verdicts = Counter(dict.fromkeys(VERDICTS, 0))
    verdicts.update(d.verdict for d in diagnoses)
    n_calls, n_gold = sum(kinds.values()), sum(d.gold_calls for d in diagnoses)
    return {
        "episodes": len(diagnoses),
        "calls": n_calls,
        "call_kinds": dict(kinds),
        "call_kind_rates": {k: (v / n_calls if n_calls else 0.0) for k, v in kinds.items()},
        "verdicts": dict(verdicts),
        "verdict_rates": {
            v: (c / len(diagnoses) if diagnoses else 0.0) for v, c in verdicts.items()
        },
        "gold_calls": n_gold,
        "missing_rate": sum(d.missing for d in diagnoses) / n_gold if n_gold else 0.0,
    }
