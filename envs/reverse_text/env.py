"""``textgym/ReverseText-v0``: reverse a paragraph character by character."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textgym.core import TextEnv
from textgym.data import (
    file_fingerprint,
    load_hub_rows,
    read_jsonl,
    read_paragraphs,
    select_task,
)
from textgym.envs.reverse_text.parsing import (
    CLOSE_TAG,
    OPEN_TAG,
    extract_reversed_text,
    is_well_formed,
)
from textgym.envs.reverse_text.rewards import format_reward, lcs_similarity, reverse
from textgym.spaces import TOO_LONG, UnicodeText, too_long_message

__all__ = ["CORPUS_PATH", "Passage", "ReverseTextEnv", "load_passages"]

#: The bundled default corpus: paragraphs written for textgym, separated by blank lines.
CORPUS_PATH = Path(__file__).with_name("corpus.txt")

SYSTEM_PROMPT = f"""You reverse text exactly, character by character: the last character of the \
text comes first and the first comes last. Keep every character, including spaces, punctuation \
and capital letters, and add none. Write the reversed text inside {OPEN_TAG} and {CLOSE_TAG} \
tags, with nothing else inside the tags."""

INSTRUCTION = (
    f"Reverse the following text character by character and answer inside {OPEN_TAG}{CLOSE_TAG}:"
)


@dataclass(frozen=True)
class Passage:
    """One text to reverse, with its id."""

    task_id: str
    text: str


def _clean(ids_and_texts: Sequence[tuple[str, Any]], where: str) -> list[Passage]:
    passages = []
    for i, (task_id, text) in enumerate(ids_and_texts):
        if not isinstance(text, str):
            raise ValueError(f"{where}, item {i}: expected a str text, got {type(text).__name__}")
        passages.append(Passage(task_id, text.strip()))
    return passages


def _from_rows(
    rows: list[dict[str, Any]], text_field: str, id_field: str, prefix: str, where: str
) -> list[Passage]:
    pairs = []
    for i, row in enumerate(rows):
        if text_field not in row:
            raise ValueError(
                f"{where}, row {i}: expected a {text_field!r} field (text_field=...), "
                f"got keys {sorted(row)}"
            )
        task_id = row.get(id_field)
        pairs.append((f"{prefix}-{i:05d}" if task_id is None else str(task_id), row[text_field]))
    return _clean(pairs, where)


@functools.lru_cache(maxsize=16)
def _load_file(
    path: str, _mtime_ns: int, _size: int, text_field: str, id_field: str
) -> tuple[Passage, ...]:
    stem = Path(path).stem
    if path.endswith(".jsonl"):
        return tuple(_from_rows(read_jsonl(path), text_field, id_field, stem, path))
    paragraphs = read_paragraphs(path)
    return tuple(_clean([(f"{stem}-{i:05d}", t) for i, t in enumerate(paragraphs)], path))


@functools.lru_cache(maxsize=4)
def _load_hub(
    name: str, config: str | None, split: str, text_field: str, id_field: str
) -> tuple[Passage, ...]:
    prefix = f"{name.replace('/', '-')}-{split}"
    where = f"Hugging Face dataset {name!r} ({config}, {split})"
    rows = load_hub_rows(name, config, split)
    return tuple(_from_rows(rows, text_field, id_field, prefix, where))


def load_passages(
    texts: Sequence[str] | None = None,
    data_path: str | os.PathLike[str] | None = None,
    dataset: str | None = None,
    dataset_config: str | None = None,
    dataset_split: str = "train",
    text_field: str = "text",
    id_field: str = "id",
    min_chars: int = 1,
    max_chars: int | None = None,
) -> tuple[Passage, ...]:
    """Load, strip and length-filter the texts of a :class:`ReverseTextEnv` (see its Arguments).

    File and hub loads are cached per process (a file is re-read when it changes).

    Raises:
        ValueError: for more than one source, bad length bounds, a malformed row, or when no
            text is left after filtering.
        FileNotFoundError: if ``data_path`` does not exist.
        ImportError: if ``dataset`` is given and ``datasets`` is not installed.
    """
    sources = (("texts", texts), ("data_path", data_path), ("dataset", dataset))
    given = [name for name, value in sources if value is not None]
    if len(given) > 1:
        raise ValueError(
            f"Expected at most one text source, got {' and '.join(given)}; pass only one"
        )
    for name, value in (("min_chars", min_chars), ("max_chars", max_chars)):
        if value is None and name == "max_chars":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Expected {name} to be an int >= 1, got {value!r}")
    if max_chars is not None and max_chars < min_chars:
        raise ValueError(f"Expected min_chars <= max_chars, got {min_chars} > {max_chars}")

    if texts is not None:
        if isinstance(texts, str):
            raise ValueError(
                "Expected texts to be a list of strings, got one str; wrap it in a list"
            )
        numbered = [(f"text-{i:05d}", t) for i, t in enumerate(texts)]
        passages: Sequence[Passage] = _clean(numbered, "texts")
        source = "texts"
    elif data_path is not None:
        passages = _load_file(*file_fingerprint(data_path), text_field, id_field)
        source = str(data_path)
    elif dataset is not None:
        passages = _load_hub(dataset, dataset_config, dataset_split, text_field, id_field)
        source = f"dataset {dataset!r}"
    else:
        passages = _load_file(*file_fingerprint(CORPUS_PATH), text_field, id_field)
        source = "the bundled corpus"
    upper = math.inf if max_chars is None else max_chars
    kept = tuple(p for p in passages if min_chars <= len(p.text) <= upper)
    if not kept:
        raise ValueError(
            f"No text from {source} ({len(passages)} before filtering) has between {min_chars} and "
            f"{max_chars} characters; widen min_chars/max_chars"
        )
    return kept


class ReverseTextEnv(TextEnv):
    """Reverse a paragraph character by character; reward by longest-common-subsequence similarity.

    Description:
        The agent sees one paragraph and must write it backwards, last character first, inside
        ``<reversed_text>...</reversed_text>``. The task tests exact character-level control,
        which tokenisation makes hard for LLMs, and its reward is dense: a near miss earns
        nearly full reward. Texts come from the bundled corpus (paragraphs written for
        textgym), a list of strings, a local JSONL or text file, or a Hugging Face dataset.

    Action Space:
        ``UnicodeText(max(65536, 2 * n + 64))``, ``n`` the longest text: the agent's whole
        completion. The answer is the content of the last ``<reversed_text>...</reversed_text>``
        pair, stripped of surrounding whitespace. Any ``str`` is accepted by ``step``; one longer
        than the space's ``max_length`` is an invalid answer (``"too_long"``, reward 0) and is
        not read at all, the rule every textgym env follows (:mod:`textgym.spaces`).

    Observation Space:
        ``UnicodeText(max(2048, len(instruction) + 2 + n))``. At reset: one line of instruction,
        a blank line, then the text. After the step: one line with the score (or why the answer
        scores 0).

    Starting State:
        A text drawn uniformly from the loaded texts with ``np_random``, or the one named by
        ``reset(options={"task_index": i})`` (0-based, after length filtering) or
        ``options={"task_id": ...}`` (the first text with that id). ``env.task_ids`` lists the
        ids in index order.

    Rewards:
        ``reward = lcs + format``, both paid on the single step:

        - ``lcs``: ``LCS(answer, target) / max(len(answer), len(target))``, where ``target`` is
          the text reversed code point by code point and ``LCS`` the length of their longest
          common subsequence (computed exactly by ``rapidfuzz``). It lies in [0, 1] and is
          exactly 1.0 if and only if the answer is the exact reversal; it is 0.0 without a tag
          pair (the answer is then empty).
        - ``format``: ``format_weight`` (default 0.1) if the completion has exactly one
          well-formed tag pair, else 0.0.

        So the reward lies in ``[0, 1 + format_weight]``: 1.1 for an exact, well-formed answer
        by default.

    Episode End:
        Every step terminates (``terminated=True``): the task has a single turn, and a
        completion without a readable tag pair is graded 0 (``invalid_action`` True) rather
        than retried. The id is registered without a step limit, since no episode can last
        longer; ``truncated`` is always False. ``step`` after the answer raises
        ``RuntimeError`` until ``reset``.

    Information:
        ``reward_components`` values are the terms of the step reward and sum to it.

        - ``system_prompt`` [reset]: the task and the answer format, for the system message.
        - ``tools`` [reset]: always ``[]``; the task has no tools.
        - ``task_id`` [reset, step]: the text's id: the ``id_field`` of a JSONL row or hub row
          when present, else ``"{file stem}-{row:05d}"`` for a file (``"corpus-00042"`` for
          the bundled corpus), ``"text-{i:05d}"`` for ``texts``, and
          ``"{dataset}-{split}-{row:05d}"`` for a hub dataset.
        - ``n_chars`` [reset, step]: length of the text in characters (code points).
        - ``gold_completion`` [reset]: ``<reversed_text>{the exact reversal}</reversed_text>``;
          what :class:`textgym.policies.GoldPolicy` answers.
        - ``answer_chars`` [step]: length of the parsed answer, or ``None`` without a tag pair
          (or when the completion was too long to read).
        - ``exact`` [step]: whether the answer is the exact reversal.
        - ``well_formed`` [step]: whether the completion has exactly one well-formed tag pair.
        - ``invalid_action`` [step]: ``True`` if no tag pair was found or the completion was too
          long (reward 0).
        - ``invalid_reason`` [step]: ``None``, ``"too_long"`` (over the action space's
          ``max_length``; not read) or ``"no_answer_tag"``.
        - ``reward_components`` [step]: ``{"lcs": float, "format": float}``, already weighted.

    Arguments:
        Text source, at most one of (none: the bundled corpus of 229 paragraphs, 57-558
        characters, written for textgym):

        - ``texts``: a list of strings.
        - ``data_path``: a ``.jsonl`` file (one object per line, the text in ``text_field``, the
          id in ``id_field`` when present) or any other UTF-8 text file, read as paragraphs
          separated by blank lines (lines of a paragraph are joined with single spaces).
        - ``dataset``: a Hugging Face dataset name, loaded with ``datasets`` (``pip install
          "textgym[data]"``) with ``dataset_config`` (default ``None``) and ``dataset_split``
          (default ``"train"``); the text in ``text_field``.

        Other arguments:

        - ``text_field``: default ``"text"``; ``id_field``: default ``"id"``.
        - ``min_chars``, ``max_chars``: keep texts whose length in characters lies in
          ``[min_chars, max_chars]``; defaults 1 and ``None`` (no upper bound). Texts are
          stripped of surrounding whitespace first.
        - ``format_weight``: weight of the ``format`` component, a finite float >= 0, default 0.1.

        Example: ``gym.make("textgym/ReverseText-v0", data_path="paras.jsonl", max_chars=300)``.

    Raises:
        ValueError: from ``__init__`` for an argument outside the values above, or when no text
            is left; from ``reset`` for unknown options or an unknown task.
        FileNotFoundError: from ``__init__`` if ``data_path`` does not exist.
        ImportError: from ``__init__`` if ``dataset`` is given and ``datasets`` is missing.
        TypeError: from ``step`` if the action is not a ``str``.
        RuntimeError: from ``step`` before the first ``reset``.

    Version History:
        - v0: initial release; an action over the action space's length is an invalid answer
          (``"too_long"``), not parsed (issue 15).
    """

    def __init__(
        self,
        texts: Sequence[str] | None = None,
        data_path: str | None = None,
        dataset: str | None = None,
        dataset_config: str | None = None,
        dataset_split: str = "train",
        text_field: str = "text",
        id_field: str = "id",
        min_chars: int = 1,
        max_chars: int | None = None,
        format_weight: float = 0.1,
        render_mode: str | None = None,
    ):
        if (
            isinstance(format_weight, bool)
            or not isinstance(format_weight, (int, float))
            or not math.isfinite(format_weight)
            or format_weight < 0
        ):
            raise ValueError(
                f"Expected format_weight to be a finite float >= 0, got {format_weight!r}"
            )
        self._init_render(render_mode)
        self.format_weight = float(format_weight)
        self.passages = load_passages(
            texts,
            data_path,
            dataset,
            dataset_config,
            dataset_split,
            text_field,
            id_field,
            min_chars,
            max_chars,
        )
        self._task_ids = tuple(p.task_id for p in self.passages)
        self._index_of: dict[str, int] = {}
        for i, task_id in enumerate(self._task_ids):
            self._index_of.setdefault(task_id, i)
        longest = max(len(p.text) for p in self.passages)
        self.observation_space = UnicodeText(max(2048, len(INSTRUCTION) + 2 + longest))
        self.action_space = UnicodeText(max(65536, 2 * longest + 64))
        self._passage: Passage | None = None
        self._target = ""

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The loaded texts' ids in order: ``reset(options={"task_index": i})`` plays
        ``task_ids[i]`` (``textgym eval`` walks them)."""
        return self._task_ids

    @staticmethod
    def is_well_formed(action: str) -> bool:
        """Format check (one tag pair), for :class:`textgym.wrappers.FormatReward`."""
        return is_well_formed(action)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = select_task(options, self._task_ids, self._index_of, self.np_random)
        passage = self._passage = self.passages[index]
        self._target = reverse(passage.text)
        obs = f"{INSTRUCTION}\n\n{passage.text}"
        info = {
            "system_prompt": SYSTEM_PROMPT,
            "tools": [],
            "task_id": passage.task_id,
            "n_chars": len(passage.text),
            "gold_completion": f"{OPEN_TAG}{self._target}{CLOSE_TAG}",
        }
        self._emit(obs)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_action(action)
        passage = self._passage
        if passage is None:
            raise RuntimeError(
                "No open episode (single turn: it ends at the answer); call reset() before step()"
            )
        too_long = too_long_message(action, self.action_space)
        if too_long is not None:  # not parsed at all
            answer, similarity, formatted = None, 0.0, 0.0
        else:
            answer = extract_reversed_text(action)
            similarity = lcs_similarity("" if answer is None else answer, self._target)
            formatted = format_reward(action)
        components = {"lcs": similarity, "format": self.format_weight * formatted}
        reward = components["lcs"] + components["format"]
        exact = answer == self._target
        reason: str | None = None
        if too_long is not None:
            reason, obs = TOO_LONG, f"{too_long} It scores 0."
        elif answer is None:
            reason = "no_answer_tag"
            obs = f"No {OPEN_TAG}...{CLOSE_TAG} pair was found, so the answer scores 0."
        elif exact:
            obs = "Exact reversal."
        else:
            obs = (
                f"Similarity {similarity:.3f}: your answer has {len(answer)} characters, "
                f"the exact reversal {len(self._target)}."
            )
        info = {
            "task_id": passage.task_id,
            "n_chars": len(passage.text),
            "answer_chars": None if answer is None else len(answer),
            "exact": exact,
            "well_formed": formatted == 1.0,
            "invalid_action": reason is not None,
            "invalid_reason": reason,
            "reward_components": components,
        }
        self._passage = None  # single turn: the episode is over
        self._emit(obs)
        return obs, reward, True, False, info
