"""Any text env as an OpenEnv server: an OpenEnv ``Environment`` over a ``gymnasium.Env[str,
str]``, one env per WebSocket session, served by OpenEnv's own ``HTTPEnvServer`` routes.

The wire format keeps Gymnasium's five fields apart: an observation carries ``text``,
``terminated``, ``truncated`` and ``info`` (the env's info, JSON-safe: ``reward_components``,
``invalid_action``, ``outcome``, ``tools``, ...) beside OpenEnv's ``reward`` and ``done``
(``terminated or truncated``). ``reset`` takes ``seed`` and ``options``; ``/schema`` declares
the action and observation ``text`` with the env's ``Text`` spaces' ``minLength``,
``maxLength`` and charset. The length is declared, not validated by the server: every textgym
env reads an over-long action as an invalid action (:mod:`textgym.spaces`), so a remote env
answers it as a local one does; the WebSocket message size is bounded instead.

Faults reach the client as errors, never as a reward: an env that raises, a step that runs
past ``step_timeout`` (its env is then abandoned; the next ``reset`` builds a fresh one), a
step before ``reset``, a session reaped after ``idle_timeout``. The env factory is the
caller's (the command line builds it with :mod:`textgym.builder`), so this module imports no
env.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from textgym.checks import check_seed

__all__ = [
    "EnvWorkers",
    "ServeSettings",
    "create_server_app",
    "environment_class",
    "json_safe_info",
    "ws_max_size",
]


@dataclass(frozen=True)
class ServeSettings:
    """How a server bounds its sessions.

    Args:
        max_sessions: Most live sessions (WebSocket connections, one env each); one more is
            refused at once with OpenEnv's ``CAPACITY_REACHED`` error.
        idle_timeout: Seconds without a message after which a session and its env are
            freed (OpenEnv's reaper checks every ``max(idle_timeout / 4, 5)`` seconds).
        step_timeout: Seconds one ``reset`` or ``step`` may take before the session gets an
            error (must be below ``idle_timeout``).

    Raises:
        ValueError: a value out of range.
    """

    max_sessions: int = 256
    idle_timeout: float = 600.0
    step_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not (isinstance(self.max_sessions, int) and self.max_sessions >= 1):
            raise ValueError(f"Expected max_sessions >= 1, got {self.max_sessions!r}")
        for name in ("idle_timeout", "step_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"Expected {name} a finite number of seconds > 0, got {value}")
        if self.step_timeout >= self.idle_timeout:
            raise ValueError(
                f"Expected step_timeout ({self.step_timeout} s) below idle_timeout "
                f"({self.idle_timeout} s): a session must not be reaped in the middle of a step"
            )


class EnvWorkers:
    """The threads that run every session's env calls (``reset``, ``step``, ``close``): a few
    shared threads, each call on whichever is free (a session has one call at a time, so its
    env is never entered twice at once).

    Why not a thread per session (as before): every call then woke its own thread. In one
    exploratory run (served TicTacToe-v0 at 256 sessions, 2 AMD EPYC cores, one 4 s window per
    variant, not repeated, asyncio's shared default executor standing in for this class) a
    thread per session gave 2,520 steps/s and a shared pool 3,315. Why not asyncio's default
    executor: a call past its
    deadline would hold one of its threads for good. Here such a call is abandoned with its
    thread, which is retired (it exits if the call ever returns) while a fresh one takes its
    place, so a hung env holds one thread and never delays the other sessions.

    Args:
        size: Threads serving calls (retired ones aside), >= 1.
    """

    def __init__(self, size: int = min(32, (os.cpu_count() or 1) + 4)) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[concurrent.futures.Future, threading.Thread] = {}
        self._retired: set[threading.Thread] = set()
        for _ in range(size):
            self._start()

    def _start(self) -> None:
        threading.Thread(target=self._work, name="textgym-env", daemon=True).start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            future, func = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue  # its caller gave up before it started
            with self._lock:
                self._running[future] = me
            try:
                result = func()
            except BaseException as exc:  # the caller's to raise, in its session
                future.set_exception(exc)
            else:
                future.set_result(result)
            with self._lock:
                self._running.pop(future, None)
                if me in self._retired:  # abandoned while it ran: a fresh thread replaced it
                    self._retired.discard(me)
                    return

    def submit(self, func: Callable[[], Any]) -> concurrent.futures.Future:
        """Run ``func`` on a free thread; its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, func))
        return future

    async def call(self, func: Callable[[], Any], timeout: float) -> Any:
        """``func()`` on a free thread, awaited for at most ``timeout`` seconds.

        Raises:
            asyncio.TimeoutError: past ``timeout`` (the call is abandoned with its thread);
                whatever ``func`` raised.
        """
        future = self.submit(func)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            self.abandon(future)
            raise

    def abandon(self, future: concurrent.futures.Future) -> None:
        """Give up on ``future``: cancelled if it has not started, else its thread is retired
        and a fresh one started."""
        if future.cancel():
            return
        with self._lock:
            thread = self._running.get(future)
            if thread is None:  # it finished meanwhile
                return
            self._retired.add(thread)
        self._start()


def json_safe_info(value: Any, path: str = "info") -> Any:
    """``value`` as JSON values: NumPy scalars and arrays as Python numbers and lists, tuples
    and sets as lists, mapping keys as ``str``.

    Raises:
        TypeError: naming the key whose value JSON cannot carry (an env bug, never dropped).
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): json_safe_info(v, f"{path}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe_info(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return sorted(json_safe_info(v, path) for v in value)
    raise TypeError(f"{path} holds a {type(value).__name__}, which JSON cannot carry")


def _models(action_space: gym.spaces.Text, observation_space: gym.spaces.Text) -> tuple[type, type]:
    """The OpenEnv action and observation models, their ``text`` declared by the spaces."""
    from openenv.core.env_server.types import Action, Observation
    from pydantic import Field, create_model

    def text_field(space: gym.spaces.Text, what: str, default: Any = ...) -> Any:
        extra = {"maxLength": space.max_length, "minLength": space.min_length}
        if type(space) is gym.spaces.Text:  # a plain Text space: its charset is the rule
            extra["charset"] = "".join(sorted(space.character_set))
        else:
            extra["charset"] = "any Unicode character (textgym.spaces.UnicodeText)"
        return (str, Field(default, description=what, json_schema_extra=extra))

    action = create_model(
        "TextgymAction",
        __base__=Action,
        text=text_field(action_space, "The agent's whole completion"),
    )
    observation = create_model(
        "TextgymObservation",
        __base__=Observation,
        text=text_field(observation_space, "The env's message", ""),
        terminated=(bool, Field(False, description="The task is over")),
        truncated=(bool, Field(False, description="The time limit was reached")),
        info=(dict[str, Any], Field(default_factory=dict, description="The env's info")),
    )
    return action, observation


class _Session:
    """The methods of :func:`environment_class`'s OpenEnv ``Environment``: one session's env,
    built on its first ``reset`` on a shared env thread. Written without OpenEnv (the optional
    ``serve`` extra): its types are imported where they are used."""

    def __init__(self, make_env, observation_cls, env_id, step_timeout, workers, about):
        from openenv.core.env_server.types import State

        super().__init__()
        self._about = about
        self._make_env, self._obs_cls = make_env, observation_cls
        self._env_id, self._timeout = env_id, step_timeout
        self._workers: EnvWorkers = workers
        self._env: gym.Env | None = None
        self._live = False  # an episode was reset and has not ended
        self._closed = False
        self._state = State()

    # -- the calls, each on a shared env thread, bounded by step_timeout ---------------
    async def _call(self, func: Callable[[], Any], what: str) -> Any:
        if self._closed:
            raise RuntimeError(
                "this session was closed (idle past --idle-timeout, or shut down); "
                "reconnect to start a new one"
            )
        try:
            return await self._workers.call(func, self._timeout)
        except asyncio.TimeoutError:
            self._env, self._live = None, False  # left to its retired thread
            raise TimeoutError(
                f"{what} ran past the step timeout of {self._timeout:g} s; this session's "
                "env was abandoned, and the next reset builds a fresh one"
            ) from None

    def _observation(self, text, reward, terminated, truncated, info) -> Any:
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"the env returned a non-finite reward {reward}")
        return self._obs_cls(
            text=text,
            reward=reward,
            terminated=bool(terminated),
            truncated=bool(truncated),
            done=bool(terminated or truncated),
            info=json_safe_info(info),
        )

    async def reset_async(self, seed=None, episode_id=None, options=None, **kwargs):
        from openenv.core.env_server.types import State

        if kwargs:
            raise ValueError(
                f"unknown reset arguments {sorted(kwargs)[:5]}; expected seed and options"
            )
        if seed is not None:
            seed = check_seed("seed", seed)
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"Expected options to be a JSON object, got {type(options).__name__}")

        def run() -> Any:
            if self._env is None:
                self._env = self._make_env()
            return self._env.reset(seed=seed, options=options)

        self._live = False
        text, info = await self._call(run, "reset")
        self._live = True
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observation(text, 0.0, False, False, info)

    async def step_async(self, action, timeout_s=None, **kwargs):
        from fastapi import HTTPException

        if not self._live and not self._closed:
            raise HTTPException(
                409,
                "step before reset: reset this session first (over HTTP, /step has no "
                "session; play episodes over the /ws WebSocket)",
            )
        env, text = self._env, action.text
        result = await self._call(lambda: env.step(text), "step")
        self._state.step_count += 1
        obs = self._observation(*result)
        self._live = not obs.done
        return obs

    def reset(self, seed=None, episode_id=None, **kwargs):  # OpenEnv calls the async ones
        raise NotImplementedError("use reset_async")

    def step(self, action, timeout_s=None, **kwargs):
        raise NotImplementedError("use step_async")

    @property
    def state(self) -> Any:
        return self._state

    def get_metadata(self) -> Any:
        from openenv.core.env_server.types import EnvironmentMetadata

        return EnvironmentMetadata(name=self._env_id, description=self._about, version="textgym")

    def close(self) -> None:
        self._closed = True
        env, self._env, self._live = self._env, None, False
        if env is not None:  # on an env thread, after any call of this session still queued
            self._workers.submit(env.close)


def environment_class() -> type:
    """The OpenEnv ``Environment`` subclass over a text env (built on call: OpenEnv is the
    optional ``serve`` extra); its methods are :class:`_Session`'s."""
    from openenv.core.env_server.interfaces import Environment

    class TextgymEnvironment(_Session, Environment):
        """One session's env, built on its first ``reset`` on a shared env thread."""

        SUPPORTS_CONCURRENT_SESSIONS = True

    return TextgymEnvironment


def create_server_app(
    make_env: Callable[[], gym.Env],
    probe: gym.Env,
    env_id: str,
    settings: ServeSettings,
    recipe: Mapping[str, Any] | None = None,
    card: Mapping[str, Any] | None = None,
) -> Any:
    """A FastAPI app serving ``make_env``'s envs with OpenEnv's ``HTTPEnvServer`` routes.

    Routes: OpenEnv's (``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``,
    ``/metadata``, ``/mcp``), with ``/health`` answering ``{"status": "healthy",
    "active_sessions": n, "max_sessions": m}``, ``/recipe`` (what the env was built from,
    which a client compares with its own) and ``/card`` (the env's quality card).

    Args:
        make_env: Builds one env per session (called on an env thread, at its first reset).
        probe: One env of the factory, whose spaces declare the schema (not kept).
        env_id: The env's id, the server's ``/metadata`` name.
        settings: Session bounds.
        recipe: JSON-safe description of the build (``env_id``, ``env_kwargs``,
            ``wrappers``, ``max_episode_steps``) for ``/recipe``.
        card: The env's quality card (:func:`textgym.card.env_card`) for ``/card``; its
            status goes into ``/metadata``'s description. ``None``: ``/card`` answers 404.

    Raises:
        ValueError: a space that is not ``gymnasium.spaces.Text``.
    """
    from fastapi import FastAPI, HTTPException
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.types import ConcurrencyConfig

    for name in ("action_space", "observation_space"):
        if not isinstance(getattr(probe, name), gym.spaces.Text):
            raise ValueError(f"Expected {env_id}'s {name} to be a gymnasium.spaces.Text")
    action_cls, obs_cls = _models(probe.action_space, probe.observation_space)
    env_cls = environment_class()
    workers = EnvWorkers()
    about = f"textgym env {env_id} served through OpenEnv"
    if card is not None:
        failed = ", ".join(card.get("failed", [])) or "none"
        about += f"; quality card (textgym check) at /card: {card.get('status')}, failed: {failed}"
    factory = functools.partial(
        env_cls, make_env, obs_cls, env_id, settings.step_timeout, workers, about
    )
    server = HTTPEnvServer(
        factory,
        action_cls,
        obs_cls,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=settings.max_sessions, session_timeout=settings.idle_timeout
        ),
        env_name=env_id.replace("/", "_"),
    )
    app = FastAPI(title=f"textgym {env_id} (OpenEnv)")
    built = dict(recipe or {"env_id": env_id})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "healthy",
            "active_sessions": server.active_sessions,
            "max_sessions": server.max_concurrent_envs,
        }

    @app.get("/recipe")
    async def recipe_route() -> dict[str, Any]:
        return built

    @app.get("/card")
    async def card_route() -> dict[str, Any]:
        if card is None:
            raise HTTPException(404, "this server was started without its card (--no-card)")
        return dict(card)

    server.register_routes(app)  # after ours: the first route of a path answers
    app.state.openenv_server = server
    return app


def ws_max_size(action_space: gym.spaces.Text) -> int:
    """Bytes a WebSocket message may have: the longest action JSON-escaped (12 bytes a
    character at worst) plus 64 KiB for the envelope and reset options, at least 1 MiB."""
    return max(1 << 20, 12 * int(action_space.max_length) + (64 << 10))
