"""ATIF export: textgym runs as Agent Trajectory Interchange Format documents (ATIF v1.8).

ATIF (Harbor's RFC 0001, the ``atif`` package's pydantic models: ``pip install
"textgym[atif]"``) is the trajectory format NeMo Gym and other agent stacks exchange. One
episode of an eval, collect or train run becomes one ATIF ``Trajectory``:

- ``agent``: ``textgym`` and its version, the run's model (``summary.json`` of an eval,
  ``run.json`` of a train run) and the policy in ``agent.extra``; the env's tool schemas, in
  the chat-completions form, as ``tool_definitions``;
- ``steps``: the system prompt (``source="system"``), the first observation (``"user"``), then
  one ``"agent"`` step per policy turn: its text (``message``), its calls as ``tool_calls``
  (ids ``call_<message index>_<k>``, as :func:`textgym.toolformat.to_chat_messages` numbers
  them), and the env's answer as ``observation`` (one result per call, with the call's id,
  or one result holding the next observation); the turn's ``reward``, ``reward_components``,
  ``invalid_action`` and ``finish_reason`` in ``extra`` (a collect record keeps episode
  totals only), and ``completion``, the text as generated, where ``message`` left the
  tool-call blocks out; and where the run kept tokens (an eval with ``--policy hf``), ``metrics`` with
  the turn's prompt ids (the episode so far), completion ids and their log-probs.
  ``llm_call_count`` is 0 for a scripted policy (``gold``, ``minimax``, ``random``), 1 for a
  model, unset when the run does not say;
- ``final_metrics``: agent turns, tokens where kept, and in ``extra`` the return, the reward
  components' episode totals, ``terminated`` / ``truncated`` and the outcome;
- ``extra``: ``env_id``, ``seed``, ``task_id``, the run's kind, and for a train run's episode
  its ``step``, ``group`` and ``advantage``.

Every document is built through the ``atif`` models, so what :func:`episode_to_atif` returns
validates by construction; ``tests/test_atif.py`` validates the written files again.

Example:
    >>> doc = episode_to_atif({"env_id": "e", "seed": 0, "task_id": "t", "messages": [
    ...     {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"},
    ...     {"role": "user", "content": "Right."}], "rewards": [1.0],
    ...     "reward_components": [{"correct": 1.0}]}, kind="eval", index=0)
    >>> [s["source"] for s in doc["steps"]], doc["steps"][1]["extra"]["reward"]
    (['user', 'agent'], 1.0)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textgym.errors import MissingExtraError, SetupError
from textgym.toolformat import chat_tools, to_chat_messages

__all__ = [
    "SCHEMA_VERSION",
    "SCRIPTED_POLICIES",
    "RunEpisodes",
    "chat_records",
    "episode_to_atif",
    "export_atif",
    "read_run",
    "require_atif",
]

#: The ATIF version written (the ``atif`` package's models, 1.8).
SCHEMA_VERSION = "ATIF-v1.8"

#: Policies that call no model: their agent steps have ``llm_call_count`` 0.
SCRIPTED_POLICIES = frozenset({"gold", "minimax", "random"})

#: Episode keys a train run adds to the trajectory record (``train_episodes.jsonl``).
_TRAIN_KEYS = ("step", "group", "advantage")


def require_atif() -> Any:
    """The ``atif`` module.

    Raises:
        MissingExtraError: it is not installed (the message names the ``pip install``).
    """
    try:
        import atif
    except ImportError as exc:
        raise MissingExtraError(
            f'ATIF export needs the atif package ({exc}); pip install "textgym[atif]"'
        ) from None
    return atif


@dataclass
class RunEpisodes:
    """A run's episodes as :func:`read_run` finds them.

    Attributes:
        kind: ``"eval"``, ``"collect"`` or ``"train"``.
        path: The file the episodes are read from.
        policy: The policy that played them (``None`` when the run does not say: collect).
        model: The model behind the policy, if any.
        session_id: The run's name (its folder or file name), for ATIF's ``session_id``.
    """

    kind: str
    path: Path
    policy: str | None = None
    model: str | None = None
    session_id: str = ""

    def records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(line number, record)`` of each episode, in file order.

        Raises:
            SetupError: a line that is not a JSON object (named by line, with an excerpt).
        """
        with open(self.path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise SetupError(
                        f"{self.path}:{number} is not JSON ({exc.__class__.__name__}: {exc}); "
                        f"expected one episode per line, got {line[:80]!r}"
                    ) from None
                if not isinstance(record, dict) or "messages" not in record:
                    raise SetupError(
                        f"{self.path}:{number}: expected an episode record with 'messages', "
                        f"got {line[:80]!r}"
                    )
                yield number, record


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_run(path: str | os.PathLike[str]) -> RunEpisodes:
    """Find a run's episodes: an eval directory (``trajectories.jsonl``, ``summary.json``), a
    train directory (``metrics.jsonl`` and the episodes it kept, ``train_episodes.jsonl``), or
    the JSONL file ``textgym collect`` wrote.

    Raises:
        SetupError: the path holds no run, or a train run that kept no episodes.
    """
    path = Path(path)
    name = path.name or str(path)
    if path.is_file():
        return RunEpisodes("collect", path, session_id=name)
    if (path / "trajectories.jsonl").is_file():
        summary = _read_json(path / "summary.json")
        policy, model = summary.get("policy"), summary.get("model")
        return RunEpisodes("eval", path / "trajectories.jsonl", policy, model, name)
    if (path / "metrics.jsonl").is_file():
        if not (path / "train_episodes.jsonl").is_file():
            raise SetupError(
                f"{path} is a train run that kept no episodes (no train_episodes.jsonl); "
                "train with --log-completions N (N >= 1) to keep N groups a step"
            )
        model = _read_json(path / "run.json").get("config", {}).get("model")
        return RunEpisodes("train", path / "train_episodes.jsonl", "hf", model, name)
    what = "does not exist" if not path.exists() else "holds no textgym run"
    raise SetupError(
        f"{path} {what}: expected an eval directory (trajectories.jsonl, textgym eval "
        "--output-dir), a train directory (metrics.jsonl and train_episodes.jsonl), or the "
        "JSONL file of textgym collect --output"
    )


def _turn_tokens(record: Mapping[str, Any]) -> list[tuple[int, int]]:
    """``(start, end)`` of each turn's generated ids: the runs of 1 in ``loss_mask``."""
    mask, spans, start = record.get("loss_mask") or [], [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _metrics(atif: Any, record: Mapping[str, Any], span: tuple[int, int] | None) -> Any:
    if span is None:
        return None
    ids, logprobs = record["token_ids"], record.get("token_logprobs") or []
    start, end = span
    return atif.Metrics(
        prompt_tokens=start,
        completion_tokens=end - start,
        prompt_token_ids=ids[:start],
        completion_token_ids=ids[start:end],
        logprobs=logprobs[start:end] if len(logprobs) == len(ids) else None,
    )


def _per_turn(record: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """The turn's reward, components, invalid flag and finish reason, those the record has."""
    extra: dict[str, Any] = {}
    for key, name in (
        ("rewards", "reward"),
        ("reward_components", "reward_components"),
        ("invalid_actions", "invalid_action"),
        ("finish_reasons", "finish_reason"),
    ):
        values = record.get(key)
        if isinstance(values, list) and turn < len(values):
            extra[name] = values[turn]
    return extra


def _agent_step(
    atif: Any,
    step_id: int,
    message: Mapping[str, Any],
    answer: list[Mapping[str, Any]],
    extra: dict[str, Any],
    metrics: Any,
    llm_calls: int | None,
) -> Any:
    """One agent turn: its text and calls, and the env's answer to it."""
    calls = [
        atif.ToolCall(
            tool_call_id=call["id"],
            function_name=call["function"]["name"],
            arguments=_arguments(call["function"].get("arguments")),
        )
        for call in message.get("tool_calls") or []
    ]
    results = [
        atif.ObservationResult(
            source_call_id=reply.get("tool_call_id") if calls else None,
            content=str(reply.get("content") or ""),
        )
        for reply in answer
    ]
    return atif.Step(
        step_id=step_id,
        source="agent",
        message=str(message.get("content") or ""),
        tool_calls=calls or None,
        observation=atif.Observation(results=results) if results else None,
        metrics=metrics if llm_calls != 0 else None,
        extra=extra or None,
        llm_call_count=llm_calls,
    )


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {"_unparsed": value}
    return value if isinstance(value, dict) else {"_value": value}


def _steps(atif: Any, record: Mapping[str, Any], llm_calls: int | None) -> list[Any]:
    messages = to_chat_messages(record["messages"])
    if record.get("final_observation") is not None:  # a collect record keeps it apart
        messages.append({"role": "user", "content": record["final_observation"]})
    spans = _turn_tokens(record)
    raw = [str(m.get("content") or "") for m in record["messages"] if m["role"] == "assistant"]
    turns = sum(m["role"] == "assistant" for m in messages)
    if len(spans) != turns:
        spans = []  # no tokens kept (or they do not align with the turns): no metrics
    steps: list[Any] = []
    turn, i = 0, 0
    while i < len(messages):
        message = messages[i]
        if message["role"] != "assistant":
            source = "system" if message["role"] == "system" else "user"
            steps.append(
                atif.Step(step_id=len(steps) + 1, source=source, message=message["content"])
            )
            i += 1
            continue
        answer, i = [], i + 1
        while i < len(messages) and messages[i]["role"] == "tool":
            answer.append(messages[i])
            i += 1
        if not answer and i < len(messages) and messages[i]["role"] == "user":
            answer, i = [messages[i]], i + 1
        if message.get("tool_calls") and answer and answer[0]["role"] != "tool":
            message = {**message, "tool_calls": None}  # calls the env rejected whole
        span = spans[turn] if spans else None
        extra = _per_turn(record, turn)
        if turn < len(raw) and raw[turn] != str(message.get("content") or ""):
            extra["completion"] = raw[turn]  # the text as generated, tool-call blocks included
        steps.append(
            _agent_step(
                atif,
                len(steps) + 1,
                message,
                answer,
                extra,
                _metrics(atif, record, span),
                llm_calls,
            )
        )
        turn += 1
    return steps


def episode_to_atif(
    record: Mapping[str, Any],
    *,
    kind: str,
    index: int,
    policy: str | None = None,
    model: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """One episode record (a line of ``trajectories.jsonl``, ``train_episodes.jsonl`` or a
    collect file) as an ATIF trajectory document (see the module for the mapping).

    Args:
        record: The episode record.
        kind: The run's kind (``"eval"``, ``"collect"``, ``"train"``), kept in ``extra``.
        index: The episode's position in its run, for ``trajectory_id``.
        policy: The policy that played it (``llm_call_count`` 0 for a scripted one).
        model: The model behind the policy.
        session_id: The run's name.

    Returns:
        The document as JSON-ready dict (``None`` fields left out), validated by
        ``atif.Trajectory``.

    Raises:
        MissingExtraError: the ``atif`` package is not installed.
        pydantic.ValidationError: a record that ATIF cannot hold (a bug: report it).
    """
    atif = require_atif()
    llm_calls = None if policy is None else 0 if policy in SCRIPTED_POLICIES else 1
    tools = record.get("tools")
    if isinstance(tools, str):  # a collect record of a tool env keeps them as a JSON string
        tools = json.loads(tools)
    agent = atif.Agent(
        name="textgym",
        version=_version(),
        model_name=model,
        tool_definitions=chat_tools(tools) if tools else None,
        extra={"policy": policy} if policy is not None else None,
    )
    steps = _steps(atif, record, llm_calls)
    agent_steps = [s for s in steps if s.source == "agent"]
    tokens = [s.metrics for s in agent_steps if s.metrics is not None]
    totals = record.get("component_totals", record.get("reward_components"))
    final = atif.FinalMetrics(
        total_steps=len(agent_steps),
        total_prompt_tokens=tokens[-1].prompt_tokens if tokens else None,
        total_completion_tokens=sum(m.completion_tokens for m in tokens) if tokens else None,
        extra={
            key: value
            for key, value in (
                ("return", record.get("return")),
                ("reward_components", totals if isinstance(totals, dict) else None),
                ("terminated", record.get("terminated")),
                ("truncated", record.get("truncated")),
                ("outcome", record.get("outcome")),
            )
            if value is not None
        },
    )
    extra = {"run": kind, **{k: record.get(k) for k in ("env_id", "seed", "task_id")}}
    extra.update({k: record[k] for k in _TRAIN_KEYS if k in record})
    trajectory = atif.Trajectory(
        schema_version=SCHEMA_VERSION,
        session_id=session_id,
        trajectory_id=f"{kind}-{index}",
        agent=agent,
        steps=steps,
        final_metrics=final,
        extra=extra,
    )
    return trajectory.to_json_dict()


def _version() -> str:
    import textgym

    return str(textgym.__version__)


def export_atif(run: RunEpisodes) -> Iterator[str]:
    """Each episode of ``run`` as one line of ATIF JSON (no newline), in file order.

    Raises:
        SetupError: a line of the run's file that is not an episode record.
        MissingExtraError: the ``atif`` package is not installed.
    """
    for index, (_, record) in enumerate(run.records()):
        doc = episode_to_atif(
            record,
            kind=run.kind,
            index=index,
            policy=run.policy,
            model=run.model,
            session_id=run.session_id,
        )
        yield json.dumps(doc, ensure_ascii=False)


def chat_records(run: RunEpisodes) -> Iterator[str]:
    """Each episode of ``run`` as the chat-format line ``textgym collect`` writes (a collect
    file's lines as they are).

    Raises:
        SetupError: a line of the run's file that is not an episode record.
    """
    from textgym.collect import sft_record
    from textgym.rollout import Trajectory

    fields = set(Trajectory.__dataclass_fields__)
    for _, record in run.records():
        if run.kind == "collect":
            yield json.dumps(record, ensure_ascii=False)
            continue
        trajectory = Trajectory(**{k: v for k, v in record.items() if k in fields})
        yield json.dumps(sft_record(trajectory), ensure_ascii=False)
