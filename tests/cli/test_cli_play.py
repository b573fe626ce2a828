"""``textgym play textgym/TicTacToe-v0 --against POLICY``: a person (scripted ``input``) against a
policy on the two-seat env; the person reads full prompts, the policy compact ones."""

import copy
import re
import sys

import pytest

pytest.importorskip("pettingzoo")

import textgym.builder
from textgym import cli
from textgym.envs.tictactoe.text import COMPACT_SYSTEM_PROMPT, compact_status_text

ENV_ID = "textgym/TicTacToe-v0"


def type_lines(monkeypatch, lines):
    """Make ``input()`` return ``lines`` one by one, then raise EOFError (Ctrl-D)."""
    remaining = iter(lines)

    def fake_input(prompt=""):
        try:
            return next(remaining)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)


@pytest.fixture
def model_spy(monkeypatch):
    """Wrap the policy the CLI builds; record its name, kwargs and each conversation it sees."""
    seen = {"conversations": []}
    build = textgym.builder.make_policy

    class Spy:
        def __init__(self, policy):
            self.policy, self.name = policy, policy.name
            self.tokens_generated = policy.tokens_generated

        def act(self, conversations, infos):
            seen["conversations"] += [copy.deepcopy(list(c)) for c in conversations]
            return self.policy.act(conversations, infos)

    def spy_build(name, **kwargs):
        seen.update(name=name, kwargs=kwargs)
        return Spy(build(name, **kwargs))

    monkeypatch.setattr(textgym.builder, "make_policy", spy_build)
    return seen


def test_human_as_x_against_minimax(monkeypatch, capsys, model_spy):
    type_lines(monkeypatch, ["4", "hello", "0", "2", "6", "8", "1", "3", "5", "7"])
    assert cli.main(["play", ENV_ID, "--against", "minimax", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "Playing textgym/TicTacToe-v0 against minimax, which sees the compact prompt." in out
    # The person reads full prompts; the invalid "hello" is explained and the turn kept.
    assert "A new game begins. You play X and move first." in out
    assert "Invalid move: no <move>N</move> tag" in out
    # Minimax (seed 0) answers 8, 6, 7 to the typed 4, 0, 2 and wins on the bottom row.
    assert " X | 1 | X\n---+---+---\n 3 | X | 5\n---+---+---\n O | O | O\n\nGame over: loss." in out
    assert out.rstrip().endswith("Result: you lose (you played X).")
    # The model seat got the compact system prompt and observations with the typed moves on them.
    last = model_spy["conversations"][-1]
    assert last[0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT.format(mark="O")}
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users == [
        "opp 4\n" + compact_status_text("....X...."),
        "opp 0\n" + compact_status_text("X...X...O"),
        "opp 2\n" + compact_status_text("X.X.X.O.O"),
    ]


def test_human_as_o_repeat_then_ctrl_d(monkeypatch, capsys, model_spy):
    # Game 1 (seed 3): the typed moves until minimax wins or draws; game 2 ends with Ctrl-D.
    type_lines(monkeypatch, ["0", "1", "2", "3", "5", "6", "7", "8", "4"])
    code = cli.main(
        [
            "play",
            ENV_ID,
            "--against",
            "minimax",
            "--mark",
            "O",
            "--seed",
            "3",
            "--repeat",
            "--prompt-style",
            "full",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "A new game begins. You play O. Opponent (X) played position" in out
    assert "Result: you lose (you played O)." in out
    # --repeat keeps a running tally across games
    tally = "after 1 game: 0 wins, 0 draws, 1 loss (W/D/L 0/0/1), mean return 0.00"
    assert f"Result: you lose (you played O).\n{tally}\n" in out
    assert "after 2 games: 0 wins, 0 draws, 2 losses (W/D/L 0/0/2)" in out
    final = "after 3 games: 0 wins, 0 draws, 3 losses (W/D/L 0/0/3), mean return 0.00"
    assert out.rstrip().endswith(f"bye; {final}")  # the third game lost before the Ctrl-D
    first = model_spy["conversations"][0]
    assert (
        first[0]["content"].startswith("You are playing tic-tac-toe")
        and "You play X" in first[0]["content"]
    )
    assert first[1]["content"].startswith("A new game begins. You play X and move first.")


@pytest.mark.llm
def test_human_as_x_against_hf_tiny_sees_compact_prompts(monkeypatch, capsys, model_spy):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # The random tiny model, greedy, never writes a legal move: its seat runs out of actions.
    type_lines(monkeypatch, ["4"])
    code = cli.main(
        [
            "play",
            ENV_ID,
            "--against",
            "hf",
            "--model",
            "tiny",
            "--max-new-tokens",
            "1",
            "--seed",
            "0",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "against hf tiny, which sees the compact prompt." in out
    assert "Result: no result, the game hit the limit of actions per seat (you played X)." in out
    assert re.search(
        r"The opponent's answers were invalid moves (\d+) of \1 times; --show-completions", out
    )
    kwargs = model_spy["kwargs"]
    assert (
        model_spy["name"],
        kwargs["model"],
        kwargs["temperature"],
        kwargs["stop"],
        kwargs["batch_size"],
    ) == ("hf", "tiny", 0.0, ["</move>"], 1)
    last = model_spy["conversations"][-1]
    assert last[0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT.format(mark="O")}
    assert last[1] == {"role": "user", "content": "opp 4\n" + compact_status_text("....X....")}
    assert all(
        m["content"].startswith(("invalid ", "opp ")) for m in last[2:] if m["role"] == "user"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["play", "textgym/GSM8K-v0", "--against", "minimax"],
            "--against plays two-seat tic-tac-toe only",
        ),
        (["play", ENV_ID, "--mark", "O"], "--mark can only be used with --against"),
        (
            ["play", ENV_ID, "--against", "minimax", "--env-kwargs", '{"agent_mark": "O"}'],
            "--env-kwargs does not apply with --against",
        ),
    ],
)
def test_usage_errors_are_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err


def test_missing_pettingzoo_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "textgym.envs.tictactoe.pettingzoo_env", None)
    with pytest.raises(SystemExit) as exc:
        cli.main(["play", ENV_ID, "--against", "minimax"])
    assert exc.value.code == 2
    assert 'pip install "textgym[multiagent]"' in capsys.readouterr().err
