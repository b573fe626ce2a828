"""One seed rule for every subcommand (issue 52 item 7): ``--seed`` outside
``[0, MAX_SEED]`` is one ``textgym: error:`` line with exit code 2 in each of them, a seed at
either end of the range is accepted by the config, and each ``--help`` states the range."""

import json

import pytest

from textgym.checks import MAX_SEED, check_seed
from textgym.cli import main

TTT = "textgym/TicTacToe-v0"
BAD_SEEDS = [-1, -(2**63), MAX_SEED + 1, 2**63 - 1]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    chat = [{"role": "user", "content": "4?"}, {"role": "assistant", "content": "<move>4</move>"}]
    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": chat}) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


COMMANDS = {
    "eval": ["eval", TTT, "--episodes", "1", "--no-progress"],
    "collect": ["collect", TTT, "--episodes", "1", "--output", "out.jsonl", "--no-progress"],
    "train": ["train", TTT, "--model", "tiny", "--output-dir", "run"],
    "sft": ["sft", "--data", "sft.jsonl", "--model", "tiny", "--output-dir", "run"],
    "play": ["play", TTT],
    "check": ["check", TTT],
}


def _run(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("seed", BAD_SEEDS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_seed_is_one_line(workdir, capsys, command, seed):
    code = _run([*COMMANDS[command], "--seed", str(seed)])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    assert "seed" in lines[0] and str(MAX_SEED) in lines[0], lines[0]
    assert not (workdir / "run").exists() and not (workdir / "out.jsonl").exists()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_states_the_range(capsys, command):
    assert _run([command, "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "[0, 2**32 - 1]" in help_text, help_text[-2000:]


@pytest.mark.parametrize("seed", [0, 1, MAX_SEED])
def test_range_ends_accepted(seed):
    assert check_seed("--seed", seed) == seed


@pytest.mark.parametrize("seed", [*BAD_SEEDS, True, 1.0, "0", None])
def test_check_seed_refuses(seed):
    with pytest.raises(ValueError, match=r"seed to be an int in \[0, 4294967295\]"):
        check_seed("--seed", seed)


def test_largest_seed_derives_valid_env_seeds():
    """The largest seed's derived seeds (a trainer's tasks, an evaluation's episodes) seed a
    TicTacToe-v0 reset, and torch takes the seed itself."""
    import gymnasium as gym
    import torch

    env = gym.make(TTT)
    for derived in (MAX_SEED * 10**6 + 999_999, 10**9 + MAX_SEED * 10**6 + 999):
        env.reset(seed=derived)
    torch.manual_seed(MAX_SEED)
