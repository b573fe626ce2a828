"""A run stopped by SIGTERM at any phase of a step and resumed writes the same
``metrics.jsonl`` as an uninterrupted run of the same seed (issue 52 item 5): no evaluation row
missing (the signal came at an evaluation step), none there twice (it came during the final
evaluation), every training row the same numbers; timing fields aside. A loop inside a step
(dynamic sampling's rounds, an evaluation) stops at the signal or the time limit within one
round, and a resume refuses integer weights as eval does.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import textgym.algos.grpo as grpo  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.cli.outputs import DIR_LOCK  # noqa: E402

pytestmark = pytest.mark.llm

#: Three steps of the tiny model on an env whose groups always have unequal rewards (every step
#: updates the weights), an evaluation after every step, a checkpoint after every step.
STEPS = 3


def argv(env_id: str, run: Path, *extra: str) -> list[str]:
    return [
        "train", env_id, "--model", "tiny", "--device", "cpu", "--groups-per-step", "1",
        "--group-size", "2", "--rollout-batch-size", "2", "--micro-batch-size", "2",
        "--max-new-tokens", "4", "--learning-rate", "1e-3", "--eval-every", "1",
        "--eval-episodes", "1", "--steps", str(STEPS), "--save-every", "1", "--no-tensorboard",
        "--no-progress", "--output-dir", str(run), *extra,
    ]  # fmt: skip


def rows(run: Path) -> list[dict]:
    """The rows of ``metrics.jsonl`` without their timings."""
    kept = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        kept.append({k: v for k, v in row.items() if not k.endswith("_time_s")})
    return kept


@pytest.fixture
def sigterm_fails_the_test():
    def unhandled(signum, frame):
        pytest.fail("SIGTERM was not handled by textgym", pytrace=False)

    previous = signal.signal(signal.SIGTERM, unhandled)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, list[dict]]:
    """The rows of uninterrupted runs, per extra arguments (computed once each)."""
    return {}


def reference(uninterrupted, tmp_path_factory, env_id: str, extra: tuple[str, ...]):
    if extra not in uninterrupted:
        run = tmp_path_factory.mktemp("uninterrupted") / "run"
        assert main(argv(env_id, run, *extra)) == 0
        uninterrupted[extra] = rows(run)
    return uninterrupted[extra]


def sigterm_in(monkeypatch, name: str, call: int) -> list[int]:
    """Send SIGTERM to this process inside the ``call``-th call of ``grpo.<name>``."""
    real, calls = getattr(grpo, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, name, wrapped)
    return calls


#: (phase, the function of grpo the signal lands in, which call of it, extra arguments). The
#: evaluations are calls of ``evaluate``: 1 before training, 2 after step 1, ...; the final one
#: is call 4. ``_play_round`` is called once per rollout round (dynamic sampling's included).
PHASES = [
    ("rollout", "rollout_step", 2, ()),
    ("update", "update", 2, ()),
    ("checkpoint", "save_trainer_checkpoint", 2, ()),
    ("evaluation", "evaluate", 3, ()),
    ("final evaluation", "evaluate", 4, ()),
    ("evaluation before training", "evaluate", 1, ()),
    ("dynamic sampling round", "_play_round", 3, ("--dynamic-sampling-rounds", "3")),
    (
        "dynamic sampling round, not saved",
        "_play_round",
        3,
        ("--dynamic-sampling-rounds", "3", "--save-every", "0"),
    ),
]


@pytest.mark.usefixtures("sigterm_fails_the_test")
@pytest.mark.parametrize(("phase", "name", "call", "extra"), PHASES, ids=[p[0] for p in PHASES])
def test_a_resumed_run_writes_the_rows_of_an_uninterrupted_one(
    tmp_path, tmp_path_factory, monkeypatch, capsys, distinct_characters_env, uninterrupted,
    phase, name, call, extra,
):  # fmt: skip
    expected = reference(uninterrupted, tmp_path_factory, distinct_characters_env, extra)
    run = tmp_path / "run"
    calls = sigterm_in(monkeypatch, name, call)
    assert main(argv(distinct_characters_env, run, *extra)) == 143
    assert len(calls) == call  # stopped where it was: no further call
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err) and err[-1].startswith("textgym: terminated")
    assert not (run / DIR_LOCK).exists()
    monkeypatch.undo()
    assert main([*argv(distinct_characters_env, run, *extra), "--resume"]) == 0
    got = rows(run)
    assert [(r["stage"], r["step"]) for r in got] == [(r["stage"], r["step"]) for r in expected]
    assert got == expected
    assert json.loads((run / "final_eval.json").read_text()) == {
        k: v for k, v in expected[-1].items() if k not in ("step", "stage")
    }
