"""``textgym play`` on a tool env shows the system prompt, the tools and the call format before
the first turn."""

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
    # The system prompt is shown, its own list of tools replaced by a pointer to the one list
    # with argument types: each tool is listed once.
    intro = info["system_prompt"].split("\n- ")[0].rsplit("\n", 1)[0]
    assert "System prompt:\n" + intro in setup
    assert f"[the {len(info['tools'])} tools are listed below]" in setup
    assert f"Tools ({len(info['tools'])}):" in setup
    for tool in info["tools"]:
        assert setup.count(f"\n- {tool['name']}(") == 1, tool["name"]
    assert '{"name": "<tool name>", "arguments": {"<argument>": "<value>"}}</tool_call>' in request
    assert out.rstrip().endswith("bye")


def test_the_arguments_of_a_tool_are_listed_with_their_types(monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert main(["play", "textgym/EmailToolUse-v1", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "- email_send_email(recipient: string, subject: string, body: string)" in out
    assert "company_directory_find_email_address(name?: string)" in out


def test_a_game_without_tools_shows_its_system_prompt_but_no_tools(monkeypatch, capsys):
    # Every env shows its system prompt and the answer format; only a tool env shows tools.
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert main(["play", "textgym/TicTacToe-v0", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "System prompt:" in out and "Tools (" not in out and "Call format:" not in out
    assert "A bare number typed is sent as <move>N</move>." in out


def test_tool_responses_show_email_bodies_with_line_breaks(monkeypatch, capsys):
    calls = iter(
        ['<tool_call>{"name": "email_search_emails", "arguments": {"query": ""}}</tool_call>']
    )

    def typed(prompt=""):
        try:
            return next(calls)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", typed)
    assert main(["play", "textgym/EmailToolUse-v1", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    response = out.split("<tool_response>\n", 1)[1].split("</tool_response>")[0]
    assert "\\n" not in response  # no literal backslash-n left
    assert "    body:\n      | Sam,\n      |\n" in response  # one line per line of the body
    assert "  - email_id: " in response and "pagination:\n  total_emails: 20" in response
