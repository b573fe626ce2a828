"""``textgym check``: one table row and a JSON card per env, exit 1 for a failing card, one
``textgym: error:`` line (exit 2) for a bad use."""

import json

import pytest

from textgym.cli import SUBCOMMANDS, main


def test_check_all_prints_one_row_per_env_and_writes_the_cards(tmp_path, capsys):
    out = tmp_path / "cards.json"
    assert main(["check", "--all", "--tasks", "4", "--output", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    cards = json.loads(out.read_text())["cards"]
    ids = [card["env_id"] for card in cards]
    assert ids[:5] == [
        "textgym/TicTacToe-v0",
        "textgym/ReverseText-v0",
        "textgym/GSM8K-v0",
        "textgym/EmailToolUse-v1",
        "textgym/Workplace-v1",
    ]
    assert all(card["status"] == "pass" for card in cards)
    for env_id in ids:
        assert env_id in printed
    assert "0.500 / 0.500 (4/4)" in printed  # tic-tac-toe: a draw is the optimal opponent's max
    assert "1.100 / 1.100 (4/4)" in printed  # GSM8K: correct + format
    assert "check" in SUBCOMMANDS


def test_an_existing_output_is_refused_without_overwrite(tmp_path, capsys):
    out = tmp_path / "cards.json"
    argv = ["check", "textgym/GSM8K-v0", "--tasks", "2", "--output", str(out), "--no-progress"]
    assert main(argv) == 0
    before = out.read_text()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and out.read_text() == before
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--seed", "1"]) == 0
    assert json.loads(out.read_text())["cards"][0]["seed"] == 1


def test_a_failing_card_exits_1_and_names_the_section(capsys):
    argv = ["check", "textgym/TicTacToe-v0", "--env-kwargs", '{"random_move_prob": 0.5}']
    assert main([*argv, "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "fail (oracle)" in out and "1 of 1 envs failed: textgym/TicTacToe-v0" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check"], "expected an env id"),
        (["check", "--all", "textgym/GSM8K-v0"], "env ids or --all, not both"),
        (["check", "--all", "--env-kwargs", '{"x": 1}'], "--env-kwargs applies to one env id"),
        (["check", "textgym/GSM8K-v0", "--tasks", "0"], "--tasks >= 1"),
        (["check", "textgym/NoSuchEnv-v0"], "NoSuchEnv"),
        (["check", "textgym/GSM8K-v0", "--env-kwargs", '{"bogus": 1}'], "cannot check"),
    ],
)
def test_a_bad_use_is_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--no-progress"] if len(argv) > 1 else argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("textgym: error:") and len(err.strip().splitlines()) == 1, err
    assert message in err
