"""Running the CLI and what it prints: ``python -m textgym``, help without tyro internals, option
values in usage lines, the scripted policies' table, no ``past_key_values`` FutureWarning on hf
runs."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import textgym
from textgym.cli import SUBCOMMANDS, main


@pytest.mark.subprocess
def test_python_dash_m_textgym_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "textgym", "--version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == f"textgym {textgym.__version__}"
    done = subprocess.run(
        [sys.executable, "-m", "textgym", "nope"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr.startswith("textgym: error: unknown subcommand")


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_help_shows_no_tyro_internals(command, capsys, monkeypatch):
    if command in ("sft", "train"):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "{None" not in out and "None}" not in out, [
        line for line in out.splitlines() if "None}" in line or "{None" in line
    ]


def test_optional_options_read_as_their_values(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    for usage in ("--limit INT", "--episodes INT", "--task-ids STR [STR ...]", "--output-dir DIR"):
        assert usage in out, usage
    assert "--tool-format {native,text}" in out
    assert main(["eval", "textgym/TicTacToe-v0", "--limit", "2", "--no-progress"]) == 0


def test_the_scripted_policies_table_has_no_token_limit_row(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["eval", "textgym/TicTacToe-v0", "--episodes", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "invalid actions" in out and "--max-new-tokens" not in out


@pytest.mark.llm
def test_the_transformers_decoder_passes_the_cache_keyword_this_version_takes():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from textgym.policies.hf import HFPolicy

    policy = HFPolicy.from_name("tiny", max_new_tokens=3, decoder="transformers", seed=0)
    same = [[{"role": "user", "content": "hello"}]] * 3  # equal prompts: the shared prefill
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        completions = policy.act(same, [{}] * 3)
    assert len(completions) == 3 and all(len(c.completion_ids) == 3 for c in completions)
    assert not [w for w in caught if "past_key_values" in str(w.message)], [
        str(w.message) for w in caught
    ]
