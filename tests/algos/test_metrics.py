"""Tests for textgym.algos.metrics: JSON Lines logging, TensorBoard scalars and PNG panels."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from textgym.algos.metric_plots import plot_metrics
from textgym.algos.metric_rows import METRICS_FILENAME, read_metrics
from textgym.algos.metrics import MetricsLogger
from textgym.errors import MissingExtraError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _log_rows(run_dir: Path, rows: list[tuple[int, str, dict]], **kwargs) -> Path:
    """Log ``(step, stage, metrics)`` rows with TensorBoard off; return the metrics path."""
    with MetricsLogger(run_dir, tensorboard=False, **kwargs) as logger:
        for step, stage, metrics in rows:
            logger.log(step, metrics, stage=stage)
    return run_dir / METRICS_FILENAME


# --- JSON Lines -------------------------------------------------------------------------------


def test_round_trip_keeps_values_and_writes_non_finite_as_null(tmp_path: Path) -> None:
    path = _log_rows(
        tmp_path,
        [
            (0, "train", {"reward_mean": 0.25, "n": 3, "ok": True}),
            (1, "eval", {"kl": math.nan, "up": math.inf, "down": -math.inf}),
        ],
    )
    assert read_metrics(path) == [
        {"step": 0, "stage": "train", "reward_mean": 0.25, "n": 3, "ok": True},
        {"step": 1, "stage": "eval", "kl": None, "up": None, "down": None},
    ]
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    for line in text.splitlines():  # strict JSON: the parser rejects NaN/Infinity constants
        json.loads(line, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))


def test_numpy_and_torch_scalars_become_python_numbers(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    metrics = {
        "np_float": np.float32(0.5),
        "np_int": np.int64(7),
        "np_nan": np.float64("nan"),
        "torch_float": torch.tensor(1.5),
        "torch_int": torch.tensor(4),
    }
    path = _log_rows(tmp_path, [(2, "train", metrics)])
    (row,) = read_metrics(path)
    assert row == {
        "step": 2,
        "stage": "train",
        "np_float": 0.5,
        "np_int": 7,
        "np_nan": None,
        "torch_float": 1.5,
        "torch_int": 4,
    }


def test_each_line_is_flushed_before_close(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(0, {"reward_mean": 1.0})
    assert read_metrics(tmp_path / METRICS_FILENAME) == [
        {"step": 0, "stage": "train", "reward_mean": 1.0}
    ]
    logger.close()
    logger.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(1, {"reward_mean": 1.0})


@pytest.mark.parametrize(
    ("metrics", "error", "match"),
    [
        ({"reward_mean": "high"}, TypeError, r"'reward_mean'.*str"),
        ({"reward_mean": [1.0, 2.0]}, TypeError, r"'reward_mean'.*list"),
        ({"reward_mean": None}, TypeError, r"'reward_mean'.*NoneType"),
        ({"step": 1.0}, ValueError, "'step'"),
    ],
)
def test_bad_values_raise_and_write_nothing(
    tmp_path: Path, metrics: dict, error: type[Exception], match: str
) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as logger, pytest.raises(error, match=match):
        logger.log(0, metrics)
    assert read_metrics(tmp_path / METRICS_FILENAME) == []


def test_multi_element_tensor_is_rejected(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, tensorboard=False)
    with logger, pytest.raises(TypeError, match="'loss'.*ndarray"):
        logger.log(0, {"loss": np.zeros(2)})


@pytest.mark.parametrize(("step", "error"), [(1.5, TypeError), (True, TypeError), (-1, ValueError)])
def test_bad_step_raises(tmp_path: Path, step: object, error: type[Exception]) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as logger, pytest.raises(error, match="step"):
        logger.log(step, {"kl": 0.0})  # type: ignore[arg-type]


# --- resume and truncation --------------------------------------------------------------------


def test_existing_metrics_without_resume_raise(tmp_path: Path) -> None:
    _log_rows(tmp_path, [(0, "train", {"kl": 0.1})])
    with pytest.raises(FileExistsError, match="resume=True"):
        MetricsLogger(tmp_path, tensorboard=False)


def test_empty_existing_file_needs_no_resume(tmp_path: Path) -> None:
    (tmp_path / METRICS_FILENAME).touch()
    path = _log_rows(tmp_path, [(0, "train", {"kl": 0.1})])
    assert [row["step"] for row in read_metrics(path)] == [0]


def test_resume_appends(tmp_path: Path) -> None:
    _log_rows(tmp_path, [(0, "train", {"kl": 0.1}), (1, "train", {"kl": 0.2})])
    path = _log_rows(tmp_path, [(2, "train", {"kl": 0.3})], resume=True)
    assert [(row["step"], row["kl"]) for row in read_metrics(path)] == [
        (0, 0.1),
        (1, 0.2),
        (2, 0.3),
    ]


def test_truncate_after_keeps_rows_up_to_step_then_appends(tmp_path: Path) -> None:
    _log_rows(
        tmp_path,
        [(step, stage, {"kl": step / 10}) for step in range(5) for stage in ("train", "eval")],
    )
    with MetricsLogger(tmp_path, tensorboard=False, resume=True) as logger:
        logger.truncate_after(2)
        logger.log(3, {"kl": 9.0})
    rows = read_metrics(tmp_path / METRICS_FILENAME)
    assert [(row["step"], row["stage"]) for row in rows] == [
        (0, "train"),
        (0, "eval"),
        (1, "train"),
        (1, "eval"),
        (2, "train"),
        (2, "eval"),
        (3, "train"),
    ]
    assert rows[-1]["kl"] == 9.0
    assert not list(tmp_path.glob("*.tmp"))


# --- TensorBoard ------------------------------------------------------------------------------


def _scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    """Read ``(step, value)`` pairs of ``tag`` back from TensorBoard event files."""
    accumulator_module = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    accumulator = accumulator_module.EventAccumulator(str(log_dir))
    accumulator.Reload()
    assert tag in accumulator.Tags()["scalars"], accumulator.Tags()["scalars"]
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_tensorboard_writes_finite_scalars_under_stage_tags(tmp_path: Path) -> None:
    pytest.importorskip("torch.utils.tensorboard")
    with MetricsLogger(tmp_path) as logger:
        logger.log(0, {"reward_mean": 0.5, "kl": math.nan})
        logger.log(1, {"reward_mean": 0.75, "kl": 0.01})
        logger.log(1, {"random/win_rate": 0.6}, stage="eval")
    log_dir = tmp_path / "tensorboard"
    assert list(log_dir.glob("events.out.tfevents.*"))
    assert _scalars(log_dir, "train/reward_mean") == [(0, 0.5), (1, 0.75)]
    assert [step for step, _ in _scalars(log_dir, "train/kl")] == [1]  # NaN was not sent
    assert _scalars(log_dir, "eval/random/win_rate") == [(1, pytest.approx(0.6))]


def test_tensorboard_false_creates_no_event_dir(tmp_path: Path) -> None:
    _log_rows(tmp_path, [(0, "train", {"kl": 0.1})])
    assert not (tmp_path / "tensorboard").exists()


# --- plots ------------------------------------------------------------------------------------


def _synthetic_run(run_dir: Path) -> Path:
    """Five train steps with every plotted key, an eval every other step vs two opponents."""
    rows: list[tuple[int, str, dict]] = []
    for step in range(5):
        train = {
            "reward_mean": 0.1 * step,
            "reward/outcome": 0.08 * step,
            "reward/format": 0.02 * step,
            "invalid_rate": 0.5 - 0.1 * step,
            "kl": math.nan if step == 0 else 0.01 * step,
            "entropy": 1.0 - 0.1 * step,
            "clip_fraction": 0.05,
            "step_time_s": 2.0,
            "rollout_time_s": 1.5,
            "update_time_s": 0.5,
        }
        rows.append((step, "train", train))
        if step % 2 == 0:
            for opponent in ("random", "optimal"):
                rows.append(
                    (
                        step,
                        "eval",
                        {
                            f"{opponent}/win_rate": 0.5,
                            f"{opponent}/draw_rate": 0.3,
                            f"{opponent}/loss_rate": 0.2,
                            f"{opponent}/invalid_rate": 0.1,
                        },
                    )
                )
    return _log_rows(run_dir, rows)


def _assert_pngs(paths: list[Path], out_dir: Path, expected: set[str]) -> None:
    assert {path.name for path in paths} == expected
    assert {path.name for path in out_dir.iterdir()} == expected
    for path in paths:
        assert path.parent == out_dir
        assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_metrics_writes_every_panel(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out_dir = tmp_path / "plots"
    paths = plot_metrics(_synthetic_run(tmp_path / "run"), out_dir)
    expected = {
        "reward.png",
        "invalid_rate.png",
        "kl.png",
        "entropy.png",
        "clip_fraction.png",
        "step_time.png",
        "eval.png",
    }
    _assert_pngs(paths, out_dir, expected)


def test_plot_metrics_omits_panels_whose_keys_are_absent(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = _log_rows(
        tmp_path / "run",
        [
            (0, "train", {"reward_mean": 0.0, "kl": math.nan}),  # kl only null: no panel
            (1, "train", {"reward_mean": 1.0, "kl": math.nan, "step_time_s": 3.0}),
        ],
    )
    out_dir = tmp_path / "plots"
    _assert_pngs(plot_metrics(path, out_dir), out_dir, {"reward.png", "step_time.png"})


def test_plot_metrics_eval_only_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = _log_rows(tmp_path / "run", [(0, "eval", {"random/win_rate": 1.0})])
    out_dir = tmp_path / "plots"
    _assert_pngs(plot_metrics(path, out_dir), out_dir, {"eval.png"})


@pytest.mark.subprocess
def test_plot_metrics_leaves_pyplot_and_backend_alone(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = _synthetic_run(tmp_path / "run")
    script = (
        "import sys; from textgym.algos.metric_plots import plot_metrics; "
        f"plot_metrics({str(path)!r}, {str(tmp_path / 'plots')!r}); "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_plot_metrics_rejects_empty_file(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILENAME
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        plot_metrics(path, tmp_path / "plots")


def test_truncate_after_purges_later_tensorboard_events(tmp_path: Path) -> None:
    pytest.importorskip("torch.utils.tensorboard")
    with MetricsLogger(tmp_path) as logger:
        for step in range(5):
            logger.log(step, {"kl": float(step)})
    with MetricsLogger(tmp_path, resume=True) as logger:
        logger.truncate_after(2)
        logger.log(3, {"kl": 9.0})
    expected = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 9.0)]  # steps 3 and 4 of the first run purged
    assert _scalars(tmp_path / "tensorboard", "train/kl") == expected


def test_missing_tensorboard_raises_missing_extra_error_with_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # makes `import tensorboard` fail
    with pytest.raises(MissingExtraError, match=r'pip install "textgym\[train\]"'):
        MetricsLogger(tmp_path)
    _log_rows(tmp_path, [(0, "train", {"kl": 0.1})])  # tensorboard=False needs no package


def _run(run_dir, rewards, win_rate):
    with MetricsLogger(run_dir, tensorboard=False) as logger:
        for step, reward in enumerate(rewards, start=1):
            logger.log(step, {"reward_mean": reward, "invalid_rate": 0.1, "step_time_s": 2.0})
        logger.log(len(rewards), {"random/win_rate": win_rate}, stage="eval")


def test_compare_runs_tables_last_values_and_overlays_plots(tmp_path):
    from textgym.algos.metric_summaries import compare_runs
    from textgym.cli import main

    _run(tmp_path / "sft", [0.1, 0.2], 0.6)
    _run(tmp_path / "grpo", [0.3, 0.5, 0.7], 0.9)
    rows, paths = compare_runs([tmp_path / "sft", tmp_path / "grpo"], tmp_path / "plots")
    by_metric = {row["metric"]: row for row in rows}
    assert by_metric["train/reward_mean"] == {
        "metric": "train/reward_mean",
        "sft": 0.2,
        "grpo": 0.7,
    }
    assert by_metric["eval/random/win_rate"]["grpo"] == 0.9
    assert {p.name for p in paths} >= {"reward.png", "invalid_rate.png", "step_time.png"}
    assert main(["compare", str(tmp_path / "sft"), str(tmp_path / "grpo")]) == 0
    with pytest.raises(ValueError, match="two or more"):
        compare_runs([tmp_path / "sft"])
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(tmp_path / "sft"), str(tmp_path / "missing")])
    assert exit_info.value.code == 2


def test_write_run_record_has_command_config_seed_and_machine(tmp_path):
    from textgym.algos.metrics import write_run_record

    path = write_run_record(tmp_path, {"seed": 3, "learning_rate": 1e-4})
    record = json.loads(path.read_text())
    assert record["seed"] == 3 and record["config"]["learning_rate"] == 1e-4
    assert record["command"] and record["machine"]["cpu_count"] and record["started_utc"]
