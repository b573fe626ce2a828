"""``textgym train --env-url``: a 2-step GRPO run of the tiny model against two served
TicTacToe-v0 servers logs the same metrics as the in-process run with the same seed (timings
and throughput aside), evaluation included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("openenv")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from textgym.algos.grpo import train  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.builder import EnvRecipe  # noqa: E402
from textgym.serving.openenv_server import ServeSettings  # noqa: E402

from ._server import served  # noqa: E402

pytestmark = pytest.mark.llm

ENV = "textgym/TicTacToe-v0"
KWARGS = {"prompt_style": "compact"}
WRAPPERS = ("invalid_action_penalty",)
RECIPE = {"env_id": ENV, "env_kwargs": KWARGS, "wrappers": list(WRAPPERS)}
SETTINGS = ServeSettings(max_sessions=16, idle_timeout=60.0, step_timeout=10.0)
#: Fields that measure the machine, not the run.
_MACHINE = ("_time_s", "per_s", "throughput")


def _config(out: Path, **overrides) -> GRPOConfig:
    settings = dict(
        model="tiny",
        output_dir=str(out),
        env_id=ENV,
        env_kwargs=KWARGS,
        wrappers=WRAPPERS,
        steps=2,
        groups_per_step=2,
        group_size=4,
        rollout_batch_size=8,
        micro_batch_size=8,
        max_new_tokens=8,
        learning_rate=1e-3,
        eval_every=2,
        eval_episodes=2,
        seed=7,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not any(m in k for m in _MACHINE)} for row in rows]


@pytest.mark.slow  # 200 s on the shared 2 cores (two tiny-model runs)
def test_grpo_over_two_servers_logs_the_in_process_metrics(tmp_path: Path) -> None:
    train(_config(tmp_path / "local"))
    make_env = EnvRecipe(ENV, KWARGS, WRAPPERS).make
    with served(make_env, ENV, SETTINGS, RECIPE) as a, served(make_env, ENV, SETTINGS, RECIPE) as b:
        train(_config(tmp_path / "remote", env_url=(a, b)))
    local, remote = _metrics(tmp_path / "local"), _metrics(tmp_path / "remote")
    assert sum("reward_mean" in row for row in local) == 2, local  # 2 steps
    assert any("random/return_mean" in row for row in local), local  # an evaluation
    assert remote == local


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"opponent_random_move_prob": (0.5, 1.0)}, "env_url: the opponent range"),
        ({"env_workers": True}, "env_url: the env servers step"),
        ({"env_url": ("localhost:8000",)}, "http\\(s\\)://HOST\\[:PORT\\] URLs"),
    ],
)
def test_env_url_refuses_what_a_served_env_cannot_do(tmp_path: Path, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **{"env_url": ("http://127.0.0.1:1",), **overrides})
