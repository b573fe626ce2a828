"""Bad invocations: one ``textgym: error:`` line and exit code 2, found before anything is played.

Each row is a command that used to print a traceback, or to fail only after the whole run
(losing its results), or to run with a misread argument.
"""

import importlib.util
import json
from pathlib import Path

import pytest

import textgym.cli
import textgym.cli.batch_play
from textgym.cli import main

TTT = "textgym/TicTacToe-v0"
FAST = ["--episodes", "2", "--no-progress"]
#: ``eval`` of GSM8K's bundled sample by its gold answers.
GSM8K_GOLD = ["eval", "textgym/GSM8K-v0", "--policy", "gold", "--no-progress"]
DEEP = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
TRAIN = ["--output-dir", "{tmp}/run", "--device", "cpu"]
needs_training = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "tyro")),
    reason="needs the training extras: pip install 'textgym[llm,train]'",
)
needs_sys = pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a /sys directory (Linux)")

CASES = [
    # output locations, checked (and created) before playing
    pytest.param(
        ["eval", TTT, *FAST, "--output-dir", "/sys/nope"],
        "cannot write to --output-dir /sys/nope",
        marks=needs_sys,
        id="eval-output-unwritable",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--output-dir", "{tmp}/file/run"],
        "file is a file, not a directory",
        id="eval-output-under-a-file",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--output-dir", "{tmp}/file"],
        "file is a file; expected a directory",
        id="eval-output-is-a-file",
    ),
    pytest.param(
        ["collect", TTT, *FAST, "--output", "{tmp}"],
        "is a directory; expected a file",
        id="collect-output-is-a-directory",
    ),
    pytest.param(
        ["collect", TTT, *FAST, "--output", "{tmp}/file/sft.jsonl"],
        "file is a file, not a directory",
        id="collect-output-under-a-file",
    ),
    pytest.param(
        ["collect", TTT, *FAST, "--output", "/sys/nope.jsonl"],
        "cannot write --output",
        marks=needs_sys,
        id="collect-output-unwritable",
    ),
    # env, data and kwargs
    pytest.param(
        [*GSM8K_GOLD, "--episodes", "2", "--env-kwargs", '{"data_path": "{tmp}/missing.jsonl"}'],
        "Expected a data file at",
        id="missing-data-path",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--env-kwargs", DEEP],
        "--env-kwargs is nested too deeply",
        id="deeply-nested-env-kwargs",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--episodes", "2", "--wrappers", "format_reward"],
        "already pays a 'format' reward component",
        id="format-reward-on-gsm8k",
    ),
    pytest.param(
        [
            "eval",
            "textgym/ReverseText-v0",
            "--policy",
            "gold",
            *FAST,
            "--wrappers",
            "format_reward",
        ],
        "already pays a 'format' reward component",
        id="format-reward-on-reverse-text",
    ),
    # a policy that cannot play the env, a seed the env refuses
    pytest.param(
        ["eval", TTT, "--policy", "gold", *FAST],
        "--policy gold cannot play textgym/TicTacToe-v0: it plays from info['gold_completion']",
        id="gold-on-tictactoe",
    ),
    pytest.param(
        ["eval", "textgym/GSM8K-v0", "--policy", "minimax", *FAST],
        "--policy minimax cannot play textgym/GSM8K-v0",
        id="minimax-on-gsm8k",
    ),
    # One seed rule for every subcommand (textgym.checks.check_seed: [0, 2**32 - 1]).
    *(
        pytest.param(
            [*argv, "--seed", seed],
            f"to be an int in [0, 4294967295] (the seed range of every command), got {seed}",
            marks=marks,
            id=f"{argv[0]}-seed{seed}",
        )
        for argv, marks in (
            ([*GSM8K_GOLD, "--episodes", "2"], ()),
            (["collect", TTT, "--episodes", "2", "--output", "{tmp}/c.jsonl"], ()),
            (["play", TTT], ()),
            (["check", TTT], ()),
            (["train", TTT, "--model", "tiny", *TRAIN], needs_training),
            (["sft", "--data", "{tmp}/sft.jsonl", "--model", "tiny", *TRAIN], needs_training),
        )
        for seed in ("-1", str(-(2**63)), str(2**32))
    ),
    pytest.param(
        ["eval", TTT, "--episodes", str(10**30), "--no-progress"],
        "--episodes must be at least 1 and below 2**63, got 1000000000000000000000000000000",
        id="episodes-beyond-any-length",
    ),
    # choosing the tasks of a pass
    pytest.param(
        ["eval", TTT, *FAST, "--limit", "3"],
        "--episodes and --limit 3 both set the number of episodes; on "
        "textgym/TicTacToe-v0 without a task list --limit N plays the N seeds",
        id="episodes-and-limit-of-seeds",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--limit", "19"],
        "--limit 19 is more than the 18 tasks textgym/GSM8K-v0 holds; use at most 18, or "
        "leave --limit out to play them all",
        id="limit-beyond-the-tasks",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--limit", "3", "--task-ids", "gsm8k-sample-00001", "gsm8k-sample-00002"],
        "--limit 3 is more than the 2 tasks --task-ids lists",
        id="limit-beyond-the-ids",
    ),
    pytest.param([*GSM8K_GOLD, "--limit", "0"], "--limit must be >= 1, got 0", id="limit-zero"),
    pytest.param(
        [*GSM8K_GOLD, "--task-ids", "gsm8k-sample-00001", "gsm8k-test-00001"],
        "--task-ids: Unknown task id 'gsm8k-test-00001' "
        "(1 of 2 unknown); expected ids of the env's 18 tasks, e.g. 'gsm8k-sample-00000'",
        id="unknown-task-id",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--task-ids", "gsm8k-sample-00001", "gsm8k-sample-00001"],
        "listed twice",
        id="task-id-twice",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--task-ids", ","],
        "Expected at least one task id",
        id="no-task-ids",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--task-ids"],
        "Expected at least one task id",
        id="task-ids-without-values",
    ),
    pytest.param(
        [
            "eval",
            "textgym/EmailToolUse-v1",
            "--policy",
            "gold",
            "--no-progress",
            "--task-ids",
            "email-1",
        ],
        "--task-ids: textgym/EmailToolUse-v1 cannot play task 'email-1': Expected "
        "options['task_id'] like",
        id="bad-generated-task-id",
    ),
    pytest.param(
        ["eval", TTT, "--no-progress", "--task-ids", "x"],
        "--task-ids: textgym/TicTacToe-v0 cannot play task 'x': Unknown reset options",
        id="task-ids-on-tictactoe",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--sample-tasks", "--task-ids", "gsm8k-sample-0000"],
        "--sample-tasks draws each seed's task at random; it cannot be combined with --task-ids",
        id="sample-tasks-and-task-ids",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--episodes", "8", "--rollouts-per-task", "4"],
        "--episodes and --rollouts-per-task 4 both set",
        id="episodes-and-rollouts",
    ),
    # one concept, one flag
    pytest.param(
        [*GSM8K_GOLD, "--group-size", "4"],
        "--group-size is now --rollouts-per-task: use --rollouts-per-task 4",
        id="eval-group-size-removed",
    ),
    pytest.param(
        ["collect", TTT, "--group-size", "8", "--no-progress", "--output", "{tmp}/sft.jsonl"],
        "--group-size is now --rollouts-per-task: use --rollouts-per-task 8",
        id="collect-group-size-removed",
    ),
    pytest.param(
        [*GSM8K_GOLD, "--success-threshold", "nan"],
        "--success-threshold must be a finite number",
        id="nan-success-threshold",
    ),
    # the openai policy's flags
    pytest.param(
        ["eval", TTT, *FAST, "--concurrency", "4", "--api-key", "k"],
        "--concurrency, --api-key only apply to --policy openai, got no --policy",
        id="openai-flags-with-minimax",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--policy", "openai", "--concurrency", "0"],
        "--concurrency must be >= 1",
        id="concurrency-zero",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--policy", "openai", "--timeout-s", "inf"],
        "--timeout-s must be a finite number > 0",
        id="timeout-inf",
    ),
    pytest.param(
        ["eval", TTT, *FAST, "--policy", "openai", "--max-retries", "-1"],
        "--max-retries must be >= 0",
        id="negative-retries",
    ),
    # collect filters that used to be read as string literals
    pytest.param(
        [
            "collect",
            TTT,
            *FAST,
            "--output",
            "{tmp}/sft.jsonl",
            "--filter",
            "outcome == win or outcome == draw",
        ],
        "--filter: expected 'and' or the end of the filter at char 15",
        id="filter-with-or",
    ),
    pytest.param(
        ["collect", TTT, *FAST, "--output", "{tmp}/sft.jsonl", "--filter", "outcome == win and"],
        "--filter: expected a field name at char 18",
        id="filter-dangling-and",
    ),
    pytest.param(
        ["collect", TTT, *FAST, "--output", "{tmp}/sft.jsonl", "--filter", "num_steps == 5 5"],
        "--filter: expected 'and' or the end of the filter at char 15",
        id="filter-two-word-value",
    ),
    # trainers: config validation, env, model, output directory
    pytest.param(
        ["train", "textgym/Nope-v0", *TRAIN],
        "unknown env id 'textgym/Nope-v0'",
        marks=needs_training,
        id="train-unknown-env",
    ),
    pytest.param(
        ["train", TTT, "--env-kwargs", '{"colour": "red"}', *TRAIN],
        "unexpected keyword argument 'colour'",
        marks=needs_training,
        id="train-bad-env-kwargs",
    ),
    pytest.param(
        ["train", "textgym/GSM8K-v0", "--wrappers", "format_reward", *TRAIN],
        "already pays a 'format' reward component",
        marks=needs_training,
        id="train-format-reward-on-gsm8k",
    ),
    pytest.param(
        ["train", TTT, "--model", "{tmp}/no-such-model", *TRAIN],
        "Could not load model",
        marks=needs_training,
        id="train-model-not-found",
    ),
    pytest.param(
        ["train", TTT, "--learning-rate", "nan", *TRAIN],
        "finite number",
        marks=needs_training,
        id="train-nan-learning-rate",
    ),
    pytest.param(
        ["train", TTT, "--output-dir", "{tmp}/file/run", "--device", "cpu"],
        "file is a file, not a directory",
        marks=needs_training,
        id="train-output-dir-under-a-file",
    ),
    pytest.param(
        ["train", TTT, "--async-rollouts", "1", *TRAIN],
        "async_rollouts: 1 needs rollout_engine llama-server",
        marks=needs_training,
        id="train-async-without-server",
    ),
    pytest.param(
        ["train", TTT, "--model", "tiny", "--rollout-engine", "llama-server", "--lora-rank", "4"]
        + ["--llama-server", "{tmp}/no-such-binary", *TRAIN],
        "Expected llama.cpp's llama-server binary",
        marks=needs_training,
        id="train-server-binary-missing",
    ),
    pytest.param(
        ["sft", "--data", "{tmp}/missing.jsonl", *TRAIN],
        "a JSONL file",
        marks=needs_training,
        id="sft-data-not-found",
    ),
    pytest.param(
        ["sft", "--data", "{tmp}/sft.jsonl", "--model", "{tmp}/no-such-model", *TRAIN],
        "Could not load model",
        marks=needs_training,
        id="sft-model-not-found",
    ),
    pytest.param(
        ["sft", "--data", "{tmp}/file", *TRAIN],
        "expected a JSON object per line",
        marks=needs_training,
        id="sft-data-not-jsonl",
    ),
    pytest.param(
        ["sft", "--data", "{tmp}/no-content.jsonl", *TRAIN],
        "record 1: message 0 (user) has content None",
        marks=needs_training,
        id="sft-null-content",
    ),
    pytest.param(
        ["sft", "--data", "{tmp}/file", "--learning-rate", "nan", *TRAIN],
        "finite number",
        marks=needs_training,
        id="sft-nan-learning-rate",
    ),
]


def assert_one_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), err
    assert message in lines[0]


@pytest.fixture
def nothing_is_played(monkeypatch):
    def played(*args, **kwargs):
        raise AssertionError("the error must be found before any episode is played")

    monkeypatch.setattr(textgym.cli.batch_play, "iter_rollout", played)


@pytest.mark.parametrize(("argv", "message"), CASES)
def test_bad_invocation_is_one_line_and_exit_2(
    argv, message, tmp_path, capsys, monkeypatch, nothing_is_played
):
    (tmp_path / "file").write_text("not JSON\n")
    chat = [{"role": "user", "content": "4?"}, {"role": "assistant", "content": "<move>4</move>"}]
    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": chat}) + "\n")
    chat[0]["content"] = None
    (tmp_path / "no-content.jsonl").write_text(json.dumps({"messages": chat}) + "\n")
    monkeypatch.chdir(tmp_path)  # a trainer that got as far as training would write here
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    assert_one_usage_error(capsys, argv, message)


def test_unreachable_hub_dataset(capsys, monkeypatch, nothing_is_played):
    datasets = pytest.importorskip(
        "datasets", reason="needs the data extra: pip install 'textgym[data]'"
    )

    def offline(*args, **kwargs):  # what datasets raises without a network
        raise ConnectionError(
            "Couldn't reach 'nobody/nothing' on the Hub (LocalEntryNotFoundError)"
        )

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert_one_usage_error(
        capsys,
        [*GSM8K_GOLD, "--episodes", "2", "--env-kwargs", '{"dataset": "nobody/nothing"}'],
        "Couldn't reach 'nobody/nothing'",
    )


def test_an_existing_output_survives_a_run_that_fails_before_playing(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    out.write_text('{"kept": true}\n')
    assert_one_usage_error(
        capsys,
        ["collect", TTT, "--policy", "gold", *FAST, "--output", str(out)],
        "--policy gold cannot play",
    )
    assert out.read_text() == '{"kept": true}\n'


def test_trainer_errors_during_training_are_not_hidden(monkeypatch, tmp_path):
    # Only what a config, env or model load raises before training is a usage error.
    pytest.importorskip("tyro")
    grpo = pytest.importorskip("textgym.algos.grpo")

    def diverged(config):
        raise ValueError("an episode return is NaN")

    monkeypatch.setattr(grpo, "train", diverged)
    with pytest.raises(ValueError, match="NaN"):
        main(["train", TTT, "--output-dir", str(tmp_path / "run"), "--device", "cpu"])


def test_help_of_the_trainers_is_the_configs(capsys):
    pytest.importorskip("tyro")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--learning-rate" in out and "AdamW learning rate" in out
    assert "textgym.algos.grpo_config.GRPOConfig" in out  # the description names the config
    assert "``" not in out and ":func:" not in out  # its docstrings, without reST markup


def _skip_without_training(command):
    if command in ("sft", "train"):
        for module in ("torch", "transformers"):
            pytest.importorskip(module)


@pytest.mark.parametrize("command", list(textgym.cli.SUBCOMMANDS))
def test_an_unknown_option_of_any_subcommand_is_one_line(command, capsys):
    _skip_without_training(command)
    required = {"eval": [TTT], "play": [TTT], "collect": [TTT, "--output", "x.jsonl"]}
    argv = [command, *required.get(command, []), "--colour"]
    if command == "sft":
        argv += ["--data", "x.jsonl"]
    assert_one_usage_error(capsys, argv, "Unrecognized options: --colour")


@pytest.mark.parametrize("command", ["eval", "collect", "play", "train"])
def test_env_kwargs_are_json_in_every_subcommand(command, capsys, tmp_path):
    _skip_without_training(command)
    argv = [command, TTT, "--env-kwargs", "colour=red", "--output-dir", str(tmp_path / "r")]
    if command in ("collect", "play"):
        argv = argv[:-2] + (["--output", str(tmp_path / "x.jsonl")] if command == "collect" else [])
    assert_one_usage_error(capsys, argv, "--env-kwargs is not valid JSON")


@needs_training
def test_train_takes_list_valued_env_kwargs(capsys, tmp_path, monkeypatch):
    # The env is built with domains=["email"]; the run then stops at the missing model.
    monkeypatch.chdir(tmp_path)
    argv = ["train", "textgym/Workplace-v1", "--env-kwargs", '{"domains": ["email"]}']
    argv += ["--wrappers", "--model", str(tmp_path / "none"), *TRAIN]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert_one_usage_error(capsys, argv, "Could not load model")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "expected a subcommand: list, eval, collect, play, sft, train, compare"),
        (["evaluate"], "unknown subcommand 'evaluate'"),
        (["eval", TTT, "--episodes", "x"], "--episodes: expected INT, got 'x'"),
        (["eval"], "Missing from textgym eval: ENV_ID"),
        (["list", "extra"], "Unrecognized options: extra"),
        (["eval", TTT, "--episode", "3"], "--episode 3 (perhaps you meant --episodes)"),
        (
            ["eval", TTT, "--policy", "nope"],
            "--policy: expected one of {expert,minimax,lookup_expert,random,",
        ),
        (["eval", TTT, "--progress", "maybe"], "--progress takes no value, got 'maybe'"),
        (["eval", TTT, "--seed"], "--seed: expected a value"),
    ],
)
def test_the_grammar_itself_fails_in_one_line(argv, message, capsys):
    assert_one_usage_error(capsys, argv, message)
