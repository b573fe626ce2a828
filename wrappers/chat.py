"""``ChatMessages``: observations as the whole conversation in chat-message form."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from textgym.spaces import UnicodeText

__all__ = ["ChatMessages"]

_ROLES = spaces.Text(max_length=9, min_length=4, charset=string.ascii_lowercase)


class ChatMessages(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Turn a text env's observations into the conversation so far, as chat messages.

    Each observation is a tuple of ``{"role": ..., "content": ...}`` dicts: the system prompt
    (``info["system_prompt"]``, when the env gives one), then alternating ``user`` (the env's
    observations) and ``assistant`` (the actions sent to ``step``) messages, ending with the
    latest observation. This is the form chat templates and OpenAI-compatible endpoints take.
    Rewards, flags and ``info`` pass through unchanged. An action longer than the action
    space's ``max_length`` (which the env rejects unread) is kept as its first ``max_length``
    characters.

    Args:
        env: A text env (``str`` observations, ``str`` actions).

    Raises:
        TypeError: if the env's observation space is not a ``Text`` space.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = ChatMessages(gym.make("textgym/TicTacToe-v0"))
        >>> messages, info = env.reset(seed=0)
        >>> [m["role"] for m in messages]
        ['system', 'user']
        >>> messages, *_ = env.step("<move>4</move>")
        >>> [m["role"] for m in messages], messages[2]["content"]
        (['system', 'user', 'assistant', 'user'], '<move>4</move>')
    """

    def __init__(self, env: gym.Env[str, str]):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        inner = env.observation_space
        if not isinstance(inner, spaces.Text):
            raise TypeError(f"ChatMessages needs a Text observation space, got {inner}")
        self._max_action = env.action_space.max_length
        content = UnicodeText(max(inner.max_length, self._max_action))
        self.observation_space = spaces.Sequence(spaces.Dict({"role": _ROLES, "content": content}))
        self._messages: list[dict[str, str]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._messages = []
        if info.get("system_prompt"):
            self._messages.append({"role": "system", "content": info["system_prompt"]})
        self._messages.append({"role": "user", "content": obs})
        return tuple(dict(m) for m in self._messages), info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        # An action over the action space's max_length is rejected unread by the env (invalid
        # reason "too_long"); the conversation keeps its first max_length characters, so every
        # observation stays in the declared space.
        self._messages.append({"role": "assistant", "content": action[: self._max_action]})
        self._messages.append({"role": "user", "content": obs})
        return tuple(dict(m) for m in self._messages), reward, terminated, truncated, info

    def observation(self, observation: str) -> tuple[dict[str, str], ...]:
        """Unused: ``reset`` and ``step`` build the conversation themselves."""
        return tuple(dict(m) for m in self._messages)
