"""A scripted expert for EmailToolUse that looks things up before it writes, as a model must.

The gold completion (``info["gold_completion"]``, ``--policy gold``) writes every gold call in
its first reply, with email ids and addresses the request never states: the request names people
by first name and emails by sender or topic. Fine-tuning on it teaches a model to guess ids.
:class:`LookupExpertPolicy` plays the same gold writes, but only after replies that find what
they need, so every id and address it writes has appeared in a tool response before:

1. For each person the writes send to, and each sender of an email the writes act on whose
   topic the request does not give (``"the last email from Ana"``):
   ``company_directory_find_email_address`` with the first name; for each email whose topic the
   request gives (``"the email about the budget review"``): ``email_search_emails`` with it.
2. For each such sender: ``email_search_emails`` with the address found (newest first).
3. The gold writes, in gold order.
4. The final answer.

Steps with no call are left out; a task whose gold calls write nothing (a false condition) is
answered at once. :func:`expert_replies` gives the plan as text; the policy plays reply ``n`` at
the agent's ``n``-th turn. Whether a found id really shows in a response (a search page holds 5
emails) is for the caller to check (``tests/envs/email_tool_use/test_expert.py`` measures it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from textgym.envs.email_tool_use.generator import EmailTask, generate_task
from textgym.envs.email_tool_use.words import TOPICS
from textgym.envs.workplace.tools import WRITE_TOOLS
from textgym.toolcalls import format_tool_calls
from textgym.types import Completion, Message

__all__ = ["LookupExpertPolicy", "expert_replies"]

_FINAL = "Done: I have carried out your request."


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def expert_replies(task: EmailTask) -> list[str]:
    """The expert's replies for ``task``, the final answer last (module docstring)."""
    rows = {row[0]: row for row in task.emails}  # id -> (id, direction, address, subject, ...)
    writes = [c for c in task.gold_calls if c["name"] in WRITE_TOOLS]
    request = task.query.lower()
    first: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
    seen: set[str] = set()

    def once(key: str) -> bool:
        new = key not in seen
        seen.add(key)
        return new

    for call in writes:
        args = call["arguments"]
        if "email_id" in args:
            _, _, sender, subject, *_ = rows[args["email_id"]]
            topic = next((t for t in TOPICS if t in subject.lower() and t in request), None)
            if topic is not None:
                if once(f"topic:{topic}"):
                    first.append(_call("email_search_emails", query=topic))
            elif once(f"sender:{sender}"):
                first.append(_call("company_directory_find_email_address", name=_first(sender)))
                second.append(_call("email_search_emails", query=sender))
        if "recipient" in args and once(f"person:{args['recipient']}"):
            first.append(
                _call("company_directory_find_email_address", name=_first(args["recipient"]))
            )
    replies = [format_tool_calls(calls) for calls in (first, second, writes) if calls]
    return [*replies, _FINAL]


def _first(address: str) -> str:
    return address.split(".")[0].capitalize()


class LookupExpertPolicy:
    """Plays :func:`expert_replies` on ``textgym/EmailToolUse-v1`` (regenerating each task from
    its ``task_id`` under the env's knobs, which must be the env's own).

    Args:
        inbox_size, distractors, num_steps: The env's knobs (its ``env_kwargs``).
        seed: Accepted for a uniform interface and ignored: the policy is deterministic.
    """

    name = "lookup_expert"
    tokens_generated = None

    def __init__(
        self, inbox_size: int = 20, distractors: int = 2, num_steps: int = 1, seed: Any = None
    ):
        self.knobs = (inbox_size, distractors, num_steps)

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for messages, info in zip(conversations, infos, strict=True):
            seed = int(info["task_id"].removeprefix("email-"), 16)
            task = generate_task(np.random.default_rng(seed), *self.knobs)
            replies = expert_replies(task)
            turn = sum(m["role"] == "assistant" for m in messages)
            out.append(Completion(replies[min(turn, len(replies) - 1)]))
        return out
