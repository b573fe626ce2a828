"""A corpus of bad invocations across every subcommand: each ends in exactly one
``textgym: error:`` line on stderr, no traceback, and exit code 2, and is found before any
episode is played.

The rows are generated: every subcommand with unknown options, every env-taking subcommand with
bad env ids and bad ``--env-kwargs``, ``eval`` and ``collect`` with bad numbers, policies and
paths, the trainers with bad settings and devices, ``compare`` with bad runs. They run
in-process through :func:`textgym.cli.main`; a few run as real subprocesses.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import textgym.cli.batch_play
from textgym.cli import main

TTT = "textgym/TicTacToe-v0"
DEEP = "[" * 100_000 + "]" * 100_000
FAST = ["--episodes", "2", "--no-progress"]
TRAINERS = ["--device", "cpu", "--output-dir", "{tmp}/run"]


def _rows() -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []

    def add(name: str, argv: list[str]) -> None:
        rows.append((name, argv))

    # The top level.
    for argv in ([], ["nope"], ["evl"], ["--bogus"], ["EVAL", TTT]):
        add(f"top:{' '.join(argv) or 'nothing'}", argv)
    # Unknown options, everywhere.
    base = {
        "list": ["list"],
        "eval": ["eval", TTT, *FAST],
        "collect": ["collect", TTT, *FAST, "--output", "{tmp}/out.jsonl"],
        "play": ["play", TTT],
        "sft": ["sft", "--data", "{tmp}/sft.jsonl", *TRAINERS],
        "train": ["train", TTT, *TRAINERS],
        "compare": ["compare", "{tmp}/runA"],
    }
    for sub, argv in base.items():
        for bad in (["--no-such-option"], ["--episodes-please", "3"], ["-z"]):
            add(f"{sub}:unknown{bad[0]}", [*argv, *bad])
    # Env ids and kwargs, on every subcommand that takes an env.
    takes_env = {
        "eval": lambda env: ["eval", env, *FAST],
        "collect": lambda env: ["collect", env, *FAST, "--output", "{tmp}/out.jsonl"],
        "play": lambda env: ["play", env],
        "train": lambda env: ["train", env, *TRAINERS],
    }
    for sub, make in takes_env.items():
        for env in (
            "textgym/Nope-v0",
            "nope",
            "textgym/TicTacToe-v99",
            "no_such_module_xyz:Thing-v0",
            "textgym/TicTacToe",
        ):
            add(f"{sub}:env={env}", make(env))
        for kwargs in ("{", "[]", "1", '"x"', "null", '{"colour": "red"}', DEEP):
            add(f"{sub}:kwargs={kwargs[:12]}", [*make(TTT), "--env-kwargs", kwargs])
        add(f"{sub}:wrapper", [*make(TTT), "--wrappers", "no_such_wrapper"])
    # Numbers and policies of eval and collect.
    for sub in ("eval", "collect"):
        argv = base[sub][:2] + (["--output", "{tmp}/out.jsonl"] if sub == "collect" else [])
        for option, value in (
            ("--episodes", "0"),
            ("--episodes", "-3"),
            ("--episodes", "abc"),
            ("--episodes", "1.5"),
            ("--seed", "-1"),
            ("--seed", "x"),
            ("--rollout-batch-size", "0"),
            ("--rollouts-per-task", "0"),
            ("--temperature", "warm"),
            ("--success-threshold", "nan"),
            ("--max-new-tokens", "many"),
            ("--policy", "nope"),
            ("--policy", "gold"),
            ("--concurrency", "3"),
            ("--timeout-s", "5"),
            ("--dtype", "float8"),
            ("--progress", "maybe"),
        ):
            add(f"{sub}:{option}={value}", [*argv, "--no-progress", option, value])
        add(f"{sub}:openai-timeout-nan", [*argv, "--policy", "openai", "--timeout-s", "nan"])
        add(f"{sub}:openai-concurrency-0", [*argv, "--policy", "openai", "--concurrency", "0"])
        add(f"{sub}:minimax-on-gsm8k", [sub, "textgym/GSM8K-v0", *argv[2:], "--policy", "minimax"])
        add(f"{sub}:unknown-task-id", [sub, "textgym/GSM8K-v0", *argv[2:], "--policy", "gold", "--task-ids", "no-such-task"])  # fmt: skip
    # Paths.
    add("eval:output-dir-is-a-file", ["eval", TTT, *FAST, "--output-dir", "{tmp}/file"])
    add("eval:output-dir-under-a-file", ["eval", TTT, *FAST, "--output-dir", "{tmp}/file/run"])
    add("eval:output-dir-not-empty", ["eval", TTT, *FAST, "--output-dir", "{tmp}/full"])
    add("eval:overwrite-without-output", ["eval", TTT, *FAST, "--overwrite"])
    add("collect:output-is-a-dir", ["collect", TTT, *FAST, "--output", "{tmp}"])
    add("collect:output-under-a-file", ["collect", TTT, *FAST, "--output", "{tmp}/file/x.jsonl"])
    add("collect:output-not-empty", ["collect", TTT, *FAST, "--output", "{tmp}/file"])
    add("collect:bad-filter", ["collect", TTT, *FAST, "--output", "{tmp}/o.jsonl", "--filter", "win and"])  # fmt: skip
    # play.
    add("play:negative-seed", ["play", TTT, "--seed", "-1"])
    add("play:against-nope", ["play", TTT, "--against", "nope"])
    # The trainers.
    for sub in ("sft", "train"):
        argv = base[sub]
        for option, value in (
            ("--learning-rate", "nan"),
            ("--learning-rate", "-1"),
            ("--learning-rate", "inf"),
            ("--micro-batch-size", "0"),
            ("--max-grad-norm", "-1"),
            ("--device", "tpu"),
            ("--device", "cuda:7"),
            ("--device", "gpu"),
            ("--lora-rank", "-2"),
            ("--seed", "many"),
        ):
            add(f"{sub}:{option}={value}", [*argv, option, value])
        add(f"{sub}:output-dir-is-a-file", [*argv[:-1], "{tmp}/file"])
        add(f"{sub}:output-dir-not-empty", [*argv[:-1], "{tmp}/full"])
    add("sft:data-missing", ["sft", "--data", "{tmp}/none.jsonl", *TRAINERS])
    add("sft:data-not-json", ["sft", "--data", "{tmp}/file", *TRAINERS])
    add("sft:no-data", ["sft", *TRAINERS])
    for option, value in (
        ("--steps", "0"),
        ("--group-size", "0"),
        ("--groups-per-step", "0"),
        ("--temperature", "-1"),
        ("--beta", "nan"),
        ("--loss-type", "nope"),
        ("--scale-rewards", "nope"),
    ):
        add(f"train:{option}={value}", [*base["train"], option, value])
    add("train:resume-and-overwrite", [*base["train"], "--resume", "--overwrite"])
    # compare.
    add("compare:nothing", ["compare"])
    add("compare:missing-run", ["compare", "{tmp}/no-such-run"])
    add("compare:a-file", ["compare", "{tmp}/file"])
    add("compare:empty-run", ["compare", "{tmp}/empty"])
    return rows


ROWS = _rows()


def test_the_corpus_is_large_and_covers_every_subcommand():
    assert len(ROWS) >= 120
    firsts = {argv[0] for _, argv in ROWS if argv}
    assert {"list", "eval", "collect", "play", "sft", "train", "compare"} <= firsts


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not JSON\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "summary.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    chat = [{"role": "user", "content": "4?"}, {"role": "assistant", "content": "<move>4</move>"}]
    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": chat}) + "\n")

    def played(*args, **kwargs):
        raise AssertionError("the error must be found before any episode is played")

    monkeypatch.setattr(textgym.cli.batch_play, "iter_rollout", played)
    monkeypatch.chdir(tmp_path)  # a trainer that got as far as training would write here
    return tmp_path


@pytest.mark.parametrize("argv", [argv for _, argv in ROWS], ids=[name for name, _ in ROWS])
def test_a_bad_invocation_is_one_line_and_exit_2(argv, workdir, capsys):
    if argv and argv[0] in ("sft", "train"):
        pytest.importorskip("torch")
    argv = [arg.replace("{tmp}", str(workdir)) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("textgym: error: ") and len(lines[0]) < 2000, err
    assert not (workdir / "run").exists() or not list((workdir / "run").iterdir())


SUBPROCESS = [
    ["eval", "textgym/Nope-v0"],
    ["collect", TTT, "--episodes", "0", "--output", "x.jsonl"],
    ["sft", "--data", "missing.jsonl", "--device", "tpu"],
    ["eval", TTT, "--env-kwargs", "[" * 30_000 + "]" * 30_000],  # one argument is < 128 KiB
]


@pytest.mark.subprocess
@pytest.mark.parametrize("argv", SUBPROCESS, ids=[" ".join(a)[:40] for a in SUBPROCESS])
def test_a_real_process_prints_one_line_and_exits_2(argv, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "textgym.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("textgym: error: ") and "Traceback" not in done.stderr
    assert not list(Path(tmp_path).iterdir())  # nothing written
