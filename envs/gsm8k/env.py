"""``textgym/GSM8K-v0``: grade-school math word problems, graded on the final number."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from textgym.checks import check_choice
from textgym.data import file_fingerprint, load_hub_rows, read_jsonl
from textgym.envs.gsm8k.parsing import (
    extract_final_answer,
    format_number,
    parse_final_answer,
    parse_number,
)
from textgym.envs.gsm8k.rewards import correct_reward, format_reward
from textgym.envs.single_turn import Grade, SingleTurnEnv
from textgym.errors import SetupError

__all__ = [
    "HUB_DATASET",
    "PATH_ENV_VAR",
    "SAMPLE_PATH",
    "GSM8KEnv",
    "GSM8KProblem",
    "load_problems",
]

#: The Hugging Face dataset of GSM8K (Cobbe et al., 2021), config ``main``.
HUB_DATASET = "openai/gsm8k"
#: Environment variable naming a local copy of GSM8K, used for ``dataset="openai/gsm8k"``.
PATH_ENV_VAR = "TEXTGYM_GSM8K_PATH"
#: The bundled smoke-test set: 18 problems written for textgym in GSM8K's format.
SAMPLE_PATH = Path(__file__).with_name("sample.jsonl")

SPLITS = ("train", "test")

SYSTEM_PROMPT = """Solve the grade-school math word problem. Reason step by step, then give the \
final answer as a number on the last line, after four hash signs, like this:
#### 42
(\\boxed{42} is accepted too.)"""

_EXCERPT_CHARS = 60


@dataclass(frozen=True)
class GSM8KProblem:
    """One problem: its id, the question, the dataset's worked solution and its final answer."""

    task_id: str
    question: str
    solution: str
    answer: Fraction


def _problems_from_rows(
    rows: list[dict[str, Any]], prefix: str, where: str
) -> tuple[GSM8KProblem, ...]:
    problems = []
    for i, row in enumerate(rows):
        question, solution = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not isinstance(solution, str):
            raise SetupError(
                f"{where}, row {i}: expected string fields 'question' and 'answer' "
                "(GSM8K's format), "
                f"got keys {sorted(row)}"
            )
        answer_text = extract_final_answer(solution)
        answer = None if answer_text is None else parse_number(answer_text)
        if answer is None:
            raise SetupError(
                f"{where}, row {i}: expected the 'answer' field to end in '#### N' with a number N, "
                f"got {solution[-_EXCERPT_CHARS:]!r}"
            )
        problems.append(GSM8KProblem(f"{prefix}-{i:05d}", question, solution, answer))
    if not problems:
        raise SetupError(f"{where} holds no problems")
    return tuple(problems)


@functools.lru_cache(maxsize=16)
def _load_local(path: str, _mtime_ns: int, _size: int, prefix: str) -> tuple[GSM8KProblem, ...]:
    return _problems_from_rows(read_jsonl(path), prefix, path)


@functools.lru_cache(maxsize=4)
def _load_hub(name: str, config: str | None, split: str) -> tuple[GSM8KProblem, ...]:
    where = f"Hugging Face dataset {name!r} ({config}, {split})"
    return _problems_from_rows(load_hub_rows(name, config, split), f"gsm8k-{split}", where)


def _local_file(path: str | os.PathLike[str], split: str) -> Path:
    path = Path(path).expanduser()
    return path / f"{split}.jsonl" if path.is_dir() else path


def load_problems(
    split: str = "test",
    data_path: str | os.PathLike[str] | None = None,
    dataset: str = "sample",
    dataset_config: str | None = "main",
) -> tuple[GSM8KProblem, ...]:
    """Load GSM8K problems; the env's loader (see :class:`GSM8KEnv`, Arguments, for the order).

    Loads are cached per process (a file is re-read when its size or mtime changes).

    Raises:
        SetupError: for a split other than ``"train"``/``"test"`` or a malformed row.
        FileNotFoundError: if a local path does not exist.
        ImportError: if a hub dataset is needed and ``datasets`` is not installed.
    """
    check_choice("split", split, SPLITS)
    if data_path is None and dataset == HUB_DATASET and os.environ.get(PATH_ENV_VAR):
        data_path = os.environ[PATH_ENV_VAR]
    if data_path is not None:
        return _load_local(*file_fingerprint(_local_file(data_path, split)), f"gsm8k-{split}")
    if dataset == "sample":
        return _load_local(*file_fingerprint(SAMPLE_PATH), "gsm8k-sample")
    if not isinstance(dataset, str) or not dataset:
        raise SetupError(
            f"Expected dataset to be 'sample' or a Hugging Face dataset name, got {dataset!r}"
        )
    return _load_hub(dataset, dataset_config, split)


class GSM8KEnv(SingleTurnEnv):
    """Grade-school math word problems (GSM8K), one problem per episode, graded on the final number.

    Description:
        GSM8K (Cobbe et al., 2021, "Training Verifiers to Solve Math Word Problems") has 7,473
        train and 1,319 test problems, each with a worked solution ending in ``#### N``. The
        agent reads one problem, reasons, and gives its final answer after ``####`` (or in
        ``\\boxed{}``). The answer is compared with the dataset's final answer as an exact
        number; model text is parsed, never evaluated.

    Action Space:
        ``UnicodeText(65536)``: the agent's whole completion. The final answer is the rest of
        the line after the last ``####``, or the content of the last ``\\boxed{...}``,
        whichever comes later. It is normalised by
        :func:`textgym.envs.gsm8k.parsing.parse_number`: thousands separators, currency and
        percent signs, a trailing period and surrounding words are dropped, and exactly one
        number must remain (``"$1,450,000."`` is 1450000, ``"18.0"`` is 18). Any ``str`` is
        accepted by ``step``; one longer than 65,536 characters is an invalid answer
        (``"too_long"``, reward 0) and is not read at all, the rule every textgym env follows
        (:mod:`textgym.spaces`).

    Observation Space:
        ``UnicodeText(n)``, ``n`` = the longest question of the loaded problems, at least 2048.
        At reset: the question, unchanged. After the step: one line saying whether the answer
        was right and giving the expected answer.

    Starting State:
        A problem drawn uniformly from the loaded split with ``np_random``, or the one named by
        ``reset(options={"task_index": i})`` (0-based, in file order) or
        ``options={"task_id": "gsm8k-test-00042"}``. ``env.task_ids`` lists the ids in that
        order.

    Rewards:
        ``reward = correct + format``, both paid on the single step:

        - ``correct``: 1.0 if the parsed final answer equals the gold answer exactly (so
          ``18.0`` equals ``18``), else 0.0.
        - ``format``: ``format_weight`` (default 0.1) if a final answer was found and reads as
          a number, else 0.0.

        So the reward lies in ``[0, 1 + format_weight]``: 1.1 for a right answer in the right
        format by default.

    Episode End:
        As in every :class:`~textgym.envs.single_turn.SingleTurnEnv`, the single step terminates
        (``terminated=True``), ``truncated`` is always False (the id has no step limit) and a
        further ``step`` raises ``RuntimeError`` until ``reset``. A completion without a
        readable final number is graded 0 (``invalid_action`` True) rather than retried.

    Information:
        ``reward_components`` values are the terms of the step reward and sum to it.

        - ``system_prompt`` [reset]: the task and the answer format, for the system message.
        - ``tools`` [reset]: always ``[]``; the task has no tools.
        - ``task_id`` [reset, step]: ``"gsm8k-{split}-{index:05d}"``, or
          ``"gsm8k-sample-{index:05d}"`` for the bundled sample set.
        - ``gold_answer`` [reset, step]: the dataset's final answer, normalised (``"1450000"``).
        - ``gold_completion`` [reset]: the dataset's worked solution, calculator annotations
          ``<<...>>`` included, ending in ``#### N``; what :class:`textgym.policies.GoldPolicy`
          answers.
        - ``answer`` [step]: the parsed final answer, normalised like ``gold_answer``, or ``None``.
        - ``correct`` [step]: whether ``answer`` equals ``gold_answer``.
        - ``invalid_action`` [step]: ``True`` if no final number could be read, or the
          completion was too long to read (reward 0).
        - ``invalid_reason`` [step]: ``None``, ``"too_long"`` (over the action space's
          ``max_length``; not read), ``"no_final_answer"`` (no ``####`` line and no
          ``\\boxed{}``) or ``"not_a_number"``.
        - ``reward_components`` [step]: ``{"correct": float, "format": float}``, already weighted.

    Arguments:
        - ``split``: ``"test"`` (default) or ``"train"``.
        - ``data_path``: a local JSONL file in GSM8K's original format (``question``, and
          ``answer`` ending in ``#### N``), or a folder holding ``train.jsonl`` and
          ``test.jsonl``. Takes precedence over ``dataset``.
        - ``dataset``: ``"sample"`` (default, and the registered default) is the bundled
          smoke-test set of 18 problems written for textgym in GSM8K's format, the same for
          both splits, so that the env works offline; it is *not* GSM8K. ``"openai/gsm8k"``
          is the real dataset: read from the local copy named by the environment variable
          ``TEXTGYM_GSM8K_PATH`` (a file or folder, as ``data_path``) when it is set, else
          loaded from the Hugging Face hub with ``datasets`` (``pip install "textgym[data]"``),
          which fails with the library's own error when the hub cannot be reached. Any other
          name is loaded from the hub the same way.
        - ``dataset_config``: the hub dataset's config, default ``"main"``.
        - ``format_weight``: weight of the ``format`` component, a finite float >= 0, default 0.1.

        Examples: ``gym.make("textgym/GSM8K-v0", split="train", data_path="data/gsm8k")``,
        ``gym.make("textgym/GSM8K-v0", dataset="openai/gsm8k")``.

    Raises:
        SetupError: from ``__init__`` for an argument outside the values above or a malformed
            row; from ``reset`` for unknown options or an unknown task.
        FileNotFoundError: from ``__init__`` if the local data file does not exist.
        ImportError: from ``__init__`` if a hub dataset is needed and ``datasets`` is missing.
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
            "answer",
            "gold_answer",
            "correct",
            "invalid_action",
            "invalid_reason",
            "reward_components",
        }
    )

    def __init__(
        self,
        split: str = "test",
        data_path: str | None = None,
        dataset: str = "sample",
        dataset_config: str | None = "main",
        format_weight: float = 0.1,
        render_mode: str | None = None,
    ):
        self.split = split
        self.problems = load_problems(split, data_path, dataset, dataset_config)
        super().__init__(
            [p.task_id for p in self.problems],
            format_weight=format_weight,
            render_mode=render_mode,
            max_observation_chars=max(2048, max(len(p.question) for p in self.problems)),
        )

    @staticmethod
    def random_action(observation: str, info: Mapping[str, Any], rng: np.random.Generator) -> str:
        """A random baseline: ``#### N``, ``N`` an integer uniform in [0, 999] (``--policy
        random``; most GSM8K answers are integers in that range)."""
        return f"#### {int(rng.integers(1000))}"

    @staticmethod
    def is_well_formed(action: str) -> bool:
        """Format check (a final answer that reads as a number), for ``FormatReward``."""
        return parse_final_answer(action) is not None

    def prompt(self, index: int) -> tuple[str, dict[str, Any]]:
        """The question, unchanged; the gold answer and the worked solution go to ``info``."""
        problem = self.problems[index]
        extra = {
            "gold_answer": format_number(problem.answer),
            "gold_completion": problem.solution,
        }
        return problem.question, extra

    def grade(self, index: int, action: str | None) -> Grade:
        """Compare the final number with the gold answer (``action`` ``None``: too long)."""
        problem = self.problems[index]
        answer_text = None if action is None else extract_final_answer(action)
        answer = None if answer_text is None else parse_number(answer_text)
        components = {
            "correct": correct_reward(answer, problem.answer),
            "format": self.format_weight * format_reward(answer),
        }
        gold = format_number(problem.answer)
        reason: str | None = None
        if action is None:
            obs = f"The expected answer is {gold}."
        elif answer_text is None:
            reason = "no_final_answer"
            obs = (
                f"No final answer was found: end with a line '#### N' (or \\boxed{{N}}). "
                f"The expected answer is {gold}."
            )
        elif answer is None:
            reason = "not_a_number"
            obs = (
                f"The final answer {answer_text[:_EXCERPT_CHARS]!r} is not a single number. "
                f"The expected answer is {gold}."
            )
        else:
            shown = format_number(answer)[:_EXCERPT_CHARS]
            obs = (
                f"Correct: the answer is {gold}."
                if components["correct"] == 1.0
                else f"Incorrect: you answered {shown}; the expected answer is {gold}."
            )
        info = {
            "gold_answer": gold,
            "answer": None if answer is None else format_number(answer),
            "correct": components["correct"] == 1.0,
        }
        return Grade(obs, components, reason, info)
