"""The gold policy: answers dataset tasks with the dataset's own solution.

Envs with a reference solution emit the completion to play next as ``info["gold_completion"]``:
single-turn dataset tasks at reset (:class:`textgym.envs.GSM8KEnv`,
:class:`textgym.envs.ReverseTextEnv`), multi-turn tool tasks at reset and after every step (the
gold tool calls, then a final answer; ``textgym/Workplace-v1``, ``textgym/EmailToolUse-v1``).
Playing it back measures the verifier rather than a model: ``textgym eval textgym/GSM8K-v0
--policy gold`` must score ``correct`` 1.0 on every problem, or the parser is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textgym.types import Completion, Message

__all__ = ["GOLD_INFO_KEY", "GoldPolicy"]

#: The info key dataset envs fill with the reference completion.
GOLD_INFO_KEY = "gold_completion"


class GoldPolicy:
    """Answers with ``info["gold_completion"]``, the dataset's own solution, verbatim.

    Args:
        seed: Accepted for a uniform command-line interface and ignored: the policy is
            deterministic.

    Raises:
        KeyError: from ``act`` when an info has no ``gold_completion`` string (an env that is
            without a reference solution, such as ``textgym/TicTacToe-v0``).
    """

    name = "gold"
    tokens_generated = None  # generates no model tokens

    def __init__(self, seed: int | None = None):
        self.seed = seed

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        out = []
        for info in infos:
            gold = info.get(GOLD_INFO_KEY)
            if not isinstance(gold, str):
                raise KeyError(
                    f"The gold policy needs info[{GOLD_INFO_KEY!r}], the reference completion that "
                    "envs with a reference solution emit (TextEnv.has_gold_completion); "
                    f"got info "
                    f"keys {sorted(info)}. Use a policy made for this env instead (e.g. 'minimax' for "
                    "textgym/TicTacToe-v0)."
                )
            out.append(Completion(gold))
        return out
