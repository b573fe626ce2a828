"""Runs and their files: a locked output refuses a second writer in one line naming the holder,
a non-empty output is refused without ``--overwrite`` (or ``--resume``), statistics of returns
near ``1e308`` are finite, and a NaN, infinite or out-of-range return stops a run in one line
keeping what was finished.
"""

import dataclasses
import importlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from textgym.cli import main
from textgym.cli.output_locks import lock_path
from textgym.cli.outputs import claim_dir, claim_file
from textgym.envs.gsm8k.env import GSM8KEnv
from textgym.evaluation import mean_stderr, summarize
from textgym.rollout import Trajectory

TTT = "textgym/TicTacToe-v0"
GOLD = ["textgym/GSM8K-v0", "--policy", "gold", "--no-progress", "--rollout-batch-size", "1"]


def one_error(capsys, argv, code=2):
    """Run ``textgym argv``; return its one ``textgym: error:`` line (exit ``code``)."""
    try:
        got = main(argv)
    except SystemExit as exc:
        got = exc.code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert got == code and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    return lines[0]


# ----------------------------------------------------------------------------- the lock


@pytest.mark.parametrize(
    ("argv", "flag", "directory"),
    [
        (
            ["eval", TTT, "--episodes", "2", "--no-progress", "--output-dir", "{out}"],
            "--output-dir",
            True,
        ),
        (
            ["collect", TTT, "--episodes", "2", "--no-progress", "--output", "{out}"],
            "--output",
            False,
        ),
        (
            ["collect", TTT, "--episodes", "2", "--no-progress", "--output-dir", "{out}"],
            "--output-dir",
            True,
        ),
        (
            ["sft", "--data", "{data}", "--device", "cpu", "--output-dir", "{out}"],
            "--output-dir",
            True,
        ),
        (["train", TTT, "--device", "cpu", "--output-dir", "{out}"], "--output-dir", True),
    ],
    ids=["eval", "collect", "collect-dir", "sft", "train"],
)
def test_a_held_output_is_refused_naming_its_holder(argv, flag, directory, tmp_path, capsys):
    if argv[0] in ("sft", "train"):
        pytest.importorskip("torch")
    out = tmp_path / ("run" if directory else "sft.jsonl")
    claim = (
        claim_dir(out, flag, overwrite=False)
        if directory
        else claim_file(out, flag, overwrite=False)
    )
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    argv = [a.replace("{out}", str(out)).replace("{data}", str(data)) for a in argv]
    with claim:
        line = one_error(capsys, argv)
        holder = json.loads(lock_path(out, directory=directory).read_text())
    assert f"{flag} {out} is in use by another run (pid {os.getpid()} on {holder['host']}" in line
    assert f"started {holder['started']}, command: " in line
    assert not lock_path(out, directory=directory).exists()  # removed when the run ends
    assert not out.exists() or not directory or os.listdir(out) == []


@pytest.mark.subprocess
def test_two_concurrent_evals_the_second_is_refused_and_nothing_is_corrupted(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "textgym.cli", "eval", TTT, "--no-progress"]
    argv += ["--output-dir", str(out), "--rollout-batch-size", "4"]
    first = subprocess.Popen([*argv, "--episodes", "100000"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        trajectories = out / "trajectories.jsonl"
        while not (trajectories.exists() and trajectories.stat().st_size > 0):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.1)
        second = subprocess.run(
            [*argv, "--episodes", "2"], capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith(
            f"textgym: error: --output-dir {out} is in use by another run"
        )
        assert f"pid {first.pid} on " in second.stderr and "command: " in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130 and err.startswith("textgym: interrupted after "), err
    records = [json.loads(line) for line in trajectories.read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["episodes"] == len(records) > 0
    assert os.listdir(out) == ["summary.json", "trajectories.jsonl"] or sorted(os.listdir(out)) == [
        "summary.json",
        "trajectories.jsonl",
    ]


# ----------------------------------------------------------------------------- overwrite


def test_eval_refuses_a_non_empty_output_dir_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", TTT, "--no-progress", "--output-dir", str(out)]
    assert main([*argv, "--episodes", "6"]) == 0
    capsys.readouterr()
    line = one_error(capsys, [*argv, "--episodes", "2"])
    assert line == (
        f"textgym: error: --output-dir {out} is not empty (it holds summary.json, "
        "trajectories.jsonl); pass --overwrite to replace it, or choose another --output-dir"
    )
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 6  # untouched
    assert main([*argv, "--episodes", "2", "--overwrite"]) == 0
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2
    assert json.loads((out / "summary.json").read_text())["episodes"] == 2
    assert "--overwrite needs --output-dir" in one_error(capsys, ["eval", TTT, "--overwrite"])


def test_collect_refuses_a_non_empty_output_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    argv = ["collect", TTT, "--no-progress", "--output", str(out)]
    assert main([*argv, "--episodes", "4"]) == 0
    capsys.readouterr()
    line = one_error(capsys, [*argv, "--episodes", "2"])
    assert line.startswith(f"textgym: error: --output {out} already holds 4 lines (")
    assert line.endswith("); pass --overwrite to replace it, or choose another --output")
    assert len(out.read_text().splitlines()) == 4
    assert main([*argv, "--episodes", "2", "--overwrite"]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert sorted(os.listdir(tmp_path)) == ["sft.jsonl"]  # the lock file is gone


def test_collect_into_a_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["collect", TTT, "--policy", "minimax", "--no-progress", "--output-dir", str(out)]
    assert main([*argv, "--episodes", "4"]) == 0
    assert capsys.readouterr().out.endswith(
        f"kept 4 of 4 episodes; wrote {out / 'sft_data.jsonl'} (4 whole records, valid JSONL) "
        f"and {out / 'summary.json'}\n"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes"], summary["records_kept"], summary["complete"]) == (4, 4, True)
    records = [json.loads(line) for line in (out / "sft_data.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["messages"][-1]["role"] == "assistant" for r in records)
    line = one_error(capsys, [*argv, "--episodes", "2"])
    assert line.startswith(f"textgym: error: --output-dir {out} is not empty (it holds ")
    assert main([*argv, "--episodes", "2", "--overwrite", "--filter", "outcome in loss"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes"], summary["records_kept"]) == (2, 0)  # minimax never loses
    assert (out / "sft_data.jsonl").read_text() == ""
    assert sorted(os.listdir(out)) == ["sft_data.jsonl", "summary.json"]  # the lock is gone
    both = [*argv, "--output", str(tmp_path / "x.jsonl")]
    assert "give one of them" in one_error(capsys, both)


def test_collect_says_in_one_line_when_its_summary_cannot_be_written(tmp_path, monkeypatch):
    import textgym.cli.collect as collect_cli

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(collect_cli, "write_json", full_disk)
    out = tmp_path / "run"
    argv = ["collect", TTT, "--policy", "minimax", "--episodes", "3", "--no-progress"]
    err = stderr_of_failed_run([*argv, "--output-dir", str(out)])
    assert err.count("\n") == 1 and err.startswith(f"textgym: error: cannot write {out}")
    assert "No space left on device" in err and "(3 whole records, valid JSONL)" in err
    assert len((out / "sft_data.jsonl").read_text().splitlines()) == 3


def stderr_of_failed_run(argv):
    """Run ``textgym argv`` in this process; expect exit 1 and return its stderr."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 1
    return err.getvalue()


def test_an_empty_output_needs_no_overwrite(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "sft.jsonl").touch()
    assert (
        main(
            ["eval", TTT, "--episodes", "2", "--no-progress", "--output-dir", str(tmp_path / "run")]
        )
        == 0
    )
    assert (
        main(
            [
                "collect",
                TTT,
                "--episodes",
                "2",
                "--no-progress",
                "--output",
                str(tmp_path / "sft.jsonl"),
            ]
        )
        == 0
    )


@pytest.mark.parametrize("name", ["train", "sft"])
def test_trainers_refuse_a_non_empty_output_dir(name, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")
    (out / "metrics.jsonl").write_text("")
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    argv = [name, "--device", "cpu", "--output-dir", str(out)]
    argv += ["--data", str(data)] if name == "sft" else [TTT]
    line = one_error(capsys, argv)
    config = importlib.import_module(f"textgym.cli.{name}").Config
    resumable = "resume" in {f.name for f in dataclasses.fields(config)}
    resume = "--resume to continue its run, " if resumable else ""
    assert line == (
        f"textgym: error: --output-dir {out} is not empty (it holds metrics.jsonl, run.json); "
        f"pass {resume}--overwrite to replace it, or choose another --output-dir"
    )
    if resumable:
        line = one_error(capsys, [*argv, "--resume", "--overwrite"])
        assert line.endswith("--overwrite and --resume contradict each other; give one of them")
    (out / "notes.txt").write_text("mine")
    (out / "run.json").unlink()
    line = one_error(capsys, [*argv, "--overwrite"])
    assert "holds metrics.jsonl, notes.txt, which is not a textgym run" in line
    assert (out / "notes.txt").read_text() == "mine"  # nothing deleted


# ----------------------------------------------------------------------------- devices


@pytest.mark.parametrize(
    ("device", "said"),
    [
        ("tpu", "--device 'tpu' is not a device textgym trains on"),
        ("gpu", "--device 'gpu' is not a device textgym trains on"),
        ("meta", "--device 'meta' is not a device textgym trains on"),
        ("cuda:7", "--device cuda:7: "),
        ("cuda:99999", "--device cuda:99999: "),
    ],
)
@pytest.mark.parametrize("name", ["sft", "train"])
def test_a_device_this_machine_lacks_is_one_line(name, device, said, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if device.startswith("cuda") and torch.cuda.device_count() > int(device.split(":")[1]):
        pytest.skip(f"this machine has {device}")
    argv = [name, "--device", device, "--output-dir", str(tmp_path / "run")]
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    argv += ["--data", str(data)] if name == "sft" else [TTT]
    assert said in one_error(capsys, argv)
    assert not (tmp_path / "run").exists()  # refused before anything was made


# ----------------------------------------------------------------------------- rewards


def _rewarding(monkeypatch, rewards):
    """GSM8K's gold episodes earn ``rewards[i]`` in episode ``i`` (one step each)."""
    original = GSM8KEnv.step
    calls = []

    def step(self, action):
        obs, _, terminated, truncated, info = original(self, action)
        value = rewards[len(calls) % len(rewards)]
        calls.append(value)
        info = dict(info, reward_components={"correct": value})
        return obs, value, terminated, truncated, info

    monkeypatch.setattr(GSM8KEnv, "step", step)


def test_eval_statistics_of_returns_near_the_largest_float_are_finite(tmp_path, monkeypatch):
    _rewarding(monkeypatch, [1.7e308, -1.7e308, 1.7e308, 1.7e308])
    out = tmp_path / "run"
    assert main(["eval", *GOLD, "--limit", "4", "--output-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())  # valid JSON: no Infinity
    assert summary["mean_return"] == pytest.approx(0.85e308)
    assert summary["stderr_return"] == pytest.approx(1.7e308 / 2)  # sample std 1.7e308, n = 4
    mean, stderr = mean_stderr([1.7e308, -1.7e308, 1.7e308, 1.7e308])
    assert summary["stderr_return"] == stderr and math.isfinite(stderr)
    assert summary["reward_components"]["correct"] == mean


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_eval_stops_at_a_non_finite_return_keeping_the_finished_episodes(
    bad, tmp_path, monkeypatch, capsys
):
    _rewarding(monkeypatch, [1.0, 0.0, bad, 1.0, 1.0])
    out = tmp_path / "run"
    line = one_error(capsys, ["eval", *GOLD, "--limit", "5", "--output-dir", str(out)], code=1)
    assert line.startswith(f"textgym: error: Episode return {bad} (task ")
    assert "stopped after 2 of 5 episodes" in line
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert [r["return"] for r in records] == [1.0, 0.0] and summary["episodes"] == 2
    assert summary["complete"] is False and "is not a finite number" in summary["error"]


def test_collect_stops_at_an_overflowing_return(tmp_path, monkeypatch, capsys):
    original = GSM8KEnv.step

    def step(self, action):  # two finite rewards whose sum overflows
        obs, reward, terminated, truncated, info = original(self, action)
        return obs, 1e308, terminated, truncated, info

    monkeypatch.setattr(GSM8KEnv, "step", step)
    monkeypatch.setattr(
        Trajectory, "episode_return", property(lambda t: float(sum(t.rewards + [1e308])))
    )
    out = tmp_path / "sft.jsonl"
    line = one_error(capsys, ["collect", *GOLD, "--limit", "3", "--output", str(out)], code=1)
    assert "Episode return inf" in line and "but their sum overflows a float" in line
    assert out.read_text() == "" and "stopped after 0 of 3 episodes" in line


def _train_argv(tmp_path):
    return [
        "train", "textgym/GSM8K-v0", "--model", "tiny", "--device", "cpu",
        "--steps", "1", "--groups-per-step", "1", "--group-size", "2", "--rollout-batch-size", "2",
        "--max-new-tokens", "4", "--eval-every", "0", "--eval-episodes", "1", "--no-progress",
        "--no-tensorboard", "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("rewards", "said"),
    [
        ([math.nan, 1.0], "nan"),
        ([math.inf, 1.0], "Episode return inf"),  # 1e308 trains: tests/algos/test_run_survival.py
    ],
    ids=["nan", "inf"],
)
def test_train_stops_at_a_bad_return_in_one_line(rewards, said, tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    _rewarding(monkeypatch, rewards)
    line = one_error(capsys, _train_argv(tmp_path), code=1)
    assert said in line


# ----------------------------------------------------------------------------- fuzz

FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 1e300, 5e-324]
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(FLOATS, max_size=12))
def test_mean_stderr_is_finite_and_right_or_names_the_bad_value(values):
    if not all(math.isfinite(v) for v in values):
        with pytest.raises(
            ValueError, match=r"Expected finite values, got (nan|inf|-inf) at position"
        ):
            mean_stderr(values)
        return
    mean, stderr = mean_stderr(values)
    if not values:
        assert math.isnan(mean) and math.isnan(stderr)
        return
    exact = sum(map(Fraction, values)) / len(values)
    assert math.isfinite(mean) and min(values) <= mean <= max(values)
    # Relative error 2^-50 of the largest magnitude, plus one subnormal step (5e-324): a mean
    # of subnormals is rounded to the nearest representable float.
    tolerance = Fraction(max(map(abs, values))) * Fraction(1, 2**50) + Fraction(5e-324)
    assert abs(Fraction(mean) - exact) <= tolerance
    if len(values) == 1:
        assert math.isnan(stderr)
    else:
        assert math.isfinite(stderr) and 0 <= stderr <= max(map(abs, values))


def _trajectory(value):
    return Trajectory(
        env_id="e", seed=0, task_id="t", rewards=[value], reward_components=[{"correct": value}],
        invalid_actions=[False], finish_reasons=["stop"], terminated=True,
    )  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.lists(FLOATS, min_size=1, max_size=8))
def test_summarize_never_overflows(values):
    trajectories = [_trajectory(v) for v in values]
    if not all(math.isfinite(v) for v in values):
        with pytest.raises(ValueError, match="is not a finite number"):
            summarize(trajectories)
        return
    summary = summarize(trajectories)
    assert math.isfinite(summary["mean_return"])
    assert summary["reward_components"]["correct"] == summary["mean_return"]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.lists(FLOATS, min_size=g, max_size=3 * g).map(lambda v: v[: len(v) - len(v) % g]),
        )
    ),
    st.sampled_from(["group", "batch", "none"]),
)
# Found by hypothesis in a full run: the float mean drops the small rewards.
@example((4, [1.0, 3.0, 1.7976931348623157e308, -1.7976931348623157e308]), "none")
def test_group_advantages_never_overflow(case, scale):
    torch = pytest.importorskip("torch")
    from textgym.algos.advantages import group_advantages, zero_variance_groups

    group_size, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    if not all(math.isfinite(v) for v in values):
        for call in (
            lambda: group_advantages(rewards, group_size, scale),
            lambda: zero_variance_groups(rewards, group_size),
        ):
            with pytest.raises(
                ValueError, match=r"Expected finite rewards, got (nan|inf|-inf) at row"
            ):
                call()
        return
    try:
        advantages = group_advantages(rewards, group_size, scale)
    except ValueError as exc:  # only scale="none" may overflow, and says so
        assert scale == "none" and "overflows" in str(exc)
        return
    flat = zero_variance_groups(rewards, group_size)
    assert torch.isfinite(advantages).all()
    for g, is_flat in enumerate(flat.tolist()):
        group = values[g * group_size : (g + 1) * group_size]
        assert is_flat == (len(set(group)) == 1)
        adv = advantages[g * group_size : (g + 1) * group_size].tolist()
        if is_flat:
            assert adv == [0.0] * group_size
            continue
        mean = sum(map(Fraction, group)) / group_size
        # The sign of r - mean is kept, up to rounding: the float mean of a group spanning the
        # whole exponent range loses its small rewards (mean(1, 3, 1.8e308, -1.8e308) is 0, not
        # 1), an error in reward units of the group's largest reward times machine epsilon,
        # which scale="none" returns unscaled.
        tolerance = 1e-6 * (max(map(abs, group)) if scale == "none" else 1.0)
        for value, a in zip(group, adv):
            assert (a > 0) == (Fraction(value) > mean) or abs(a) <= tolerance
        if scale == "group":  # A = (r - mean) / (std + eps): sum of squares G (std/(std+eps))^2
            top = max(map(abs, group))  # > 0: the group is not flat
            centred = [float((Fraction(v) - mean) / Fraction(top)) for v in group]  # scaled
            std = math.sqrt(math.fsum(c * c for c in centred) / group_size)  # in units of top
            expected = group_size * (std / (std + 1e-4 / top)) ** 2
            assert (
                sum(a * a for a in adv) == pytest.approx(expected, rel=1e-3, abs=1e-3)
                or max(map(abs, group)) < 1e-2
            )


def test_rewards_1e300_and_1e308_are_not_a_flat_group():
    torch = pytest.importorskip("torch")
    from textgym.algos.advantages import group_advantages, zero_variance_groups

    rewards = torch.tensor([1e300, 1e308], dtype=torch.float64)
    assert zero_variance_groups(rewards, 2).tolist() == [False]
    assert group_advantages(rewards, 2).tolist() == pytest.approx([-1.0, 1.0])
    with pytest.raises(ValueError, match="got inf at row 0 of 2 \\(torch.float32"):
        group_advantages(rewards.float(), 2)
