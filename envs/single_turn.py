"""``SingleTurnEnv``: the base of single-turn dataset tasks (one item, one answer, one grade).

``textgym/GSM8K-v0`` and ``textgym/ReverseText-v0`` are built on it, and so can a user's own
task: a list of items with ids, a prompt per item and a grader. The base does the rest, the
same way for every such task:

- **Task selection**: ``reset(options={"task_index": i})`` or ``{"task_id": ...}`` picks an
  item, else one is drawn uniformly from ``np_random`` (:func:`textgym.data.select_task`);
  :attr:`task_ids` lists the ids in index order, so an evaluation can walk every task once.
- **The format weight**: ``format_weight`` (a finite float >= 0, default 0.1) is the weight of
  the task's own ``format`` reward component, if it has one, and tells
  :class:`textgym.wrappers.FormatReward` not to pay the format a second time.
- **reset**: ``info`` holds ``system_prompt`` (the class's :attr:`system_prompt`), ``tools``
  (``[]``), ``task_id`` and what :meth:`prompt` adds.
- **step**: the action must be a ``str``; one over the action space's ``max_length`` is not
  read (:mod:`textgym.spaces`) and :meth:`grade` gets ``None`` for it; the reward is the sum
  of the grade's ``components``; every step terminates; ``info`` holds ``task_id``, what the
  grade adds, ``invalid_action``, ``invalid_reason`` and ``reward_components``. ``step`` before
  ``reset`` or after the answer raises ``RuntimeError``.

Example, a complete task:

    >>> from textgym.envs.single_turn import Grade, SingleTurnEnv
    >>> CAPITALS = {"France": "Paris", "Peru": "Lima"}
    >>> class Capital(SingleTurnEnv):
    ...     system_prompt = "Answer with the name of the city only."
    ...     has_gold_completion = True
    ...     def __init__(self, format_weight=0.0, render_mode=None):
    ...         super().__init__(list(CAPITALS), format_weight=format_weight, render_mode=render_mode)
    ...     def prompt(self, index):
    ...         country = self.task_ids[index]
    ...         return f"What is the capital of {country}?", {"gold_completion": CAPITALS[country]}
    ...     def grade(self, index, action):
    ...         right = action is not None and action.strip() == CAPITALS[self.task_ids[index]]
    ...         return Grade("Right." if right else "Wrong.", {"correct": float(right)})
    >>> env = Capital()
    >>> env.reset(options={"task_id": "Peru"})[0]
    'What is the capital of Peru?'
    >>> obs, reward, terminated, truncated, info = env.step("Lima")
    >>> obs, reward, terminated, info["reward_components"]
    ('Right.', 1.0, True, {'correct': 1.0})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from textgym.checks import check_number
from textgym.core import TextEnv
from textgym.data import select_task
from textgym.spaces import TOO_LONG, UnicodeText, too_long_message

__all__ = ["Grade", "SingleTurnEnv"]


class Grade(NamedTuple):
    """What :meth:`SingleTurnEnv.grade` returns for one answer.

    Attributes:
        observation: The feedback sentence(s) of the final observation. For an action too long
            to read, the base puts the length sentence before it.
        components: Reward components by name, already weighted; the reward is their sum.
        invalid_reason: Why the answer could not be graded (it is then an invalid action,
            ``info["invalid_action"] = True``), or ``None``. Ignored for an action too long to
            read, whose reason is always ``"too_long"``.
        info: Task-specific ``info`` keys of the step, placed after ``task_id``.
    """

    observation: str
    components: dict[str, float]
    invalid_reason: str | None = None
    info: Mapping[str, Any] = {}


class SingleTurnEnv(TextEnv):
    """Base class of single-turn dataset tasks; subclasses give items, prompts and a grader.

    Subclasses set :attr:`system_prompt`, call ``super().__init__`` with their items' ids,
    and implement :meth:`prompt` and :meth:`grade` (see the module's example).

    Args:
        task_ids: The items' ids, in index order. An id given twice names its first item.
        format_weight: Weight of the task's ``format`` reward component, a finite float >= 0.
            Default 0.1. Stored as :attr:`format_weight`; the subclass applies it in
            :meth:`grade`.
        render_mode: ``None``, ``"ansi"`` or ``"human"``.
        max_observation_chars: ``max_length`` of the observation space. Default 2048.
        max_action_chars: ``max_length`` of the action space. Default 65,536.

    Raises:
        ValueError: for no items, a bad ``format_weight`` or ``render_mode``.
    """

    #: The system prompt of every episode (``info["system_prompt"]`` at reset).
    system_prompt: str = ""

    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        format_weight: float = 0.1,
        render_mode: str | None = None,
        max_observation_chars: int = 2048,
        max_action_chars: int = 65536,
    ):
        self.format_weight = check_number("format_weight", format_weight, low=0)
        self._init_render(render_mode)
        self._task_ids = tuple(task_ids)
        if not self._task_ids:
            raise ValueError(f"{type(self).__name__} needs at least one task, got none")
        self._index_of: dict[str, int] = {}
        for i, task_id in enumerate(self._task_ids):
            self._index_of.setdefault(task_id, i)
        self.observation_space = UnicodeText(max_observation_chars)
        self.action_space = UnicodeText(max_action_chars)
        self._index: int | None = None

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The items' ids in order: ``reset(options={"task_index": i})`` plays ``task_ids[i]``
        (``textgym eval`` walks them)."""
        return self._task_ids

    # -- what a task implements ----------------------------------------------------------
    def prompt(self, index: int) -> tuple[str, dict[str, Any]]:
        """The first observation of item ``index`` and the ``info`` keys it adds at reset
        (after ``system_prompt``, ``tools`` and ``task_id``; e.g. ``gold_completion``)."""
        raise NotImplementedError

    def grade(self, index: int, action: str | None) -> Grade:
        """Grade the answer to item ``index``.

        Args:
            index: The episode's item.
            action: The whole completion, or ``None`` when it was over the action space's
                ``max_length`` and is not read: grade it as no answer.
        """
        raise NotImplementedError

    # -- gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = select_task(options, self._task_ids, self._index_of, self.np_random)
        obs, extra = self.prompt(index)
        self._index = index
        info = {
            "system_prompt": self.system_prompt,
            "tools": [],
            "task_id": self._task_ids[index],
            **extra,
        }
        self._emit(obs)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_action(action)
        index = self._index
        if index is None:
            raise RuntimeError(
                "No open episode (single turn: it ends at the answer); call reset() before step()"
            )
        too_long = too_long_message(action, self.action_space)
        grade = self.grade(index, action if too_long is None else None)
        obs, reason = grade.observation, grade.invalid_reason
        if too_long is not None:  # not parsed at all
            obs, reason = f"{too_long} {obs}", TOO_LONG
        reward = sum(grade.components.values(), start=0.0)
        info = {
            "task_id": self._task_ids[index],
            **grade.info,
            "invalid_action": reason is not None,
            "invalid_reason": reason,
            "reward_components": grade.components,
        }
        self._index = None  # single turn: the episode is over
        self._emit(obs)
        return obs, reward, True, False, info
