"""A served env as a ``gymnasium.Env[str, str]``: :class:`RemoteTextEnv` plays one OpenEnv
session (``textgym serve``) through OpenEnv's own ``EnvClient``, so the rollout loop, GRPO
groups and the evaluation see it as a local env: ``reset(seed=, options=)`` and ``step``
return the env's text, reward, ``terminated``, ``truncated`` and info, and the spaces come from
the server's ``/schema``.

Every server error (an env that raised, a step past the server's step timeout, a refused
session, a server that went away) raises :class:`RemoteEnvError`, one line, never a reward.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import threading
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from textgym.checks import check_urls
from textgym.errors import MissingExtraError, SetupError, TextgymError
from textgym.spaces import UnicodeText

__all__ = [
    "RemoteEnvError",
    "RemoteTextEnv",
    "remote_env_factory",
    "served_env_factory",
    "text_client_class",
]


class RemoteEnvError(TextgymError):
    """A served env failed, refused the session or could not be reached. Exit status 1."""


@functools.cache
def text_client_class() -> type:
    """OpenEnv's ``EnvClient`` for a ``textgym serve`` server: the action sent as ``{"text":
    action}``, each step's payload kept whole (observation dict, reward). One class for every
    client (the import of ``openenv`` deferred to the first call: the ``serve`` extra).

    Raises:
        MissingExtraError: ``openenv`` is not installed (``pip install -e ".[serve]"``).
    """
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
    except ImportError as exc:
        raise MissingExtraError(
            f'--env-url and RemoteTextEnv need OpenEnv ({exc}); pip install -e ".[serve]"'
        ) from None

    class TextEnvClient(EnvClient):
        def _step_payload(self, action: str) -> dict[str, Any]:
            return {"text": action}

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            return StepResult(payload.get("observation", {}), payload.get("reward"))

        def _parse_state(self, payload: dict[str, Any]) -> Any:
            return payload

    return TextEnvClient


def _get_json(url: str, timeout: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - http(s) only
            return json.loads(reply.read(1 << 20))
    except (OSError, ValueError) as exc:
        raise RemoteEnvError(f"cannot read {url}: {exc}") from None


def _space(schema: dict[str, Any]) -> gym.spaces.Text:
    text = schema["properties"]["text"]
    return UnicodeText(max_length=int(text["maxLength"]), min_length=int(text["minLength"]))


class RemoteTextEnv(gym.Env[str, str]):
    """One session of a served env.

    Args:
        url: The server's base URL, ``http://HOST:PORT`` (or ``ws://``).
        message_timeout_s: Seconds to wait for one reply (above the server's step timeout).

    Raises:
        RemoteEnvError: the server's ``/schema`` or ``/recipe`` cannot be read.
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, *, message_timeout_s: float = 120.0):
        self.url = url.rstrip("/").replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        schema = _get_json(f"{self.url}/schema", 10)
        self.recipe = _get_json(f"{self.url}/recipe", 10)
        self.action_space = _space(schema["action"])
        self.observation_space = _space(schema["observation"])
        env_id = self.recipe.get("env_id", "remote")
        self.spec = gym.envs.registration.EnvSpec(
            id=env_id,
            entry_point="textgym.serving.client:RemoteTextEnv",
            max_episode_steps=self.recipe.get("max_episode_steps"),
            kwargs={"url": self.url},
        )

        client = text_client_class()(base_url=self.url, message_timeout_s=message_timeout_s)
        self._client = client.sync()

    def _call(self, func: Callable[[], Any], what: str) -> dict[str, Any]:
        try:
            result = func()
        except Exception as exc:  # the client's RuntimeError, ConnectionError, ConnectionClosed
            text = " ".join(str(exc).split())[:500] or type(exc).__name__
            raise RemoteEnvError(f"{what} on the env server {self.url} failed: {text}") from None
        obs = result.observation
        if not isinstance(obs.get("text"), str) or not isinstance(result.reward, (int, float)):
            raise RemoteEnvError(f"{what}: {self.url} answered no observation text or reward")
        return {**obs, "reward": float(result.reward)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The served env's ``reset(seed=seed, options=options)``."""
        super().reset(seed=seed)
        obs = self._call(lambda: self._client.reset(seed=seed, options=options), "reset")
        return obs["text"], obs.get("info", {})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The served env's ``step(action)``."""
        obs = self._call(lambda: self._client.step(action), "step")
        return obs["text"], obs["reward"], obs["terminated"], obs["truncated"], obs.get("info", {})

    def close(self) -> None:
        """Close the session (the server frees its env)."""
        with contextlib.suppress(Exception):  # a server already gone has nothing left to free
            self._client.close()


def remote_env_factory(urls: Sequence[str], recipe: dict[str, Any]) -> Callable[[], gym.Env]:
    """A ``make_env`` whose envs are sessions on ``urls`` in turn (round robin), each checked
    to serve ``recipe`` (``env_id``, ``env_kwargs``, ``wrappers``).

    Raises:
        SetupError: ``urls`` empty or not ``http(s)://HOST[:PORT]`` URLs.
        MissingExtraError: OpenEnv is not installed (at once, before any server is asked).
        RemoteEnvError: (when called) a server that serves another env or cannot be reached.
    """
    urls = check_urls("urls", urls)
    if not urls:
        raise SetupError("Expected one or more env server URLs in urls, got none")
    text_client_class()  # the extra is checked now, not at the first episode
    turn, lock = itertools.cycle(urls), threading.Lock()

    def make_env() -> gym.Env:
        with lock:
            url = next(turn)
        env = RemoteTextEnv(url)
        served = {k: env.recipe.get(k) for k in recipe}
        if served != recipe:
            env.close()
            raise RemoteEnvError(
                f"{url} serves {json.dumps(served)[:300]}, expected {json.dumps(recipe)[:300]}; "
                "start it with the same env id, --env-kwargs and --wrappers"
            )
        return env

    return make_env


def served_env_factory(
    urls: Sequence[str],
    env_id: str,
    env_kwargs: dict[str, Any],
    wrappers: Sequence[str],
) -> Callable[[], gym.Env]:
    """:func:`remote_env_factory` for the env a command names: its id, ``--env-kwargs`` and
    ``--wrappers`` (the recipe ``textgym serve`` reports at ``/recipe``).

    Raises:
        RemoteEnvError: (when called) a server that serves another env or cannot be reached.
    """
    recipe = {
        "env_id": env_id,
        "env_kwargs": json.loads(json.dumps(env_kwargs)),  # as the server's JSON shows them
        "wrappers": list(wrappers),
    }
    return remote_env_factory(urls, recipe)
