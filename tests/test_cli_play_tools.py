"""``textgym play`` on a tool env shows the system prompt, the tools and the call format before
the first turn (issue 13, item 3)."""

import gymnasium as gym
import pytest

import textgym  # noqa: F401  (registers the envs)
from textgym.cli import main


def ctrl_d(prompt=""):
    raise EOFError


@pytest.mark.parametrize("env_id", ["textgym/EmailToolUse-v1", "textgym/Workplace-v1"])
def test_a_tool_env_shows_its_setup_first(env_id, monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert main(["play", env_id, "--seed", "0"]) == 0
    out = capsys.readouterr().out
    _, info = gym.make(env_id).reset(seed=0)
    setup, _, request = out.partition("Call format: <tool_call>")
    assert "System prompt:\n" + info["system_prompt"] in setup
    assert f"Tools ({len(info['tools'])}):" in setup
    for tool in info["tools"]:
        assert f"\n- {tool['name']}(" in setup, tool["name"]
    assert '{"name": "<tool name>", "arguments": {"<argument>": "<value>"}}</tool_call>' in request
    assert out.rstrip().endswith("bye")


def test_the_arguments_of_a_tool_are_listed_with_their_types(monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert main(["play", "textgym/EmailToolUse-v1", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "- email_send_email(recipient: string, subject: string, body: string)" in out
    assert "company_directory_find_email_address(name?: string)" in out


def test_a_game_without_tools_shows_no_setup(monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert main(["play", "textgym/TicTacToe-v0", "--seed", "0"]) == 0
    assert "System prompt:" not in capsys.readouterr().out
