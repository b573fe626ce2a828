"""``textgym/ReverseText-v0``: reverse a paragraph character by character."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from textgym.checks import check_int
from textgym.data import file_fingerprint, load_hub_rows, read_jsonl, read_paragraphs
from textgym.envs.reverse_text.parsing import (
    CLOSE_TAG,
    OPEN_TAG,
    extract_reversed_text,
    is_well_formed,
)
from textgym.envs.reverse_text.rewards import format_reward, lcs_similarity, reverse
from textgym.envs.single_turn import Grade, SingleTurnEnv
from textgym.errors import SetupError

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
            raise SetupError(f"{where}, item {i}: expected a str text, got {type(text).__name__}")
        passages.append(Passage(task_id, text.strip()))
    return passages


def _from_rows(
    rows: list[dict[str, Any]], text_field: str, id_field: str, prefix: str, where: str
) -> list[Passage]:
    pairs = []
    for i, row in enumerate(rows):
        if text_field not in row:
            raise SetupError(
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
        SetupError: for more than one source, bad length bounds, a malformed row, or when no
            text is left after filtering.
        FileNotFoundError: if ``data_path`` does not exist.
        ImportError: if ``dataset`` is given and ``datasets`` is not installed.
    """
    sources = (("texts", texts), ("data_path", data_path), ("dataset", dataset))
    given = [name for name, value in sources if value is not None]
    if len(given) > 1:
        raise SetupError(
            f"Expected at most one text source, got {' and '.join(given)}; pass only one"
        )
    check_int("min_chars", min_chars, low=1)
    if max_chars is not None:
        check_int("max_chars", max_chars, low=1)
    if max_chars is not None and max_chars < min_chars:
        raise SetupError(f"Expected min_chars <= max_chars, got {min_chars} > {max_chars}")

    if texts is not None:
        if isinstance(texts, str):
            raise SetupError(
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
        raise SetupError(
            f"No text from {source} ({len(passages)} before filtering) has between {min_chars} and "
            f"{max_chars} characters; widen min_chars/max_chars"
        )
    return kept


class ReverseTextEnv(SingleTurnEnv):
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
        As in every :class:`~textgym.envs.single_turn.SingleTurnEnv`, the single step terminates
        (``terminated=True``), ``truncated`` is always False (the id has no step limit) and a
        further ``step`` raises ``RuntimeError`` until ``reset``. A completion without a
        readable tag pair is graded 0 (``invalid_action`` True) rather than retried.

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
        SetupError: from ``__init__`` for an argument outside the values above, or when no text
            is left; from ``reset`` for unknown options or an unknown task.
        FileNotFoundError: from ``__init__`` if ``data_path`` does not exist.
        ImportError: from ``__init__`` if ``dataset`` is given and ``datasets`` is missing.
        TypeError: from ``step`` if the action is not a ``str``.
        RuntimeError: from ``step`` before the first ``reset``.

    Version History:
        - v0: initial release; an action over the action space's length is an invalid answer
          (``"too_long"``), not parsed.
    """

    system_prompt = SYSTEM_PROMPT
    has_gold_completion = True
    #: The step info's keys (Information above).
    info_keys = frozenset(
        {
            "task_id",
            "n_chars",
            "answer_chars",
            "exact",
            "well_formed",
            "invalid_action",
            "invalid_reason",
            "reward_components",
        }
    )
    is_well_formed = staticmethod(is_well_formed)  # one tag pair, for FormatReward

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
        longest = max(len(p.text) for p in self.passages)
        super().__init__(
            [p.task_id for p in self.passages],
            format_weight=format_weight,
            render_mode=render_mode,
            max_observation_chars=max(2048, len(INSTRUCTION) + 2 + longest),
            max_action_chars=max(65536, 2 * longest + 64),
        )

    @staticmethod
    def random_action(observation: str, info: Mapping[str, Any], rng: np.random.Generator) -> str:
        """A random baseline: the text's characters in a random order, in the answer tags
        (``--policy random``); the text is what follows the instruction in the observation."""
        text = (
            observation.split("\n\n", 1)[1] if observation.startswith(INSTRUCTION) else observation
        )
        shuffled = "".join(text[i] for i in rng.permutation(len(text)))
        return f"{OPEN_TAG}{shuffled}{CLOSE_TAG}"

    def prompt(self, index: int) -> tuple[str, dict[str, Any]]:
        """The instruction and the text; the exact reversal, tagged, goes to ``info``."""
        text = self.passages[index].text
        extra = {
            "n_chars": len(text),
            "gold_completion": f"{OPEN_TAG}{reverse(text)}{CLOSE_TAG}",
        }
        return f"{INSTRUCTION}\n\n{text}", extra

    def grade(self, index: int, action: str | None) -> Grade:
        """LCS similarity to the exact reversal, plus the format (``action`` ``None``: too long)."""
        text = self.passages[index].text
        target = reverse(text)
        if action is None:  # not read
            answer, similarity, formatted = None, 0.0, 0.0
        else:
            answer = extract_reversed_text(action)
            similarity = lcs_similarity("" if answer is None else answer, target)
            formatted = format_reward(action)
        components = {"lcs": similarity, "format": self.format_weight * formatted}
        exact = answer == target
        reason: str | None = None
        if action is None:
            obs = "It scores 0."
        elif answer is None:
            reason = "no_answer_tag"
            obs = f"No {OPEN_TAG}...{CLOSE_TAG} pair was found, so the answer scores 0."
        elif exact:
            obs = "Exact reversal."
        else:
            obs = (
                f"Similarity {similarity:.3f}: your answer has {len(answer)} characters, "
                f"the exact reversal {len(target)}."
            )
        info = {
            "n_chars": len(text),
            "answer_chars": None if answer is None else len(answer),
            "exact": exact,
            "well_formed": formatted == 1.0,
        }
        return Grade(obs, components, reason, info)
