"""Result files: whole JSONL records after an interruption, up-front output checks."""

import json
import os
import signal

import pytest

from textgym.results import check_dir, check_file, hold_interrupts, open_jsonl, write_json


def test_jsonl_keeps_whole_records_when_a_write_stops_half_way(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt), open_jsonl(path) as writer:
        writer.write(json.dumps({"a": 1}))
        writer.write(json.dumps({"b": "é"}))
        writer._fh.write(b'{"half": ')  # what a write cut short leaves behind
        raise KeyboardInterrupt
    assert writer.count == 2
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == [
        {"a": 1},
        {"b": "é"},
    ]


def test_each_record_is_on_disk_once_written(tmp_path):
    path = tmp_path / "out.jsonl"
    with open_jsonl(path) as writer:
        writer.write("{}")
        assert path.read_text() == "{}\n"  # flushed, not waiting for the end of the run


def test_hold_interrupts_finishes_the_block_then_raises():
    done = []
    with pytest.raises(KeyboardInterrupt), hold_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("after the signal")
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with hold_interrupts():
        done.append("no signal")
    assert done[-1] == "no signal"


def test_write_json_replaces_in_one_step(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    write_json(path, {"complete": False, "episodes": 3})
    assert json.loads(path.read_text()) == {"complete": False, "episodes": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_check_dir_creates_it_or_names_the_problem(tmp_path):
    check_dir(tmp_path / "a" / "b", "--output")
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"--output .*file is a file; expected a directory"):
        check_dir(tmp_path / "file", "--output")
    with pytest.raises(
        ValueError, match=r"cannot write to --output .*: .*file is a file, not a directory"
    ):
        check_dir(tmp_path / "file" / "run", "--output")


def test_check_file_leaves_files_as_they_are(tmp_path):
    existing = tmp_path / "old.jsonl"
    existing.write_text("kept\n")
    check_file(existing, "--output")
    assert existing.read_text() == "kept\n"
    check_file(tmp_path / "new" / "sft.jsonl", "--output")
    assert (tmp_path / "new").is_dir() and not (tmp_path / "new" / "sft.jsonl").exists()
    with pytest.raises(
        ValueError, match=r"--output .* is a directory; expected a file, e.g. .*sft.jsonl"
    ):
        check_file(tmp_path, "--output")
    with pytest.raises(
        ValueError, match=r"cannot write --output .*: .*old.jsonl is a file, not a directory"
    ):
        check_file(existing / "sft.jsonl", "--output")
