"""Every optional feature run with its extra missing ends in one ``textgym: error:`` line that
names the ``pip install`` (``MissingExtraError``, exit 2), never a traceback. Each case blocks
the extra's modules in a fresh process (``sys.modules[name] = None`` makes ``import name``
raise ``ImportError``, as when the package is absent)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

PRELUDE = (
    "import sys\n"
    "for name in {blocked!r}:\n"
    "    sys.modules[name] = None\n"
    "from textgym.cli import main\n"
    "sys.exit(main({argv!r}))\n"
)

TRAIN = ["train", "textgym/TicTacToe-v0", "--model", "tiny", "--steps", "1"]
TRAIN += ["--groups-per-step", "1", "--group-size", "2", "--max-new-tokens", "4"]
TRAIN += ["--eval-every", "0", "--no-progress", "--device", "cpu"]

CASES = {
    "report_to wandb": (["wandb"], [*TRAIN, "--no-tensorboard", "--report-to", "wandb"], "wandb"),
    "report_to trackio": (
        ["trackio"],
        [*TRAIN, "--no-tensorboard", "--report-to", "trackio"],
        "trackio",
    ),
    "tensorboard": (["tensorboard"], TRAIN, "textgym[train]"),
    "lora": (["peft"], [*TRAIN, "--no-tensorboard", "--lora-rank", "4"], "textgym[train]"),
    "openai policy": (
        ["openai"],
        ["eval", "textgym/TicTacToe-v0", "--policy", "openai", "--episodes", "1", "--no-progress"],
        "textgym[openai]",
    ),
    "env_url": (
        ["openenv", "openenv.core", "openenv.core.env_client", "openenv.core.client_types"],
        ["eval", "textgym/TicTacToe-v0", "--policy", "random", "--episodes", "1"]
        + ["--no-progress", "--env-url", "http://127.0.0.1:9"],
        "[serve]",
    ),
    "hub dataset": (
        ["datasets"],
        ["eval", "textgym/GSM8K-v0", "--policy", "gold", "--episodes", "1", "--no-progress"]
        + ["--env-kwargs", '{"dataset": "openai/gsm8k"}'],
        "datasets",
    ),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("case", list(CASES))
def test_a_missing_extra_is_one_line_naming_the_install(case: str, tmp_path) -> None:
    blocked, argv, install = CASES[case]
    if argv[0] == "train":
        argv = [*argv, "--output-dir", str(tmp_path / "run")]
    code = PRELUDE.format(blocked=blocked, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[-1].startswith("textgym: error:") and install in lines[-1], lines
