"""Bad input the CLI audits found getting a wrong message, a bare errno, no error at all or a
slow failure: each is now one ``textgym: error:`` line that names the option, with exit code 2,
found before anything loads or is played; and the hints and defaults they pointed at work as
printed.

Everything runs in-process through :func:`textgym.cli.main`, in a thread with a timeout where
the old code could block (a FIFO) or wait (the hub's retries).
"""

import json
import os
import re
import shlex
import socket
import sys
import threading
import time

import pytest

import textgym.cli.batch_play
from textgym.cli import hub_offline, main
from textgym.cli.evaluate import verdict

TTT = "textgym/TicTacToe-v0"
FAST = ["--episodes", "2", "--no-progress"]
SFT = ["--model", "tiny", "--device", "cpu", "--output-dir", "run"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh working directory; a chat JSONL file ``sft.jsonl`` in it."""
    chat = [{"role": "user", "content": "4?"}, {"role": "assistant", "content": "<move>4</move>"}]
    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": chat}) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def nothing_played(monkeypatch):
    def played(*args, **kwargs):
        raise AssertionError("the error must be found before any episode is played")

    monkeypatch.setattr(textgym.cli.batch_play, "iter_rollout", played)


def run_main(argv, timeout_s=60.0):
    """``main(argv)`` in a daemon thread: its exit code (``SystemExit``'s code), failing the
    test instead of hanging when it takes longer than ``timeout_s``."""
    result = {}

    def target():
        try:
            result["code"] = main(argv)
        except SystemExit as exc:
            result["code"] = exc.code
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"textgym {' '.join(argv)} still running after {timeout_s} s"
    if "error" in result:
        raise result["error"]
    return result["code"]


def one_error_line(capsys, code, *words):
    """Assert exit code 2 and one ``textgym: error:`` line holding each of ``words``."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --- sft --data ---------------------------------------------------------------------------------


def test_sft_data_directory(workdir, capsys):
    pytest.importorskip("torch")
    code = run_main(["sft", "--data", str(workdir), *SFT])
    one_error_line(capsys, code, "--data", "a directory")


def test_sft_data_dev_null(workdir, capsys):
    pytest.importorskip("torch")
    code = run_main(["sft", "--data", "/dev/null", *SFT])
    one_error_line(capsys, code, "--data", "'/dev/null'", "a character device")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_sft_data_fifo_does_not_hang(workdir, capsys):
    pytest.importorskip("torch")
    os.mkfifo(workdir / "pipe")
    code = run_main(["sft", "--data", "pipe", *SFT], timeout_s=60)
    one_error_line(capsys, code, "--data", "'pipe'", "a named pipe")


def test_sft_data_binary(workdir, capsys):
    pytest.importorskip("torch")
    (workdir / "bin.jsonl").write_bytes(b'{"messages": []}\n\x80\x81\xff\x00')
    code = run_main(["sft", "--data", "bin.jsonl", *SFT])
    one_error_line(capsys, code, "--data", "not UTF-8", "offset 17")


def test_sft_data_unreadable(workdir, capsys, monkeypatch):
    pytest.importorskip("torch")
    import textgym.data

    if os.geteuid() != 0:  # root reads any file: make the open fail instead
        (workdir / "sft.jsonl").chmod(0)
    else:

        def denied(path, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(textgym.data, "open", denied, raising=False)
    code = run_main(["sft", "--data", "sft.jsonl", *SFT])
    one_error_line(capsys, code, "--data", "'sft.jsonl'", "permission denied")
    assert not (workdir / "run").exists()  # refused before the output directory is claimed


def test_sft_epochs_beyond_64_bits(workdir, capsys):
    pytest.importorskip("torch")
    code = run_main(["sft", "--data", "sft.jsonl", *SFT, "--epochs", "99999999999999999999"])
    one_error_line(capsys, code, "--epochs", "99999999999999999999", "64 bits")


# --- report -------------------------------------------------------------------------------------


def test_report_of_a_file_that_is_no_run(workdir, capsys):
    (workdir / "hostname").write_text("myhost\n")  # what /etc/hostname holds
    code = run_main(["report", "hostname", "--output", "r.html"])
    one_error_line(capsys, code, "'hostname'", "is not a textgym run", "collect --output")
    assert not (workdir / "r.html").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_report_of_a_fifo_does_not_hang(workdir, capsys):
    os.mkfifo(workdir / "pipe")
    code = run_main(["report", "pipe", "--output", "r.html"], timeout_s=30)
    one_error_line(capsys, code, "'pipe'", "a named pipe")


def test_report_of_a_collect_file_still_works(workdir, capsys):
    assert run_main(["collect", TTT, *FAST, "--output", "c.jsonl"]) == 0
    assert run_main(["report", "c.jsonl", "--output", "r.html"]) == 0
    assert "2 episodes" in capsys.readouterr().out


# --- sampling options under every policy --------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--temperature", "-1"), ("--temperature", "nan"), ("--top-p", "0"), ("--top-p", "1.5")]
    + [("--max-new-tokens", "0")],
)
@pytest.mark.parametrize("policy", ["minimax", "random"])
def test_sampling_options_are_checked_for_every_policy(
    option, value, policy, workdir, capsys, nothing_played
):
    code = run_main(["eval", TTT, *FAST, "--policy", policy, option, value])
    one_error_line(capsys, code, option, value)


# --- collect --output and the eval hint ---------------------------------------------------------


def test_collect_without_output_writes_a_default_file(workdir, capsys):
    assert run_main(["collect", TTT, "--policy", "minimax", *FAST]) == 0
    (written,) = (workdir / "runs").iterdir()
    assert re.fullmatch(r"collect-TicTacToe-v0-\d{8}-\d{6}\.jsonl", written.name)
    assert len(written.read_text().splitlines()) == 2
    assert f"wrote runs/{written.name}" in capsys.readouterr().out


def test_the_eval_hint_runs_as_printed(workdir, capsys):
    summary = {
        "env_id": TTT,
        "policy": "hf",
        "model": "tiny",
        "episodes": 2,
        "invalid_action_rate": 1.0,
        "outcomes": {"win": 0.0, "draw": 0.0, "loss": 1.0},
        "mean_return": 0.0,
        "truncated_rate": 0.0,
    }
    commands = re.findall(r"`textgym ([^`]*)`", verdict(summary, expert="minimax"))
    collect, sft = (shlex.split(c) for c in commands[:2])
    assert collect[0] == "collect" and sft[0] == "sft"
    assert run_main([*collect, *FAST]) == 0
    data = sft[sft.index("--data") + 1]
    assert len((workdir / data).read_text().splitlines()) == 2
    pytest.importorskip("torch")
    from textgym.cli import sft as sft_command
    from textgym.cli.usage import parse_config

    config = parse_config(sft_command.Config, sft[1:], "textgym sft", "")
    assert config.data == data and config.model == "tiny"


# --- play shows the answer format ---------------------------------------------------------------


def test_play_shows_a_single_turn_envs_answer_format(workdir, capsys, monkeypatch):
    def ctrl_d(prompt=""):
        raise EOFError

    monkeypatch.setattr("builtins.input", ctrl_d)
    assert run_main(["play", "textgym/GSM8K-v0", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    system, _, question = out.partition("System prompt:\n")[2].partition("\n\n")
    assert "after four hash signs" in system and "#### 42" in system
    assert question  # the problem follows


def test_play_shows_the_turns_before_a_game_started_part_way_through(workdir, capsys, monkeypatch):
    def ctrl_d(prompt=""):
        raise EOFError

    monkeypatch.setattr("builtins.input", ctrl_d)
    kwargs = '{"prompt_style": "compact", "start_boards": [[4, 0, 8]]}'
    assert run_main(["play", TTT, "--env-kwargs", kwargs, "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "System prompt:" in out
    first, mine, now = out.index("opp 4\n"), out.index("> <move>0</move>"), out.index("opp 8\n")
    assert first < mine < now


# --- collect --filter values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("outcome in wins", ["'wins'", "win, draw, loss, none"]),
        ("outcome == victory", ["'victory'", "win, draw, loss, none"]),
        ("truncated == yes", ["'yes'", "true or false"]),
        ("return == high", ["'high'", "a number"]),
    ],
)
def test_filter_values_a_field_cannot_hold(expression, words, workdir, capsys, nothing_played):
    argv = ["collect", TTT, *FAST, "--output", "o.jsonl", "--filter", expression]
    one_error_line(capsys, run_main(argv), "--filter", *words)
    assert not (workdir / "o.jsonl").exists()


def test_a_quoted_outcome_is_taken_as_written(workdir, capsys):
    argv = ["collect", TTT, *FAST, "--output", "o.jsonl", "--filter", "outcome == 'resigned'"]
    assert run_main(argv) == 0
    assert "kept 0 of 2 episodes" in capsys.readouterr().out


# --- eval's default policy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "policy"),
    [("textgym/GSM8K-v0", "gold"), ("textgym/ReverseText-v0", "gold"), (TTT, "minimax")],
)
def test_eval_without_policy_plays_the_envs_expert(env_id, policy, workdir, capsys):
    assert run_main(["eval", env_id, "--limit", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"policy={policy}" in out and f"{policy} over 2 episodes" in out


# --- a hub id offline fails fast ----------------------------------------------------------------


@pytest.fixture
def hub_unreachable(monkeypatch):
    """No connection to the hub; the offline switches as they were, restored afterwards."""
    constants = pytest.importorskip("huggingface_hub.constants")

    def refused(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refused)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *hub_offline.PROXY_VARIABLES):
        monkeypatch.setenv(name, "")  # empty: unset, and restored by monkeypatch
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return constants


def test_an_unreachable_hub_switches_offline_mode_on(hub_unreachable):
    assert hub_offline.offline_unless_reachable() is True
    assert os.environ["HF_HUB_OFFLINE"] == "1" and hub_unreachable.HF_HUB_OFFLINE is True


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        (["eval", TTT, "--policy", "hf", "--model", "org/some-model"], "org/some-model"),
        (["eval", TTT, "--policy", "openai", "--model", "org/some-model"], None),
        (["eval", TTT, "--policy", "hf", "--model", "tiny"], None),
        (["play", TTT, "--against", "hf", "--model", "gpt2"], "gpt2"),
        (["play", TTT], None),
    ],
)
def test_only_a_hub_id_about_to_be_loaded_is_probed(argv, model):
    from textgym.cli import SUBCOMMANDS
    from textgym.cli.usage import parse_config

    module = __import__(f"textgym.cli.{SUBCOMMANDS[argv[0]].module}", fromlist=["Config"])
    config = parse_config(module.Config, argv[1:], "textgym", "")
    assert hub_offline.hub_model(config) == model


def test_a_hub_id_that_is_not_cached_fails_fast_offline(workdir, capsys, hub_unreachable):
    pytest.importorskip("transformers")
    model = "textgym-tests/no-such-model-xyz"
    argv = ["eval", TTT, "--policy", "hf", "--model", model, "--episodes", "1", "--no-progress"]
    began = time.perf_counter()
    code = run_main(argv, timeout_s=120)
    elapsed = time.perf_counter() - began
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert model in err and "Retrying" not in err
    assert elapsed < 40, f"{elapsed:.0f} s: the hub's retries ran (was about 80 s)"
    assert sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE is True


def test_play_against_checks_the_sampling_options(workdir, capsys):
    code = run_main(["play", TTT, "--against", "minimax", "--temperature", "-1"])
    one_error_line(capsys, code, "--temperature", "-1")


def test_a_scripts_bad_option_is_one_line_and_exit_2(capsys, monkeypatch):
    from dataclasses import dataclass

    from textgym.cli.usage import script_config

    @dataclass
    class Options:
        steps: int = 1
        """Steps."""

    monkeypatch.setattr("sys.argv", ["script.py", "--steps", "3"])
    assert script_config(Options, None, "script.py", "A script.\n\nMore.").steps == 3
    with pytest.raises(SystemExit) as exited:
        script_config(Options, ["--steps", "many"], "script.py", "A script.")
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("textgym: error:") and "--steps" in err[0]


@pytest.mark.parametrize("command", ["eval", "collect"])
@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://"])
def test_a_bad_env_url_is_one_line_before_any_episode(workdir, capsys, command, url):
    code = run_main([command, TTT, "--policy", "random", "--episodes", "1", "--env-url", url])
    one_error_line(capsys, code, "--env-url", url)
