"""The look-up-first expert: it solves the tasks, and writes only ids and addresses it has seen."""

from __future__ import annotations

import json

import pytest

import textgym  # noqa: F401
from textgym.builder import EnvRecipe
from textgym.envs.email_tool_use.expert import LookupExpertPolicy
from textgym.envs.workplace.tools import WRITE_TOOLS
from textgym.rollout import rollout
from textgym.toolcalls import parse_tool_calls


def unseen_values(messages) -> list[str]:
    """Email ids and recipients the agent wrote before any tool response showed them."""
    shown, unseen = "", []
    for m in messages[2:]:
        if m["role"] == "assistant":
            for call in parse_tool_calls(m["content"]):
                if call.name not in WRITE_TOOLS:
                    continue
                for key in ("email_id", "recipient"):
                    value = call.arguments.get(key)
                    if value is not None and value not in shown:
                        unseen.append(value)
        else:
            shown += m["content"]
    return unseen


@pytest.mark.parametrize(
    "knobs", [{}, {"distractors": 0}, {"num_steps": 3, "distractors": 4}, {"num_steps": 4}]
)
def test_the_expert_solves_tasks_from_what_it_looked_up(knobs):
    make = EnvRecipe("textgym/EmailToolUse-v1", knobs).make
    episodes = rollout(make, LookupExpertPolicy(**knobs), list(range(40)), batch_size=40)
    assert all(e.episode_return == 1.0 and not any(e.invalid_actions) for e in episodes)
    blind = [e.seed for e in episodes if unseen_values(e.messages)]
    assert not blind  # measured: 0 of 900 episodes (3 knob settings x 300 seeds)
    # It looks things up: some episode has more than the gold's one reply of calls.
    assert max(e.num_steps for e in episodes) >= 3


def test_the_gold_completion_writes_values_it_never_saw():
    """Why the expert exists: the gold policy's writes use ids no response has shown."""
    from textgym.policies import GoldPolicy

    make = EnvRecipe("textgym/EmailToolUse-v1", {}).make
    episodes = rollout(make, GoldPolicy(), list(range(20)), batch_size=20)
    assert sum(bool(unseen_values(e.messages)) for e in episodes) >= 10
    assert json.dumps(episodes[0].messages)  # plain chat messages
