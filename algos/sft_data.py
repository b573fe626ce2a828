"""The data of ``textgym sft``: chat records read and checked (:func:`read_conversations`) and
one conversation's token ids with its loss mask (:func:`conversation_tokens`; a file's:
:func:`tokenize_conversations`).

A conversation's token sequence is built turn by turn exactly as a token-in / token-out rollout
would (:class:`textgym.tokens.ChatTokenizer`: an assistant turn is its content followed by the
end-of-turn token); only the assistant tokens carry loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textgym.data import DataFileError, read_jsonl
from textgym.errors import SetupError
from textgym.progress import EpisodeProgress
from textgym.tokens import ChatTokenizer
from textgym.toolformat import from_chat_messages

__all__ = [
    "ROLES",
    "conversation_tokens",
    "covering_conversations",
    "read_conversations",
    "tokenize_conversations",
]

#: Message roles an SFT record may hold (the chat roles textgym's envs and policies produce).
ROLES = ("system", "user", "assistant", "tool")


def covering_conversations(conversations: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The covering subset of :func:`textgym.collect.covering_records` (every prompt kept,
    the fewest conversations by greedy set cover), in the original order."""
    from textgym.collect import covering_records

    kept = covering_records([{"messages": messages} for messages in conversations])
    return [record["messages"] for record in kept]


def read_conversations(path: str | Path) -> list[list[dict[str, Any]]]:
    """The ``messages`` of every record of an SFT JSONL file, checked before any model loads.

    Each record must hold ``messages``: a list of objects with ``role`` one of :data:`ROLES`
    and ``content`` a string (``tool_calls`` and other keys are allowed), with a system or user
    message before the first assistant message, and at least one assistant message. A record of
    a tool env in the structured form (assistant ``tool_calls``, ``tool`` messages; what
    ``textgym collect`` writes for tool envs) is turned back into the text form the env parses
    (:func:`textgym.toolformat.from_chat_messages`), which is what the policy learns to write.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: naming the record (1-based, blank lines not counted) and what is wrong.
    """
    conversations = []
    for number, record in enumerate(read_jsonl(path), start=1):
        where = f"{path}: record {number}"
        messages = record.get("messages")
        if not isinstance(messages, list) or not messages:
            raise DataFileError(f"{where}: expected a non-empty 'messages' list")
        if any(
            isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool")
            for m in messages
        ):
            try:
                messages = from_chat_messages(messages)
            except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
                raise DataFileError(
                    f"{where}: the structured tool calls do not read: {exc}"
                ) from None
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise DataFileError(
                    f"{where}: message {i} is {type(message).__name__}, not an object"
                )
            if message.get("role") not in ROLES:
                raise DataFileError(
                    f"{where}: message {i} has role {message.get('role')!r}; expected one of "
                    f"{', '.join(ROLES)}"
                )
            if not isinstance(message.get("content"), str):
                raise DataFileError(
                    f"{where}: message {i} ({message['role']}) has content "
                    f"{message.get('content')!r}; expected a string"
                )
        roles = [m["role"] for m in messages]
        if "assistant" not in roles:
            raise DataFileError(f"{where}: no assistant message, so nothing to learn")
        if roles.index("assistant") == 0:
            raise DataFileError(
                f"{where}: the first message is the assistant's; expected a prompt first"
            )
        conversations.append(messages)
    if not conversations:
        raise DataFileError(f"{path}: expected at least one record, got none")
    return conversations


def conversation_tokens(
    chat: ChatTokenizer, messages: list[dict[str, Any]]
) -> tuple[list[int], list[int]]:
    """Token ids ``[L]`` and loss mask ``[L]`` of one conversation, assistant tokens masked in.

    Messages after the last assistant turn carry no loss and are dropped.

    Raises:
        ValueError: no assistant message, or one before any user/system message.
    """
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 1:
        raise ValueError("Expected a conversation with a prompt and at least one assistant message")
    ids: list[int] = []
    mask: list[int] = []
    previous, previous_ids = -1, []
    for i in [i for i, m in enumerate(messages[: last + 1]) if m.get("role") == "assistant"]:
        if previous < 0:
            piece = chat.prompt(messages[:i])
        else:
            piece = chat.continuation(messages[:previous], previous_ids, messages[previous + 1 : i])
        previous, previous_ids = i, chat.assistant_ids(messages[i].get("content") or "")
        ids += piece + previous_ids
        mask += [0] * len(piece) + [1] * len(previous_ids)
    return ids, mask


def tokenize_conversations(
    chat: ChatTokenizer,
    conversations: list[list[dict[str, Any]]],
    source: str,
    *,
    max_length: int,
    progress: bool = True,
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Tokenized ``(ids, mask)`` of every conversation (read from the file ``source``), and how
    many were too long to keep (progress shown as for played episodes when it takes over a
    second and ``progress``).

    Raises:
        SetupError: no conversation fits ``max_length``.
    """
    sequences, dropped = [], 0
    with EpisodeProgress(
        f"sft: tokenizing {source}", len(conversations), enabled=progress
    ) as progress:
        for messages in conversations:
            ids, mask = conversation_tokens(chat, messages)
            progress.episode_done()
            if len(ids) > max_length:
                dropped += 1
                continue
            sequences.append((ids, mask))
    if not sequences:
        raise SetupError(
            f"No conversation of {source} fits max_length={max_length} ({dropped} dropped)"
        )
    return sequences, dropped
