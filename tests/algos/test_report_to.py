"""``report_to``: MetricsLogger mirrors every metric to Weights & Biases and Trackio, offline.

Each tracker runs in a subprocess with its own environment (W&B's ``WANDB_MODE=offline``, a
temporary ``TRACKIO_DIR``; Trackio reads it when imported), and what it stored is read back:
W&B's run file record by record, Trackio's store through its own API. A test skips, with its
reason, where the tracker's package is not installed.
"""

import dataclasses
import importlib.util
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from textgym.algos.metrics import MetricsLogger

LOG_ROWS = textwrap.dedent(
    """
    import sys
    from textgym.algos.metrics import MetricsLogger

    with MetricsLogger(sys.argv[1], tensorboard=False, report_to=[sys.argv[2]],
                       config={"learning_rate": 1e-5, "beta": 0.0}) as logger:
        logger.log(0, {"random/win_rate": 0.25}, stage="eval")
        logger.log(1, {"reward_mean": 0.5, "kl": float("nan"), "skipped_update": False})
        logger.log(2, {"reward_mean": 0.75, "kl": 0.01, "skipped_update": True})
    """
)
EXPECTED = [
    (0, {"eval/random/win_rate": 0.25}),
    (1, {"train/reward_mean": 0.5, "train/skipped_update": 0.0}),  # NaN is not sent
    (2, {"train/reward_mean": 0.75, "train/kl": 0.01, "train/skipped_update": 1.0}),
]


def _needs(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f'needs {package}: pip install "textgym[{package}]"')


def _log_rows(run_dir: Path, tracker: str, env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LOG_ROWS, str(run_dir), tracker],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file (``run-<id>.wandb``): LevelDB's log format after a 7-byte
    file header, 32 KiB blocks of chunks, each ``crc32 (4) | length (2) | type (1) | data``
    (type 1 a whole record; 2, 3, 4 its first, middle and last parts)."""
    data, pos, block, records, parts = path.read_bytes(), 7, 32768, [], b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the rest of a block too small for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding up to the end of the block
            pos += left
            continue
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(parts)
            parts = b""
    return records


@pytest.mark.subprocess
def test_wandb_offline_gets_every_finite_metric_and_the_config(tmp_path):
    _needs("wandb")
    from wandb.proto import wandb_internal_pb2

    run_dir = tmp_path / "grpo-run"
    _log_rows(run_dir, "wandb", {"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")  # kept in the run directory
    history, config, name = [], {}, None
    for raw in _wandb_records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            history.append(
                (row.pop("_step"), {k: v for k, v in row.items() if not k.startswith("_")})
            )
        elif kind == "run":  # the run's start: its name and config
            name = record.run.display_name
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
    assert history == EXPECTED
    assert config["learning_rate"] == 1e-5 and config["beta"] == 0.0
    assert name == "grpo-run"


@pytest.mark.subprocess
def test_trackio_gets_every_finite_metric(tmp_path):
    _needs("trackio")
    store = tmp_path / "trackio"
    _log_rows(tmp_path / "sft-run", "trackio", {"TRACKIO_DIR": str(store)})
    read = textwrap.dedent(
        """
        import json
        from trackio.sqlite_storage import SQLiteStorage

        print(json.dumps(SQLiteStorage.get_logs("textgym", "sft-run")))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", read],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACKIO_DIR": str(store)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = json.loads(proc.stdout.strip().splitlines()[-1])
    got = [
        (row["step"], {k: v for k, v in row.items() if k not in ("step", "timestamp")})
        for row in logs
    ]
    assert got == EXPECTED


def test_unknown_or_missing_trackers_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="report_to to be a list of tensorboard, wandb"):
        MetricsLogger(tmp_path / "a", tensorboard=False, report_to=["mlflow"])
    with pytest.raises(ValueError, match="report_to"):
        MetricsLogger(tmp_path / "b", tensorboard=False, report_to="wandb")  # a str, not a list
    monkeypatch.setitem(sys.modules, "trackio", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r'pip install "textgym\[trackio\]"'):
        MetricsLogger(tmp_path / "c", tensorboard=False, report_to=["trackio"])
    assert not (tmp_path / "c" / "metrics.jsonl").exists()
    with MetricsLogger(tmp_path / "d", tensorboard=False, report_to=["none"]) as logger:
        logger.log(1, {"reward_mean": 0.5})  # none: metrics.jsonl only
    assert (tmp_path / "d" / "metrics.jsonl").read_text().count("\n") == 1


def test_the_trainers_take_report_to(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from textgym.algos import grpo, metrics
    from textgym.algos.sft_config import SFTConfig
    from textgym.cli import main

    from .test_grpo import small

    config = small(tmp_path, report_to=("wandb", "trackio"))
    made = {}

    class Made(Exception):
        """Stops the run once the logger is made: nothing after it is under test."""

    def make_logger(out, **options):
        made.update(options)
        raise Made

    monkeypatch.setattr(metrics, "MetricsLogger", make_logger)
    with pytest.raises(Made):
        grpo.train(config)
    assert made["report_to"] == ("wandb", "trackio") and made["config"] is config
    assert {f.name: f.default for f in dataclasses.fields(SFTConfig)}["report_to"] == ()
    with pytest.raises(SystemExit) as exc:
        main(["train", "textgym/TicTacToe-v0", "--report-to", "mlflow"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("textgym: error:") and "'mlflow'" in err and "wandb" in err
