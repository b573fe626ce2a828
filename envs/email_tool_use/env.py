"""``textgym/EmailToolUse-v1``: carry out a generated email request by calling tools on a mailbox."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from textgym.envs.email_tool_use.expert import LookupExpertPolicy
from textgym.envs.email_tool_use.generator import EmailTask, generate_task
from textgym.envs.workplace.env import ToolUseEnv, tool_instructions
from textgym.envs.workplace.sandbox import SandboxTemplate
from textgym.envs.workplace.tools import TOOL_SCHEMAS

__all__ = ["EMAIL_TOOL_NAMES", "EmailToolUseEnv"]

#: The tools of this task: Workplace-v1's email tools and its company directory, same semantics.
EMAIL_TOOL_NAMES = tuple(
    s["name"]
    for s in TOOL_SCHEMAS
    if s["name"].startswith("email_") or s["name"].startswith("company_directory_")
)
_PREFIX = "email-"
#: The env arguments that make a task (what the expert needs to regenerate one from its id).
_EXPERT_KNOBS = ("inbox_size", "distractors", "num_steps")

SYSTEM_PROMPT = (
    "Today's date is Thursday, 2023-11-30 and the current time is 23:59:00. You are the email "
    "assistant of Sam, who works at {company}; colleagues' addresses are in the company "
    "directory."
)


class EmailToolUseEnv(ToolUseEnv):
    """Generated email requests (send, reply, forward, delete, search then act) on a sandboxed mailbox.

    Description:
        Offline and unlimited: each episode draws a company directory, a mailbox (inbox and
        outbox with subjects, bodies and dates before the frozen clock, 2023-11-30 23:59:00)
        and a request of one to ``num_steps`` parts, each with gold tool calls
        (:mod:`textgym.envs.email_tool_use.generator`): send an email, send to several people,
        reply to or forward the last email from someone or the email about a subject (to one
        or several people), delete the last email from someone or all emails about a subject,
        find an email then forward it, or a conditional request whose condition is false. The
        tools are Workplace-v1's six email tools and its directory lookup, with the same
        schemas and semantics (:mod:`textgym.envs.workplace.tools`). Each episode has its own
        in-memory SQLite mailbox.

    Action Space:
        ``UnicodeText(65536)``: the agent's whole reply, with tool calls written
        ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` exactly as in
        ``textgym/Workplace-v1``, up to ``max_calls_per_step`` per reply, under the same
        contract (``docs/tool_envs.md``): a reply is checked as a whole before any call runs;
        if one call is malformed, names a tool this task lacks or has arguments that fail the
        schema, or the reply has too many calls, no call runs, the mailbox is unchanged and
        it is an invalid action. Otherwise every call runs in order, and a tool's own error
        (``"Email not found."``) is that call's result, not an invalid action. A reply
        without ``<tool_call>`` is the final answer. Any
        ``str`` is accepted by ``step``; one longer than 65,536 characters is an invalid action
        (``"too_long"``): it is not read, no tool runs, it is not a final answer, and the
        episode goes on, the rule every textgym env follows (:mod:`textgym.spaces`).

    Observation Space:
        ``UnicodeText(n)``, ``n`` = ``max_calls_per_step * 16,200 + 4,096``. At reset: Sam's
        request. After a reply with calls: one ``<tool_response>`` block per call, in order
        (after a rejected reply, ``Error: ...`` for each invalid call and ``Not run: ...`` for
        the others, or one sentence when over the call limit). After the final answer: whether the mailbox matches the expected outcome.

    Starting State:
        A task generated from a 63-bit seed drawn from ``np_random``, or the one named by
        ``reset(options={"task_id": "email-<seed as 16 hex digits>"})`` (with the same knobs).

    Rewards:
        ``reward = outcome``, paid when the episode ends (0.0 on earlier steps): 1.0 if the
        final mailbox equals the one replaying the gold calls on a fresh copy gives (row order
        included, text compared case-insensitively, WorkBench's rule as in Workplace-v1), else
        0.0.

    Episode End:
        ``terminated`` at the final answer; ``truncated`` when a reply with tool calls is the
        ``max_turns``-th (registered step limit 10, the default), or when a reply too long to
        read is; the mailbox is graded then too. ``step`` after the end raises ``RuntimeError`` until ``reset``.

    Information:
        ``reward_components`` values are the terms of the step reward and sum to it.

        - ``system_prompt`` [reset]: the date, the company, the tool-call format and a one-line
          summary of each tool.
        - ``tools`` [reset]: the seven OpenAI function schemas (six email tools and
          ``company_directory_find_email_address``); a fresh deep copy at every reset.
        - ``task_id`` [reset, step]: ``"email-<16 hex digits>"``, the generator's seed.
        - ``gold_completion`` [reset, step]: what :class:`textgym.policies.GoldPolicy`
          answers: all gold calls in one reply while no write has succeeded yet (and the task
          has gold calls), else a short final answer.
        - ``noop_task`` [reset, step]: ``True`` if the gold calls change nothing (a
          conditional request whose condition is false).
        - ``tool_calls`` [step]: number of ``<tool_call>`` blocks in this reply.
        - ``tool_errors`` [step]: how many of them did not succeed: every call of a rejected
          reply, else the calls whose tool returned an error.
        - ``total_tool_calls`` [step]: tool calls so far in the episode.
        - ``total_tool_errors`` [step]: tool errors so far in the episode.
        - ``total_writes`` [step]: calls so far that succeeded and may change the mailbox
          (send, reply, forward, delete).
        - ``invalid_action`` [step]: ``True`` if the reply was rejected whole (no call ran,
          nothing changed): too long to read, more than ``max_calls_per_step`` calls, or a
          call that is malformed, names an unknown tool or has invalid arguments.
        - ``invalid_reason`` [step]: ``None``, ``"too_long"`` (over the action space's
          ``max_length``; not read), ``"too_many_calls"``, or the first invalid call's
          ``"malformed_tool_call"``, ``"unknown_tool"`` or ``"invalid_arguments"``.
        - ``success`` [step]: ``None`` while the episode runs, then whether the mailbox matches.
        - ``reward_components`` [step]: ``{"outcome": float}``.

    Arguments:
        - ``inbox_size``: background emails, an int in [0, 200], default 20.
        - ``distractors``: older emails on other subjects added per person a request is about,
          an int in [0, 10], default 2.
        - ``num_steps``: requests per task, an int in [1, 4], default 1.
        - ``max_turns``: replies per episode before truncation, default 10.
        - ``max_calls_per_step``: most tool calls in one reply, default 32; a reply with more
          runs none of them (``"too_many_calls"``).

    Raises:
        ValueError: from ``__init__`` for a knob out of range; from ``reset`` for unknown
            options or a malformed task id.
        TypeError: from ``step`` if the action is not a ``str``.
        RuntimeError: from ``step`` before ``reset`` or after the episode ended.

    Version History:
        - v0: initial release; an action over the action space's length is an invalid action
          (``"too_long"``), not parsed; a reply is validated whole before any call
          runs, and an invalid call or too many calls run none of them.
    """

    #: Looks ids and addresses up before it writes, as a model must (the gold completion
    #: writes ids the request never states): :mod:`textgym.envs.email_tool_use.expert`.
    expert_policy = "lookup_expert"

    @classmethod
    def make_expert(
        cls, *, seed: Any = None, env_kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> LookupExpertPolicy:
        """:class:`~textgym.envs.email_tool_use.expert.LookupExpertPolicy` under the env's
        task knobs of ``env_kwargs`` (``inbox_size``, ``distractors``, ``num_steps``): it
        regenerates each task from its id, so they must be the env's own."""
        knobs = {k: v for k, v in (env_kwargs or {}).items() if k in _EXPERT_KNOBS}
        return LookupExpertPolicy(seed=seed, **knobs, **options)

    def __init__(
        self,
        inbox_size: int = 20,
        distractors: int = 2,
        num_steps: int = 1,
        max_turns: int = 10,
        max_calls_per_step: int = 32,
        render_mode: str | None = None,
    ):
        generate_task(
            np.random.default_rng(0), inbox_size, distractors, num_steps
        )  # validates the knobs
        self.inbox_size, self.distractors, self.num_steps = inbox_size, distractors, num_steps
        self._init_tools(
            [s for s in TOOL_SCHEMAS if s["name"] in EMAIL_TOOL_NAMES],
            max_turns,
            max_calls_per_step,
            render_mode,
        )
        self._instructions = tool_instructions(self.schemas)
        self.task: EmailTask | None = None

    def _task_seed(self, options: dict[str, Any] | None) -> int:
        options = dict(options or {})
        if set(options) - {"task_id"}:
            raise ValueError(
                f"Unknown reset options {sorted(set(options) - {'task_id'})}; expected 'task_id'"
            )
        if "task_id" not in options:
            return int(self.np_random.integers(2**63))
        task_id = options["task_id"]
        try:
            if not (
                isinstance(task_id, str)
                and task_id.startswith(_PREFIX)
                and len(task_id) == len(_PREFIX) + 16
            ):
                raise ValueError
            return int(task_id[len(_PREFIX) :], 16)
        except ValueError:
            raise ValueError(
                f"Expected options['task_id'] like 'email-00000000000004d2', got {task_id!r}"
            ) from None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_seed = self._task_seed(options)
        task = self.task = generate_task(
            np.random.default_rng(task_seed), self.inbox_size, self.distractors, self.num_steps
        )
        template = SandboxTemplate({"emails": task.emails}, task.directory)
        system = SYSTEM_PROMPT.format(company=task.company.split(".")[0].capitalize())
        self._start(
            f"{_PREFIX}{task_seed:016x}",
            task.query,
            f"{system}\n\n{self._instructions}",
            task.gold_calls,
            template,
        )
        self._emit(task.query)
        return task.query, self._reset_info()
