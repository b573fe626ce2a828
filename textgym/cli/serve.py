"""``textgym serve``: serve the env ENV_ID through OpenEnv (the ``serve`` extra).

The env is built as every subcommand builds it (:func:`textgym.cli.building.build_env`: id,
``--env-kwargs``, ``--wrappers``), checked once, then served by
:func:`textgym.serving.openenv_server.create_server_app` with uvicorn: one env per WebSocket
session at ``ws://HOST:PORT/ws``, ``/health`` counting live sessions, ``/schema`` from the
env's ``Text`` spaces. Before serving it computes the env's quality card
(:func:`textgym.card.env_card` of the id and ``--env-kwargs``: ``textgym check``) and publishes
it at ``/card``, its status in ``/metadata``'s description (``--no-card`` skips it).
"""

from __future__ import annotations

import dataclasses
import json

from textgym.cli._options import EnvOptions
from textgym.cli.building import build_env
from textgym.errors import UsageError

__all__ = ["ServeConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class ServeConfig(EnvOptions):
    """Serve an env through OpenEnv: one env per WebSocket session."""

    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0 for every interface: the server has no authentication)."""
    port: int = 8000
    """Port to listen on."""
    max_sessions: int = 256
    """Most live sessions; one more is refused at once with a CAPACITY_REACHED error."""
    idle_timeout: float = 600.0
    """Seconds without a message after which a session and its env are freed."""
    step_timeout: float = 60.0
    """Seconds one reset or step may take; past it that session gets an error (below
    --idle-timeout)."""
    card: bool = True
    """Compute the env's quality card (textgym check) before serving and publish it at
    /card (a few seconds at start)."""

    def __post_init__(self) -> None:
        self.check_env()
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--port must be in [1, 65535], got {self.port}")

    def settings(self):  # -> ServeSettings
        """The session bounds, checked.

        Raises:
            UsageError: a bound out of range (naming the option).
        """
        from textgym.serving.openenv_server import ServeSettings

        try:
            return ServeSettings(self.max_sessions, self.idle_timeout, self.step_timeout)
        except ValueError as exc:
            raise UsageError(f"--max-sessions/--idle-timeout/--step-timeout: {exc}") from None


Config = ServeConfig


def run(config: ServeConfig) -> int:
    """Build the env once (the check), then serve until interrupted."""
    try:
        import uvicorn

        from textgym.serving.openenv_server import create_server_app, ws_max_size
    except ImportError as exc:
        raise UsageError(
            f"textgym serve needs OpenEnv: pip install -e '.[serve]' ({exc})"
        ) from None
    settings = config.settings()
    make_env, probe = build_env(config.env_id, config.env_kwargs, config.wrappers)
    try:
        spec = probe.spec
        recipe = {
            "env_id": config.env_id,
            "env_kwargs": json.loads(json.dumps(config.env_kwargs)),
            "wrappers": list(config.wrappers),
            "max_episode_steps": spec.max_episode_steps if spec is not None else None,
        }
        card = None
        if config.card:
            from textgym.card import env_card

            card = env_card(config.env_id, config.env_kwargs)
        app = create_server_app(make_env, probe, config.env_id, settings, recipe, card)
        max_size = ws_max_size(probe.action_space)
    finally:
        probe.close()
    print(
        f"serving {config.env_id} at ws://{config.host}:{config.port}/ws "
        f"(max {settings.max_sessions} sessions; Ctrl-C stops)",
        flush=True,
    )
    uvicorn.run(app, host=config.host, port=config.port, ws_max_size=max_size, log_level="warning")
    return 0
