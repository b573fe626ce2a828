"""Every registered env, served, passes OpenEnv's own runtime validator (the checks of
``openenv validate --url`` that need no container image: OpenAPI, health, metadata, schema,
the mode's endpoints), each criterion listed on failure."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("openenv")
from openenv.cli._validation import validate_running_environment  # noqa: E402

import textgym  # noqa: E402
from textgym.serving.openenv_server import ServeSettings  # noqa: E402

from ._server import served  # noqa: E402

SETTINGS = ServeSettings(max_sessions=4, idle_timeout=30.0, step_timeout=10.0)


@pytest.mark.parametrize("env_id", list(textgym.ENV_DESCRIPTIONS))
def test_openenv_runtime_validator_passes_every_served_env(env_id: str) -> None:
    with served(lambda: gym.make(env_id), env_id, SETTINGS) as url:
        report = validate_running_environment(url, timeout_s=10.0)
    failed = [c for c in report["criteria"] if c.get("required", True) and not c["passed"]]
    assert report["passed"], failed
    assert report["summary"]["passed_count"] == report["summary"]["total_count"], report
