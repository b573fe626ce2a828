"""SFT data from rollouts: episode filters and chat-format records (``textgym collect``).

A record is one episode as the chat messages a supervised fine-tuning trainer reads
(``{"messages": [{"role", "content"}, ...]}``, the form ``datasets.load_dataset("json", ...)``
and TRL's ``SFTTrainer`` accept), plus the episode's return, reward components, outcome and
seed for filtering and analysis. The final observation (e.g. "Game over: win.") is kept apart
as ``final_observation``: no assistant turn follows it, so it would only cost tokens.

An episode of a tool env is written in the form TRL's ``SFTTrainer`` reads for tool calling
(:func:`textgym.toolformat.to_chat_messages`): a ``tools`` column (the schemas in the
chat-completions form, as a JSON string, which TRL parses), the model's calls as the assistant
messages' ``tool_calls`` and their results as ``tool`` messages. ``textgym sft`` reads both
forms (it turns the structured one back into the text the env parses).

Filters are a tiny, safe language (no ``eval`` of user text): clauses ``FIELD OP VALUE`` joined
by ``and``. Fields: ``return``, ``outcome``, ``num_steps``, ``invalid_actions`` (count),
``truncated``, ``terminated``, ``component.NAME`` (episode total of a reward component).
Operators: ``== != >= <= > <`` and ``in`` with a comma-separated list. A value is one word
(``win``, ``0.5``, ``true``, ``none``) or a quoted string (``'a b'``). Examples:
``"outcome in win,draw"``, ``"return >= 0.5 and invalid_actions == 0"``. Anything else (``or``,
a dangling ``and``, a value of two words, an unclosed quote) is refused with the position of
the first error, never read as a string that matches nothing; so is a value the field cannot
hold (``outcome in wins``: the outcomes are ``win``, ``draw``, ``loss`` and ``none``, and a
quoted one is taken as written for an env's own; ``truncated`` and ``terminated`` are ``true``
or ``false``; the other fields are numbers).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any, NoReturn

from textgym.evaluation import OUTCOMES
from textgym.rollout import Trajectory
from textgym.toolformat import chat_tools, to_chat_messages

__all__ = ["RECORDS_FILE", "covering_records", "parse_filter", "sft_record"]

#: The records file in a ``textgym collect --output-dir`` run directory (its summary.json beside).
RECORDS_FILE = "sft_data.jsonl"

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
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


#: The values each field can hold; a value outside them is refused (it would match nothing).
#: ``outcome`` is ``none`` for an episode without one (a time limit, a single-turn task); a
#: quoted outcome is taken as written.
_OUTCOMES = (*OUTCOMES, None)
_BOOLEAN_FIELDS = frozenset({"truncated", "terminated"})


def _check_value(name: str, value: Any, quoted: bool) -> str | None:
    """What ``name``'s values are, in words, when ``value`` is not one of them; ``None`` when
    it is. A quoted outcome is taken as written (an env of one's own may report others)."""
    if name == "outcome":
        if quoted or (value in _OUTCOMES and not isinstance(value, bool)):
            return None
        known = ", ".join(str(o).lower() for o in _OUTCOMES)
        return f"one of {known} (or a quoted outcome of an env's own)"
    if name in _BOOLEAN_FIELDS:
        return None if isinstance(value, bool) else "true or false"
    # return, num_steps, invalid_actions, component.NAME: numbers
    return None if isinstance(value, float) else "a number"


def _literal(word: str) -> Any:
    """An unquoted value: a bool, ``None``, a number, else the word itself."""
    lowered = word.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    try:
        return float(word)
    except ValueError:
        return word


# One token at a time, each read by a single left-to-right match: the parser is linear in the
# length of the expression (no pattern here can backtrack over what an earlier one consumed).
_TOKEN = re.compile(
    r"""(?P<op>==|!=|>=|<=|>|<)
      | (?P<comma>,)
      | (?P<quoted>'[^']*'|"[^"]*")
      | (?P<word>[^\s,'"=!<>]+)""",
    re.VERBOSE,
)


def _excerpt(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


_TEXT_FIELDS = frozenset({"outcome"})  # compared as text: an order (< >) would be a TypeError
_FIELD_NAME = re.compile(r"[A-Za-z_][\w.]*")
_KEYWORDS = ("and", "in")


class _Tokens:
    """The tokens of a filter expression, read front to back; errors give the position."""

    def __init__(self, expression: str):
        self.expression = expression
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        pos, end = 0, len(expression)
        while True:
            while pos < end and expression[pos].isspace():
                pos += 1
            if pos == end:
                break
            match = _TOKEN.match(expression, pos)
            if match is None:
                what = (
                    "a closing quote" if expression[pos] in "'\"" else "a field, operator or value"
                )
                self.fail(what, pos, repr(expression[pos:]))
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.tokens.reverse()  # pop() from the end takes the next token

    def fail(self, expected: str, pos: int, got: str) -> NoReturn:
        raise ValueError(
            f"expected {expected} at char {pos}, got {_excerpt(got)} "
            f"(in {_excerpt(repr(self.expression))})"
        )

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[-1] if self.tokens else None

    def accept(self, kind: str, keyword: str | None = None) -> bool:
        """Take the next token if it is of ``kind`` (and is ``keyword``, if given)."""
        token = self.peek()
        if token is None or token[0] != kind or (keyword and token[1].lower() != keyword):
            return False
        self.tokens.pop()
        return True

    def take(self, expected: str, *kinds: str) -> tuple[str, int]:
        """The next token's text and position; it must be one of ``kinds`` (and no keyword)."""
        token = self.peek()
        if token is None:
            self.fail(expected, len(self.expression), "the end")
        kind, text, pos = token
        if kind not in kinds or (kind == "word" and text.lower() in _KEYWORDS):
            self.fail(expected, pos, repr(text))
        self.tokens.pop()
        return text, pos

    def value(self) -> tuple[Any, str, int]:
        """The next value: ``(parsed, text, position)``; a quoted value is always a string."""
        text, pos = self.take("a value", "word", "quoted")
        parsed = text[1:-1] if text[0] in "'\"" else _literal(text)
        return parsed, text, pos


def parse_filter(expression: str) -> Callable[[Trajectory], bool]:
    """Compile a filter expression (see the module docstring) into a predicate.

    Parsing is linear in the length of the expression.

    Raises:
        ValueError: for anything that is not ``FIELD OP VALUE`` clauses joined by ``and`` (the
            message gives the 0-based character position of the first error), an unknown
            field, or a comparison ``> >= < <=`` of the text field ``outcome`` or with a value
            that is not a number.
    """
    tokens = _Tokens(expression)
    clauses = []
    while True:
        name, pos = tokens.take("a field name", "word")
        if not _FIELD_NAME.fullmatch(name):
            tokens.fail("a field name", pos, repr(name))
        get = _field(name)

        def known_value(name: str = name) -> Any:
            value, text, pos = tokens.value()
            expected = _check_value(name, value, text[0] in "'\"")
            if expected is not None:
                tokens.fail(f"{expected} after {name}", pos, repr(text))
            return value

        if tokens.accept("word", "in"):
            allowed = {known_value()}
            while tokens.accept("comma"):
                allowed.add(known_value())
            clauses.append(lambda t, get=get, allowed=allowed: get(t) in allowed)
        else:
            op, op_pos = tokens.take("an operator (== != >= <= > < in)", "op")
            if op not in ("==", "!=") and (name in _TEXT_FIELDS or name in _BOOLEAN_FIELDS):
                kind = "text" if name in _TEXT_FIELDS else "true/false"
                tokens.fail(f"==, != or in after the {kind} field {name}", op_pos, repr(op))
            value = known_value()
            compare = _COMPARE[op]
            clauses.append(lambda t, get=get, value=value, compare=compare: compare(get(t), value))
        if tokens.peek() is None:
            return lambda t: all(clause(t) for clause in clauses)
        if not tokens.accept("word", "and"):
            _, text, pos = tokens.peek()  # type: ignore[misc]
            tokens.fail("'and' or the end of the filter", pos, repr(text))


def sft_record(trajectory: Trajectory) -> dict[str, Any]:
    """The chat-format record of one episode (see the module docstring)."""
    messages = [dict(m) for m in trajectory.messages]
    final = (
        messages.pop()["content"]
        if messages and messages[-1]["role"] == "user" and trajectory.num_steps
        else None
    )
    tools = {}
    if trajectory.tools:
        messages = to_chat_messages(messages)
        tools = {"tools": json.dumps(chat_tools(trajectory.tools), ensure_ascii=False)}
    return {
        "messages": messages,
        **tools,
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


def _prompts(record: dict[str, Any]) -> set[str]:
    """Every prompt of a record, the conversation before each assistant message, as canonical
    JSON (every message key counts: a tool call is part of the prompt that follows it)."""
    messages = record["messages"]
    return {
        json.dumps(messages[:i], sort_keys=True, ensure_ascii=False)
        for i, m in enumerate(messages)
        if m["role"] == "assistant"
    }


def covering_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A small subset of ``records`` in which every prompt of ``records`` still appears.

    A prompt is the conversation before an assistant message: what the policy saw when it
    acted. Greedy set cover (repeatedly keep the record with the most prompts not yet covered;
    ties go to the earlier record), which is within a factor ``ln(max prompts per record) + 1``
    of the smallest cover (Johnson, 1974). Used to thin expert games collected against mostly
    random opponents: a few hundred games keep every position of thousands, so SFT spends its
    steps on positions rather than on repeats of the common openings (docs/mastery_study.md).

    Args:
        records: :func:`sft_record` dicts (``"messages"`` as chat messages).

    Returns:
        The kept records, in their original order. Records with equal prompts (duplicate
        games of a deterministic expert) are kept at most once.

    Raises:
        KeyError: for a record without ``"messages"``.
    """
    prompts = [_prompts(r) for r in records]
    left = set().union(*prompts) if prompts else set()
    kept: list[int] = []
    while left:
        best = max(range(len(records)), key=lambda i: (len(prompts[i] & left), -i))
        kept.append(best)
        left -= prompts[best]
    return [records[i] for i in sorted(kept)]
