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
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import textgym.algos.grpo as grpo  # noqa: E402
import textgym.algos.grpo_run as grpo_run  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.cli.output_locks import DIR_LOCK  # noqa: E402

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
    """Send SIGTERM to this process inside the ``call``-th call of ``<name>`` (a name of
    ``grpo``, else of ``grpo_run``)."""
    module = grpo if hasattr(grpo, name) else grpo_run
    real, calls = getattr(module, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


#: (phase, the function of grpo or grpo_run the signal lands in, which call of it, extra arguments). The
#: evaluations are calls of ``evaluate``: 1 before training, 2 after step 1, ...; the final one
#: is call 4. ``play_round`` is called once per rollout round (dynamic sampling's included).
PHASES = [
    ("rollout", "rollout_step", 2, ()),
    ("update", "update", 2, ()),
    ("checkpoint", "save_trainer_checkpoint", 2, ()),
    ("evaluation", "evaluate", 3, ()),
    ("final evaluation", "evaluate", 4, ()),
    ("evaluation before training", "evaluate", 1, ()),
    ("dynamic sampling round", "play_round", 3, ("--dynamic-sampling-rounds", "3")),
    (
        "dynamic sampling round, not saved",
        "play_round",
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


# ------------------------------------------------------------------ loops inside a step

#: The tiny model on GSM8K never answers right: every group is flat, and dynamic sampling
#: would play its 100 extra rounds in every step.
FLAT = [
    "train", "textgym/GSM8K-v0", "--model", "tiny", "--device", "cpu", "--groups-per-step",
    "1", "--group-size", "2", "--rollout-batch-size", "2", "--micro-batch-size", "2",
    "--max-new-tokens", "4", "--eval-every", "0", "--eval-episodes", "1", "--no-tensorboard",
    "--no-progress", "--dynamic-sampling-rounds", "100",
]  # fmt: skip


def test_the_time_limit_ends_a_step_of_flat_groups_within_one_round(tmp_path, monkeypatch, capsys):
    rounds = []
    play, real = grpo.play_round, time.perf_counter
    monkeypatch.setattr(grpo, "play_round", lambda *a: rounds.append(a[2]) or play(*a))
    # An hour later once step 2 has played two rounds: the check before its third one stops the
    # step. Step 1 plays all its rounds: the first step of an invocation always completes, so a
    # resumed run with the same limit still makes progress.
    monkeypatch.setattr(time, "perf_counter", lambda: real() + 3600 * (len(rounds) >= 6))
    run = tmp_path / "run"
    argv_ = [*FLAT[:-1], "3", "--steps", "3", "--output-dir", str(run)]
    assert main([*argv_, "--time-limit-minutes", "1"]) == 0
    assert rounds == [0, 1, 2, 3, 0, 1]
    out = capsys.readouterr().out
    assert "time limit of 1.0 min reached in step 2's rollout rounds (given up); " in out
    assert [p.name for p in run.glob("checkpoint-*")] == ["checkpoint-1"]
    assert not (run / DIR_LOCK).exists()


def test_the_first_step_of_an_invocation_completes_past_the_time_limit(tmp_path):
    run = tmp_path / "run"
    argv_ = [*FLAT[:-1], "2", "--steps", "3", "--output-dir", str(run)]
    for done in (1, 2):  # each resumed invocation adds one step
        limit = ["--time-limit-minutes", "1e-9"]  # passed before the first step begins
        assert main([*argv_, *limit, *(["--resume"] if done > 1 else [])]) == 0
        assert max(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*")) == done


def test_the_time_limit_cuts_an_evaluation_short_and_the_resume_plays_it(
    tmp_path, monkeypatch, capsys
):
    """The evaluation after the last step, cut short after its first turn: no final_eval.json
    (the run is not finished), and --resume plays it once."""
    saves, turns = [], []
    save, evaluate, real = grpo_run.save_trainer_checkpoint, grpo_run.evaluate, time.perf_counter

    def counted_evaluate(*args, check=None, **kwargs):
        def counted():
            turns.append(bool(saves))
            check()

        return evaluate(*args, check=counted, **kwargs)

    monkeypatch.setattr(grpo_run, "evaluate", counted_evaluate)
    monkeypatch.setattr(
        grpo_run, "save_trainer_checkpoint", lambda *a, **k: saves.append(1) or save(*a, **k)
    )
    # An hour later once step 1 is saved: the final evaluation begins past the limit.
    monkeypatch.setattr(time, "perf_counter", lambda: real() + 3600 * bool(saves))
    run = tmp_path / "run"
    argv_ = [*FLAT[:-2], "--steps", "1", "--output-dir", str(run), "--eval-episodes", "4"]
    argv_ += ["--rollout-batch-size", "2", "--time-limit-minutes", "1"]
    assert main(argv_) == 0
    assert turns.count(True) == 1  # 4 one-turn episodes two at a time: cut after the first
    assert "reached in the evaluation after step 1; " in capsys.readouterr().out
    assert not (run / "final_eval.json").exists()
    monkeypatch.undo()
    assert main([*argv_, "--resume"]) == 0
    stages = [(r["stage"], r["step"]) for r in rows(run)]
    assert stages == [("eval", 0), ("train", 1), ("eval", 1)]
    assert (run / "final_eval.json").is_file()


# ------------------------------------------------------------------ weights that are not float


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main([*FLAT[:-2], "--steps", "1", "--output-dir", str(run)]) == 0
    return run


@pytest.mark.parametrize(
    ("dtype", "seen"),
    [("int32", "I32"), ("int64", "I64"), ("int8", "I8"), ("uint8", "U8"), ("bool", "BOOL")],
)
@pytest.mark.parametrize("tensors", ["one", "all"])
def test_resume_refuses_weights_that_are_not_floating_point(
    finished_run, tmp_path, capsys, dtype, seen, tensors
):
    """int32 weights were accepted and cast: 15 of 20 tensors came back all zero."""
    import shutil

    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    file = run / "checkpoint-1" / "model.safetensors"
    weights = load_file(str(file))
    names = sorted(weights)[:1] if tensors == "one" else sorted(weights)
    save_file(
        {k: v.to(getattr(torch, dtype)) if k in names else v for k, v in weights.items()}, str(file)
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*FLAT[:-2], "--steps", "2", "--output-dir", str(run), "--resume"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"tensor {names[0]} is {seen}, expected floating-point weights" in lines[0]
    assert str(file) in lines[0] and "resume from an earlier checkpoint" in lines[0]


# ------------------------------------------------------------------ a second signal


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "what"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_a_second_signal_ends_the_run_at_once_in_one_line(tmp_path, sig, code, what):
    """The first signal asks for a stop after the step (of several seconds: 16 episodes of 64
    tokens one at a time), the second ends the run at once."""
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    args = [a for a in FLAT[:-2] if a != "--no-progress"]
    args += ["--group-size", "16", "--max-new-tokens", "64", "--rollout-batch-size", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "textgym.cli", *args, "--steps", "5", "--output-dir", str(run)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if line.startswith("step 1/"):
                break
        process.send_signal(sig)  # in step 2
        for line in process.stderr:
            lines.append(line)
            if "stopping after this step" in line:
                break
        process.send_signal(sig)
        began = time.perf_counter()
        lines += process.stderr.readlines()
        assert process.wait(timeout=60) == code, "".join(lines)
        assert time.perf_counter() - began < 10
    finally:
        if process.poll() is None:
            process.kill()
    err = "".join(lines)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert lines[-1].strip() == (
        f"textgym: {what} again: stopped at once; the step in progress is lost, the last "
        "checkpoint is intact (continue with --resume)"
    )
    # The lock went with the process: the same directory resumes (from scratch).
    assert not list(run.glob("checkpoint-*")) and (run / DIR_LOCK).exists()
    assert main([*args, "--steps", "1", "--output-dir", str(run), "--resume", "--no-progress"]) == 0
