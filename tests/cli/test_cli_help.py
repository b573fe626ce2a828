"""Every subcommand's ``--help``: a description, and for each option a help text and its
default."""

import re

import pytest

from textgym.cli import SUBCOMMANDS, main

TRAINERS = {"sft", "train"}


def help_text(capsys, monkeypatch, *argv):
    monkeypatch.setenv("COLUMNS", "200")  # one option per line where it fits; no wrapped flags
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def option_entries(text):
    """``{option or positional: its help text}`` from tyro's help, boxed (``│ ... │``, when
    stdout is UTF-8) or plain (contents indented by two spaces)."""
    entries, current = {}, None
    for line in text.splitlines():
        if line.startswith("│"):
            inner = line.strip().strip("│")[1:].rstrip()
        elif line.startswith("  "):
            inner = line[2:].rstrip()
        else:  # a title, a rule, the usage line: no option continues past it
            current = None
            continue
        match = re.match(r"^(-[-\w]+(?:, --[-\w]+)?|[A-Z][A-Z_]*|\[[A-Z_]+\])(.*)$", inner)
        if match:
            current, rest = match.group(1), match.group(2)
            if rest.startswith("  "):  # no metavar: the help follows
                entries[current] = rest
            else:  # " METAVAR", then the help after two or more spaces (if it fits)
                entries[current] = rest.strip().split("  ", 1)[1] if "  " in rest.strip() else ""
        elif current is not None:
            entries[current] += " " + inner.strip()
    return {name: " ".join(value.split()) for name, value in entries.items()}


def test_the_top_level_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, subcommand in SUBCOMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(subcommand.summary)}$", out, re.M), name


def test_the_package_docstring_names_every_subcommand():
    import textgym.cli

    for name in SUBCOMMANDS:
        assert f"``textgym {name}" in textgym.cli.__doc__, name


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_option_has_help_and_a_default(command, capsys, monkeypatch):
    if command in TRAINERS:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    out = help_text(capsys, monkeypatch, command)
    assert out.startswith(f"usage: textgym {command}")
    description = out.split("\n\n")[1]
    assert description.startswith(f"textgym {command}:"), description
    for markup in ("``", ":func:", ":class:", ":mod:", ":meth:", ":data:"):
        assert markup not in out, f"reST markup {markup!r} in textgym {command} --help"
    entries = option_entries(out)
    assert "-h, --help" in entries
    del entries["-h, --help"]
    for name, text in entries.items():
        assert re.search(r"\((default: .*|required)\)$", text), f"{command} {name}: {text!r}"
        words = re.sub(r"\((default: .*|required)\)$", "", text).strip()
        assert len(words) >= 10, f"{command} {name} has no help text: {text!r}"
    if command != "list":
        assert entries, f"no options parsed from textgym {command} --help"


@pytest.mark.parametrize("command", ["eval", "collect", "play", "train"])
def test_the_env_id_is_the_first_positional_argument(command, capsys, monkeypatch):
    if command in TRAINERS:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    out = help_text(capsys, monkeypatch, command)
    assert "ENV_ID" in out.splitlines()[0]
    entries = option_entries(out)
    assert (
        "--env-kwargs" in entries and "JSON object" in entries["--env-kwargs"] or command == "train"
    )
    assert "--wrappers" in entries


@pytest.mark.parametrize("command", ["eval", "collect", "play"])
def test_shared_options_are_spelled_the_same(command, capsys, monkeypatch):
    out = help_text(capsys, monkeypatch, command)
    entries = option_entries(out)
    assert "(default: gemma-3-270m)" in entries["--model"]
    if command != "play":
        assert "--rollout-batch-size" in entries and "--batch-size" not in entries
        assert "--progress, --no-progress" in entries
    assert "--output-dir" in entries if command == "eval" else True


@pytest.mark.parametrize("command", ["eval", "collect", "play", "train"])
def test_the_wrapper_names_in_help_come_from_the_registry(command, capsys, monkeypatch):
    from textgym.wrappers import REWARD_WRAPPERS

    if command in TRAINERS:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    entries = option_entries(help_text(capsys, monkeypatch, command))
    wrappers = next(text for name, text in entries.items() if name.startswith("--wrappers"))
    for name in REWARD_WRAPPERS:
        assert name in wrappers, f"{command} --help does not list the wrapper {name}"
