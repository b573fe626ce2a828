"""``textgym/Workplace-v1``: WorkBench's workplace tasks, solved by calling tools on a sandbox.

:class:`ToolUseEnv` is the episode loop shared with ``textgym/EmailToolUse-v1``: parse the
completion's ``<tool_call>`` blocks, validate them as a whole (one invalid call, or too many,
and none runs), run them on the episode's sandbox, answer with ``<tool_response>`` blocks; a
completion without a call is the final answer, and the final tables are compared with the gold
outcome. The contract is written out in ``docs/tool_envs.md``.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from textgym.checks import check_int
from textgym.core import TextEnv
from textgym.data import select_task
from textgym.envs.workplace.dataset import DOMAINS, WorkplaceData, load_workplace
from textgym.envs.workplace.sandbox import TABLE_COLUMNS, Sandbox, SandboxTemplate
from textgym.envs.workplace.tools import WRITE_TOOLS, call_tool
from textgym.envs.workplace.verify import normalized_state, replay, state_digest
from textgym.spaces import TOO_LONG, UnicodeText, too_long_message
from textgym.toolcalls import (
    MAX_RESPONSE_CHARS,
    ToolCall,
    build_validators,
    format_tool_calls,
    parse_tool_calls,
    rejection_message,
    render_responses,
    validate_reply,
)

__all__ = ["FINAL_ANSWER", "ToolUseEnv", "WorkplaceEnv", "tool_instructions"]

#: What the gold policy says once its calls are done.
FINAL_ANSWER = "Done: I have carried out your request."


def tool_instructions(schemas: Sequence[Mapping[str, Any]]) -> str:
    """The tool-call format and a one-line summary per tool, for the system prompt."""
    lines = []
    for s in schemas:
        params = s["parameters"]
        required = set(params.get("required", []))
        args = ", ".join(p if p in required else p + "?" for p in params.get("properties", {}))
        lines.append(f"- {s['name']}({args}): {s.get('description', '')}")
    return (
        "You can call tools. Write each call as "
        '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>; you may '
        "make several calls in one reply. The results come back in <tool_response> blocks, in order. "
        "Every argument is a string except page and page_size. When the request is done, reply "
        "without any tool call; that reply ends the conversation.\n\nTools (? = optional):\n"
        + "\n".join(lines)
    )


#: Template -> digest of its starting tables (freed with the template).
_START_DIGESTS: weakref.WeakKeyDictionary[SandboxTemplate, bytes] = weakref.WeakKeyDictionary()


def _outcome_digest(template: SandboxTemplate, calls: Sequence[Mapping[str, Any]]) -> bytes:
    """Digest of the normalised tables that running ``calls`` on a fresh copy of ``template`` gives."""
    if not calls and template in _START_DIGESTS:
        return _START_DIGESTS[template]
    sandbox = template.new()
    try:
        replay(sandbox, calls)
        digest = state_digest(normalized_state(sandbox))
    finally:
        sandbox.close()
    if not calls:
        _START_DIGESTS[template] = digest
    return digest


class ToolUseEnv(TextEnv):
    """The tool-calling episode loop; subclasses choose the task in ``reset`` (see WorkplaceEnv).

    A reply is validated whole before any call runs (all or nothing; ``docs/tool_envs.md``).
    """

    #: Every reset and step info carries ``gold_completion`` (the gold calls, then a final answer).
    has_gold_completion = True
    #: The step info's keys (WorkplaceEnv's and EmailToolUseEnv's Information sections).
    info_keys = frozenset(
        {
            "task_id",
            "gold_completion",
            "noop_task",
            "tool_calls",
            "tool_errors",
            "total_tool_calls",
            "total_tool_errors",
            "total_writes",
            "success",
            "invalid_action",
            "invalid_reason",
            "reward_components",
        }
    )

    def _init_tools(
        self,
        schemas: Sequence[Mapping[str, Any]],
        max_turns: int,
        max_calls_per_step: int,
        render_mode: str | None,
    ) -> None:
        check_int("max_turns", max_turns, low=1)
        check_int("max_calls_per_step", max_calls_per_step, low=1)
        self._init_render(render_mode)
        # Deep copies: nothing nested is shared with the caller, the validators or info["tools"].
        self._tools_json = json.dumps(list(schemas))
        self.schemas = json.loads(self._tools_json)
        self.max_turns = max_turns
        self.max_calls_per_step = max_calls_per_step
        self._validators = build_validators(self.schemas)
        self.action_space = UnicodeText(65536)
        self.observation_space = UnicodeText(max_calls_per_step * (MAX_RESPONSE_CHARS + 200) + 4096)
        self._sandbox: Sandbox | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_validators", None)  # rebuilt from the schemas
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._validators = build_validators(self.schemas)

    def _start(
        self,
        task_id: str,
        query: str,
        system_prompt: str,
        gold_calls: Sequence[dict[str, Any]],
        template: SandboxTemplate,
        gold: tuple[bytes, bool] | None = None,
    ) -> tuple[bytes, bool]:
        """Open an episode; return ``(gold digest, noop)`` (48 bytes or so) for callers that cache it.

        The gold outcome is kept as :func:`~.verify.state_digest` of the normalised tables, not
        the tables themselves (about 750 KiB per WorkBench task).
        """
        if gold is None:
            digest = _outcome_digest(template, gold_calls)
            gold = (digest, digest == _outcome_digest(template, ()))
        if self._sandbox is not None:
            self._sandbox.close()
        self._sandbox = template.new()
        self._task_id, self._query, self._system_prompt = task_id, query, system_prompt
        self._gold_calls = tuple(gold_calls)
        self._gold_digest, self._noop = gold
        self._turns = self._calls = self._errors = self._writes = 0
        return gold

    def tables(self) -> dict[str, list[tuple[str, ...]]]:
        """The open episode's raw tables (every table, values as stored), e.g. for tests.

        Raises:
            RuntimeError: if no episode is open.
        """
        if self._sandbox is None:
            raise RuntimeError("No open episode; call reset() first")
        return self._sandbox.snapshot(tuple(TABLE_COLUMNS))

    def _gold_completion(self) -> str:
        return (
            format_tool_calls(self._gold_calls)
            if self._gold_calls and self._writes == 0
            else FINAL_ANSWER
        )

    def _reset_info(self) -> dict[str, Any]:
        return {
            "system_prompt": self._system_prompt,
            "tools": json.loads(self._tools_json),  # a fresh deep copy
            "task_id": self._task_id,
            "gold_completion": self._gold_completion(),
            "noop_task": self._noop,
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_action(action)
        if self._sandbox is None:
            raise RuntimeError(
                "No open episode (it ended at the final answer); call reset() before step()"
            )
        self._turns += 1
        too_long = too_long_message(action, self.action_space)  # then nothing is parsed or run
        calls = parse_tool_calls(action) if too_long is None else []
        calls, reason = validate_reply(calls, self._validators, self.max_calls_per_step)
        if too_long is not None:
            reason, errors = TOO_LONG, 0
            obs = f"{too_long} No tool was called and nothing changed; reply again, shorter."
        elif reason is not None:  # the reply is rejected whole: no call runs
            errors, obs = len(calls), rejection_message(calls, reason, self.max_calls_per_step)
        else:
            errors, obs = self._run(calls)
        self._calls += len(calls)
        self._errors += errors
        final = not calls and too_long is None
        truncated = not final and self._turns >= self.max_turns
        success = None
        if (
            final or truncated
        ):  # no successful write: the tables are the starting ones (reads and errors write nothing)
            success = (
                self._noop
                if self._writes == 0
                else (state_digest(normalized_state(self._sandbox)) == self._gold_digest)
            )
        if final:
            obs = (
                "Final answer received. The final tables "
                + ("match" if success else "do not match")
                + " the expected outcome."
            )
        elif truncated:
            obs += f"\n\nThe step limit ({self.max_turns} replies) is reached; the episode is over."
        outcome = 1.0 if success else 0.0
        info = {
            "task_id": self._task_id,
            "gold_completion": self._gold_completion(),
            "noop_task": self._noop,
            "tool_calls": len(calls),
            "tool_errors": errors,
            "total_tool_calls": self._calls,
            "total_tool_errors": self._errors,
            "total_writes": self._writes,
            "invalid_action": reason is not None,
            "invalid_reason": reason,
            "success": success,
            "reward_components": {"outcome": outcome},
        }
        if final or truncated:
            self._sandbox.close()
            self._sandbox = None
        self._emit(obs)
        return obs, outcome, final, truncated, info

    def _run(self, calls: Sequence[ToolCall]) -> tuple[int, str]:
        """Run a validated reply's calls in order: ``(tool errors, responses)``.

        Each call runs on its own: a tool's error (``"Email not found."``) changes nothing and
        is that call's result; the calls after it still run.
        """
        results, errors = [], 0
        for call in calls:
            result, ok = call_tool(self._sandbox, call.name, call.arguments)
            results.append(result if ok else f"Error: {result}")
            errors += not ok
            self._writes += ok and call.name in WRITE_TOOLS
        return errors, render_responses(results)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


class WorkplaceEnv(ToolUseEnv):
    """WorkBench's workplace tasks: carry out a request by calling 27 tools on sandboxed tables.

    Description:
        WorkBench (Styles et al., 2024, arXiv 2405.00823), as served by NVIDIA NeMo Gym's
        ``workplace_assistant``: the agent works for Sam at the company Atlas, with the clock
        frozen at Thursday 2023-11-30 23:59:00, and carries out one request ("Delete my last
        email from nadia") with 27 tools over five tables (emails, calendar events, website
        analytics and plots, project tasks, CRM customers) and a company directory. The tool
        semantics are those of ``../shared/data/workplace/TOOLS.md``
        (:mod:`textgym.envs.workplace.tools`); where they depart from NeMo Gym's reference on
        purpose, ``docs/tool_envs.md`` ("Agreement with NeMo Gym's workplace_assistant") says
        why. The tables are WorkBench's (commit 42f1b6dc), not NeMo Gym's export. Every episode gets its own in-memory SQLite
        copy of the starting tables, so episodes never share state.

    Action Space:
        ``UnicodeText(65536)``: the agent's whole reply. Tool calls are written
        ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes / Qwen
        convention; ``arguments`` may also be a JSON string), up to ``max_calls_per_step``
        per reply. A reply is checked as a whole before any call runs (all or nothing): if one
        call is malformed JSON, names an unknown tool or has arguments that fail the tool's
        JSON schema (``jsonschema``), or the reply has more than ``max_calls_per_step`` calls,
        no call of the reply runs, the tables are unchanged, it is an invalid action, and the
        observation says which call was wrong. Otherwise every call runs, in order, each on
        its own: a call that is well formed but fails in the tool (``"Email not found."``,
        a bad enum value) is a tool error, returned as that call's result; it changes nothing,
        the other calls still run, and it is not an invalid action. The contract is in
        ``docs/tool_envs.md``. A reply without ``<tool_call>`` is the final answer. Any
        ``str`` is accepted by ``step``; one longer
        than 65,536 characters is an invalid action (``"too_long"``): it is not read, no tool
        runs, it is not a final answer, and the episode goes on, the rule every textgym env
        follows (:mod:`textgym.spaces`).

    Observation Space:
        ``UnicodeText(n)``, ``n`` = ``max_calls_per_step * 16,200 + 4,096``. At reset: the
        user's request. After a reply with calls: one ``<tool_response>`` block per call, in
        order (strings as-is, other results as JSON, errors starting with ``Error:``, each cut
        at 16,000 characters). After a rejected reply: ``Error: ...`` for each invalid call
        and ``Not run: ...`` for the others, then a line saying nothing ran; or, over the
        call limit, one sentence saying so. After the final answer: whether the final tables
        match.

    Starting State:
        The starting tables, and a task drawn uniformly (``np_random``) from the loaded tasks
        (after the ``domains`` filter), or the one named by ``reset(options={"task_index":
        i})`` (0-based, file order after filtering) or ``options={"task_id": "..."}``.

    Rewards:
        ``reward = outcome``, paid when the episode ends (0.0 on earlier steps): 1.0 if the
        five compared tables (calendar_events, emails, plots, project_tasks, CRM) equal those
        that replaying the gold calls on a fresh sandbox gives, row order included, with text
        lowercased except ``status``, ``list_name`` and ``board`` and a literal backslash-n
        read as a newline (WorkBench's verdict, :mod:`textgym.envs.workplace.verify`); else
        0.0. Reads never change the outcome; any wrong or extra write does.

    Episode End:
        ``terminated`` at the final answer (a reply without tool calls). ``truncated`` when a
        reply with tool calls is the ``max_turns``-th (the registered step limit equals the
        default, 10), or when a reply too long to read is; the tables are graded then too.
        ``step`` after the end raises
        ``RuntimeError`` until ``reset``.

    Information:
        ``reward_components`` values are the terms of the step reward and sum to it.

        - ``system_prompt`` [reset]: the task's system prompt (date and time, meeting hours)
          followed by the tool-call format and a one-line summary of each tool.
        - ``tools`` [reset]: the 27 OpenAI function schemas (``{"type": "function", "name",
          "description", "parameters", "strict"}``), for a chat template; a fresh deep copy
          at every reset, so changing it changes no validation.
        - ``task_id`` [reset, step]: the task's id, e.g. ``"workbench-email-0000"``.
        - ``gold_completion`` [reset, step]: what :class:`textgym.policies.GoldPolicy` answers:
          all gold calls as ``<tool_call>`` blocks in one reply while no write has succeeded
          yet (and the task has gold calls), else a short final answer.
        - ``noop_task`` [reset, step]: ``True`` if the gold calls change nothing (WorkBench's
          122 of 690 tasks with an empty ground truth): doing nothing is then correct.
        - ``tool_calls`` [step]: number of ``<tool_call>`` blocks in this reply.
        - ``tool_errors`` [step]: how many of them did not succeed: every call of a rejected
          reply (none ran), else the calls whose tool returned an error such as "Email not
          found.". ``tool_calls - tool_errors`` calls succeeded.
        - ``total_tool_calls`` [step]: tool calls so far in the episode.
        - ``total_tool_errors`` [step]: tool errors so far in the episode.
        - ``total_writes`` [step]: calls so far that succeeded and may change a table (the
          tools that are not look-ups).
        - ``invalid_action`` [step]: ``True`` if the reply was rejected whole, so that no call
          of it ran and nothing changed: too long to read, more than ``max_calls_per_step``
          calls, or a call that is malformed, names an unknown tool or has invalid arguments.
          A tool's own error is not one. ``False`` means every call of the reply ran.
        - ``invalid_reason`` [step]: ``None``, ``"too_long"`` (over the action space's
          ``max_length``; not read), ``"too_many_calls"``, or the reason of the reply's first
          invalid call: ``"malformed_tool_call"``, ``"unknown_tool"`` or
          ``"invalid_arguments"``.
        - ``success`` [step]: ``None`` while the episode runs, then whether the tables match.
        - ``reward_components`` [step]: ``{"outcome": float}``.

    Arguments:
        - ``data_dir``: a WorkBench-format folder (``../shared/data/workplace``, or its
          ``workbench/`` sub-folder; see :mod:`textgym.envs.workplace.dataset`). Default: the
          folder named by ``$TEXTGYM_WORKPLACE_DIR`` when set, else the bundled sample
          workplace (a few rows per table and a handful of tasks written for textgym; not
          WorkBench).
        - ``domains``: ``None`` (all) or a list of task domains among ``email``, ``calendar``,
          ``analytics``, ``project_management``, ``customer_relationship_manager``,
          ``multi_domain`` (a single string is accepted too).
        - ``max_turns``: replies per episode before truncation, default 10.
        - ``max_calls_per_step``: most tool calls in one reply, default 32; a reply with more
          runs none of them (``"too_many_calls"``).

        Example: ``gym.make("textgym/Workplace-v1", data_dir="../shared/data/workplace",
        domains=["email"])``.

    Raises:
        ValueError: from ``__init__`` for an unknown domain, a filter matching no task, or
            malformed data; from ``reset`` for unknown options or an unknown task.
        FileNotFoundError: from ``__init__`` if the data folder or a file in it is missing.
        TypeError: from ``step`` if the action is not a ``str``.
        RuntimeError: from ``step`` before ``reset`` or after the episode ended.

    Version History:
        - v0: initial release; an action over the action space's length is an invalid action
          (``"too_long"``), not parsed; a reply is validated whole before any call
          runs, and an invalid call or too many calls run none of them (before, the
          valid calls of such a reply ran and only the first ``max_calls_per_step`` calls of a
          longer one).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        domains: Sequence[str] | str | None = None,
        max_turns: int = 10,
        max_calls_per_step: int = 32,
        render_mode: str | None = None,
    ):
        self.data: WorkplaceData = load_workplace(data_dir)
        if isinstance(domains, str):
            domains = [domains]
        if domains is not None:
            unknown = sorted(set(domains) - set(DOMAINS))
            if unknown:
                raise ValueError(f"Unknown domains {unknown}; expected some of {list(DOMAINS)}")
        self.domains = None if domains is None else tuple(domains)
        self._indices = tuple(
            i
            for i, t in enumerate(self.data.tasks)
            if self.domains is None or t.domain in self.domains
        )
        if not self._indices:
            raise ValueError(
                f"No task of {self.data.root} is in the domains {list(self.domains or ())}"
            )
        self._task_ids = tuple(self.data.tasks[i].task_id for i in self._indices)
        self._index_of = {task_id: i for i, task_id in enumerate(self._task_ids)}
        self._init_tools(self.data.schemas, max_turns, max_calls_per_step, render_mode)
        self._instructions = tool_instructions(self.schemas)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = self._indices[select_task(options, self._task_ids, self._index_of, self.np_random)]
        task = self.data.tasks[index]
        self.data.gold_states[index] = self._start(
            task.task_id,
            task.query,
            f"{task.system_prompt}\n\n{self._instructions}",
            task.gold_calls,
            self.data.template,
            self.data.gold_states.get(index),
        )
        self._emit(task.query)
        return task.query, self._reset_info()

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The loaded tasks' ids in order (after the ``domains`` filter):
        ``reset(options={"task_index": i})`` plays ``task_ids[i]`` (``textgym eval`` walks them)."""
        return self._task_ids
