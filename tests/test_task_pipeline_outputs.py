"""``benchmarks/task_pipeline.py`` follows the output rules (issue 52 item 1), in-process and
without training: a bad argument is one line and exit 2, a user's files in the work dir
(``data/*.jsonl``, ``sft_data.jsonl``, ``report.html``) and the PNG beside ``--output`` are
refused and left byte-identical, the script's own are replaced, and ``benchmarks/results/`` is
written only with ``--update-results``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import task_pipeline  # noqa: E402  (a script beside the benchmarks, not a package)
from _study_outputs import run_main  # noqa: E402

from ._study import USER, one_error_line  # noqa: E402


@pytest.mark.parametrize(
    "bad",
    [
        ["--test-fraction", "2"],
        ["--test-fraction", "0"],
        ["--curriculum", "[]"],
        ["--curriculum", "{}"],
        ["--curriculum", "not json"],
        ["--curriculum", '[{"steps": 0}]'],
        ["--curriculum", '[{"steps": 1.5}]'],
        ["--curriculum", '[{"steps": true}]'],
        ["--curriculum", '[{"steps": 1, "env_kwargs": []}]'],
        ["--curriculum", "[1]"],
        ["--curriculum", "[" * 100_000],
        ["--eval-env-kwargs", "[]"],
        ["--eval-episodes", "0"],
        ["--batch-size", "0"],
        ["--device", "tpu"],
        ["--device", "cuda:x"],
        ["--sft-lr", "0"],
        ["--grpo-lr", "nan"],
        ["--grpo-time-limit", "-1"],
        ["--temperature", "-1"],
        ["--seed", "-1"],
        ["--seed", "4294967295"],  # stage 1 would train with 2**32
        ["--windows", "-1"],
        ["--stage", "nope"],
        *(
            [flag, "0"]
            for flag in (
                "--window-min-chars",
                "--sft-episodes",
                "--sft-epochs",
                "--sft-batch-size",
                "--groups-per-step",
                "--group-size",
                "--micro-batch-size",
                "--micro-batch-tokens",
                "--max-new-tokens",
                "--rollouts-per-task",
                "--eval-tasks",
                "--eval-every-episodes",
            )
        ),
        ["--group-size", "1"],
        ["--lora-rank", "-1"],
        ["--eval-every", "x"],
    ],
)
def test_each_bad_argument_is_one_line_and_exit_2(bad, tmp_path, capsys):
    argv = ["reverse_text", "--work-dir", str(tmp_path / "w"), "--stage", "report", *bad]
    try:
        code = run_main(task_pipeline.main, argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    line = one_error_line(capsys)
    assert len(line) < 600
    assert not (tmp_path / "w").exists()  # refused before anything is made


def test_report_on_an_empty_work_dir_is_one_line(tmp_path, capsys):
    argv = ["reverse_text", "--work-dir", str(tmp_path), "--stage", "report"]
    assert run_main(task_pipeline.main, argv) == 2
    assert "no stage results" in one_error_line(capsys)


def _args(tmp_path: Path, *extra: str):
    return task_pipeline._checked(
        task_pipeline.parse_args(["reverse_text", "--work-dir", str(tmp_path), *extra])
    )


@pytest.mark.parametrize("side", ["train", "test"])
@pytest.mark.parametrize("how", ["file", "symlink", "folder"])
def test_the_split_keeps_a_users_data_files(side, how, tmp_path):
    user, target = tmp_path / "data" / f"{side}.jsonl", tmp_path / "elsewhere"
    user.parent.mkdir()
    target.write_bytes(USER)
    {"file": lambda: user.write_bytes(USER), "symlink": lambda: user.symlink_to(target)}.get(
        how, user.mkdir
    )()
    with pytest.raises(task_pipeline.SetupError, match="nothing was replaced"):
        task_pipeline._split_files(_args(tmp_path), tmp_path)
    assert target.read_bytes() == USER
    assert how != "file" or user.read_bytes() == USER
    assert not any(p.name.endswith(".jsonl") and p != user for p in user.parent.iterdir())


def test_the_split_replaces_its_own_files_and_not_through_a_hard_link(tmp_path):
    first = task_pipeline._split_files(_args(tmp_path, "--windows", "0"), tmp_path)
    again = task_pipeline._split_files(_args(tmp_path, "--windows", "0"), tmp_path)
    assert first == again  # the same bytes: no refusal
    linked = tmp_path / "my_copy.jsonl"
    os.link(first["train"], linked)
    before = linked.read_bytes()
    paths = task_pipeline._split_files(_args(tmp_path, "--windows", "2"), tmp_path)
    assert paths["train"].read_bytes() != before  # replaced: its bytes are in the manifest
    assert linked.read_bytes() == before  # the user's other name keeps the old file
    paths["train"].write_bytes(USER)  # edited by the user since: no longer the script's
    with pytest.raises(task_pipeline.SetupError, match="nothing was replaced"):
        task_pipeline._split_files(_args(tmp_path, "--windows", "0"), tmp_path)
    assert paths["train"].read_bytes() == USER


def test_a_foreign_manifest_is_refused_and_kept(tmp_path):
    task_pipeline._split_files(_args(tmp_path, "--windows", "0"), tmp_path)
    manifest = tmp_path / ".task_pipeline-files.json"
    manifest.write_bytes(USER)
    with pytest.raises(task_pipeline.SetupError, match="manifest"):
        task_pipeline._split_files(_args(tmp_path, "--windows", "1"), tmp_path)
    assert manifest.read_bytes() == USER


@pytest.mark.parametrize("user_file", ["sft_data.jsonl", "sft_data/part-0.jsonl"])
def test_sft_data_keeps_a_users_files_and_collects_nothing(user_file, tmp_path, monkeypatch):
    (tmp_path / user_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / user_file).write_bytes(USER)
    monkeypatch.setattr(task_pipeline, "_run", lambda *a: pytest.fail(f"ran {a[:1]}"))
    with pytest.raises(task_pipeline.SetupError, match="nothing was replaced"):
        task_pipeline.stage_sft_data(_args(tmp_path, "--smoke"), tmp_path)
    assert (tmp_path / user_file).read_bytes() == USER


def _fake_report(*argv):
    assert argv[0] == "report"
    Path(argv[argv.index("--output") + 1]).write_text("<html>report</html>")


def _report(work: Path, *extra: str) -> list[str]:
    return ["reverse_text", "--smoke", "--work-dir", str(work), "--stage", "report", *extra]


@pytest.fixture
def work(tmp_path, monkeypatch):
    work = tmp_path / "w"
    work.mkdir()
    (work / "sft-data.json").write_text('{"data": "x", "episodes": 0}')
    monkeypatch.setattr(task_pipeline, "_run", _fake_report)
    return work


def test_output_never_touches_a_users_png_beside_it(work, tmp_path, capsys):
    d = tmp_path / "D"
    d.mkdir()
    (d / "mine.png").write_bytes(USER)
    assert run_main(task_pipeline.main, _report(work, "--output", str(d / "mine.json"))) == 2
    assert "mine.png" in one_error_line(capsys)
    assert (d / "mine.png").read_bytes() == USER and not (d / "mine.json").exists()
    assert not (work / "report.html").exists()  # refused before the report stage ran


def test_the_report_replaces_only_its_own_png_and_writes_into_the_work_dir(work, capsys):
    committed = sorted((REPO / "benchmarks" / "results").glob("task_pipeline_*"))
    before = {p: p.read_bytes() for p in committed}
    for _ in range(2):  # the second run replaces the first one's record, PNG and report.html
        assert run_main(task_pipeline.main, _report(work)) == 0
    out = work / "task_pipeline_reverse_text_tiny_cpu.json"
    record = json.loads(out.read_text())
    assert record["benchmark"] == "task_pipeline" and record["plot"]["file"] == out.stem + ".png"
    png = out.with_suffix(".png")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert {p: p.read_bytes() for p in committed} == before
    png.write_bytes(USER)  # the user's picture now: refused, kept
    capsys.readouterr()
    assert run_main(task_pipeline.main, _report(work)) == 2
    one_error_line(capsys)
    assert png.read_bytes() == USER


def test_a_users_report_html_is_kept(work, capsys):
    (work / "report.html").write_bytes(USER)
    assert run_main(task_pipeline.main, _report(work)) == 2
    assert "report.html" in one_error_line(capsys)
    assert (work / "report.html").read_bytes() == USER


def test_an_output_that_is_not_our_record_is_refused(work, tmp_path, capsys):
    out = tmp_path / "mine.json"
    out.write_text('{"mine": 1}')
    assert run_main(task_pipeline.main, _report(work, "--output", str(out))) == 2
    one_error_line(capsys)
    assert out.read_text() == '{"mine": 1}'


def test_results_are_read_only_without_update_results(work, capsys):
    out = REPO / "benchmarks" / "results" / "h11_never_written.json"
    assert run_main(task_pipeline.main, _report(work, "--output", str(out))) == 2
    assert "--update-results" in one_error_line(capsys) and not out.exists()


def test_a_corpus_is_split_with_each_text_once_and_none_on_both_sides(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    texts = [f"passage number {i} says hello" for i in range(40)] * 2  # every text twice
    corpus.write_text(
        "".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    args = _args(tmp_path, "--corpus", str(corpus), "--windows", "1")
    paths = task_pipeline._split_files(args, tmp_path)
    sides = {
        k: [json.loads(line)["text"] for line in v.read_text().splitlines()]
        for k, v in paths.items()
    }
    assert sides["train"] and sides["test"]
    for rows in sides.values():
        assert len(rows) == len(set(rows))  # each text once
    assert not set(sides["train"]) & set(sides["test"])  # none held out and trained on
    assert set(sides["train"]) | set(sides["test"]) >= set(texts)


def test_an_unreadable_corpus_is_one_line(tmp_path, capsys):
    argv = [
        "reverse_text",
        "--work-dir",
        str(tmp_path / "w"),
        "--corpus",
        str(tmp_path / "no.jsonl"),
    ]
    assert run_main(task_pipeline.main, [*argv, "--stage", "report"]) == 2
    assert "--corpus" in one_error_line(capsys)
