"""The episodes :mod:`textgym.env_checker` plays: which action each step takes
(:class:`EpisodeDriver`), the hostile actions no env may fail on (:func:`hostile_actions`) and
a second env built like the first (:func:`twin_env`).

Actions are chosen, per step and with a generator seeded by the episode's seed, among the env's
random action (what ``--policy random`` plays: :class:`textgym.policies.RandomPolicy`), its
gold completion when it gives one, and the actions the caller passes.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import numpy as np

from textgym.core import TextEnv, as_text_env

__all__ = ["HOSTILE_ACTIONS", "EpisodeDriver", "hostile_actions", "twin_env"]

#: The hostile-action corpus, by name: actions no env may raise on, whose reward must stay
#: finite (and inside ``reward_range`` where the env declares one). ``digits``: Python's
#: ``int()`` refuses more than 4,300; ``binary``: every byte value read as Latin-1, NUL and
#: control characters included; ``format only``: the answer tags of textgym's tasks with
#: nothing in them. :func:`hostile_actions` adds, per env, ``huge`` (one character over the
#: action space's ``max_length``) and ``template only`` (its ``action_template`` filled with
#: nothing).
HOSTILE_ACTIONS: Mapping[str, str] = MappingProxyType(
    {
        "empty": "",
        "lone surrogate": "\ud800",
        "chat token": "<|im_end|>",
        "digits": "9" * 5000,
        "binary": bytes(range(256)).decode("latin-1"),
        "unparsable": '{{[<tool_call>{"name": "x", "arguments": {</tool_call>]]<move>4',
        "format only": "<think></think><move></move><answer></answer><guess></guess>"
        "<reversed_text></reversed_text><tool_call></tool_call>#### \\boxed{}",
    }
)


class EpisodeDriver:
    """Chooses each step's action: the env's random action, its gold completion, or one of
    the given actions, with generators seeded by the episode's seed.

    :attr:`env_actions` keeps each random and gold action it chose (the actions the env itself
    proposed), for the check that they lie in the action space.
    """

    def __init__(self, base: TextEnv, actions: Sequence[str]):
        self.base, self.actions = base, list(actions)
        self.env_actions: list[str] = []

    def episode(self, env: gym.Env, seed: int) -> list[tuple[Any, ...]]:
        """``[(obs, info), (obs, reward, terminated, truncated, info), ...]`` of one episode."""
        obs, info = env.reset(seed=seed)
        return [(obs, info), *self.play_on(env, obs, info, seed)]

    def lockstep(self, envs: Sequence[gym.Env], seed: int) -> list[list[tuple[Any, ...]]]:
        """One episode per env, all reset with ``seed`` and stepped side by side with the
        actions chosen from the first env's observations; stops where any two differ."""
        starts = [env.reset(seed=seed) for env in envs]
        records = [[start] for start in starts]
        if all(start == starts[0] for start in starts):
            for steps in self._steps(envs, *starts[0], seed):
                for record, step in zip(records, steps):
                    record.append(step)
                if any(step != steps[0] for step in steps):
                    break
        return records

    def play_on(
        self, env: gym.Env, obs: str, info: Mapping[str, Any], seed: int, limit: int = 30
    ) -> list[tuple[Any, ...]]:
        """The steps from ``(obs, info)`` to the episode's end (at most ``limit``)."""
        return [steps[0] for steps in self._steps([env], obs, info, seed, limit)]

    def _steps(
        self, envs: Sequence[gym.Env], obs: str, info: Mapping[str, Any], seed: int, limit: int = 30
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Each step of ``envs`` given one action, chosen from the first env's observations."""
        from textgym.policies import RandomPolicy

        rng = np.random.default_rng(seed)
        random = RandomPolicy(seed, sample_action=self.base.random_action)
        tools = info.get("tools")
        for _ in range(limit):
            action = self._choose(obs, info, tools, rng, random)
            steps = [env.step(action) for env in envs]
            yield steps
            obs, _, terminated, truncated, info = steps[0]
            if terminated or truncated:
                break

    def _choose(
        self,
        obs: str,
        info: Mapping[str, Any],
        tools: Any,
        rng: np.random.Generator,
        random: Any,
    ) -> str:
        candidates = list(self.actions)
        proposed = []
        acting = dict(info) if "tools" in info or not tools else {**info, "tools": tools}
        if self.base.random_action is not None or "legal_moves" in acting or acting.get("tools"):
            conversation = [{"role": "user", "content": obs}]
            proposed.append(random.act([conversation], [acting])[0].text)
        if isinstance(info.get("gold_completion"), str):
            proposed.append(info["gold_completion"])
        candidates += proposed
        if not candidates:
            candidates = ["", "hello"]
        index = int(rng.integers(len(candidates)))
        if index >= len(self.actions) and proposed:
            self.env_actions.append(candidates[index])
        return candidates[index]


def twin_env(env: gym.Env | str) -> gym.Env:
    """A second env built like ``env``: from its id or spec, else a pickled copy."""
    if isinstance(env, str):
        return as_text_env(gym.make(env), env)
    if env.spec is not None:
        return as_text_env(gym.make(env.spec))
    return pickle.loads(pickle.dumps(env))


def hostile_actions(base: TextEnv) -> dict[str, str]:
    """:data:`HOSTILE_ACTIONS` and, for ``base``, ``huge`` (one character over its action
    space's ``max_length``) and ``template only`` (its ``action_template`` filled with
    nothing, where it has one)."""
    actions = {**HOSTILE_ACTIONS, "huge": "x" * (base.action_space.max_length + 1)}
    if base.action_template is not None:
        actions["template only"] = base.action_template.format("")
    return actions
