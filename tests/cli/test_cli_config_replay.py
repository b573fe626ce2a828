"""``--config FILE``: a run replayed from its run.json, the command line still winning."""

from __future__ import annotations

import json

import pytest

from textgym.algos.sft_config import SFTConfig
from textgym.cli import main
from textgym.cli.config_file import take_config_file
from textgym.errors import UsageError

CONVERSATION = [
    {"role": "user", "content": "Your move."},
    {"role": "assistant", "content": "<move>4</move>"},
]


def test_a_run_is_replayed_from_its_run_json_with_overrides(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    first = tmp_path / "first"
    argv = ["sft", "--data", str(data), "--model", "tiny", "--output-dir", str(first)]
    assert main([*argv, "--learning-rate", "0.003", "--batch-size", "2", "--no-tensorboard"]) == 0
    second = tmp_path / "second"
    assert main(["sft", "--config", str(first / "run.json"), "--output-dir", str(second)]) == 0
    recorded = json.loads((first / "run.json").read_text())["config"]
    replayed = json.loads((second / "run.json").read_text())["config"]
    assert replayed["learning_rate"] == 0.003 and replayed["batch_size"] == 2
    assert replayed == {**recorded, "output_dir": str(second)}


def test_a_config_file_of_option_names_sets_defaults_and_argv_wins(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"data": str(data), "epochs": 3, "overwrite": True}))
    rest, values = take_config_file(SFTConfig, ["--config", str(file), "--epochs", "5"], "x")
    assert rest == ["--epochs", "5"]
    assert values == {"data": str(data), "epochs": 3}  # overwrite is never replayed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("[1, 2]", "expected a JSON object"),
        ("{not json", "cannot read"),
        ('{"no_such_option": 1}', "'no_such_option', not an option of textgym sft"),
        (
            '{"command": ["textgym", "train", "x"], "config": {}}',
            "records a `textgym train` run; replay it with `textgym train --config",
        ),
    ],
)
def test_bad_config_files_are_one_line_errors(tmp_path, content, message):
    file = tmp_path / "run.json"
    if content is not None:
        file.write_text(content)
    with pytest.raises(UsageError, match=message):
        take_config_file(SFTConfig, ["--config", str(file)], "textgym sft")


def test_config_given_twice_or_without_a_file(tmp_path):
    with pytest.raises(UsageError, match="more than once"):
        take_config_file(SFTConfig, ["--config", "a", "--config=b"], "textgym sft")
    with pytest.raises(UsageError, match="expects a file"):
        take_config_file(SFTConfig, ["--config"], "textgym sft")
