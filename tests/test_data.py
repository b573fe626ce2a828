"""textgym.data: file readers, the hub loader's import error, and task selection."""

import sys

import numpy as np
import pytest

from textgym.data import file_fingerprint, load_hub_rows, read_jsonl, read_paragraphs, select_task


def test_read_jsonl_skips_blank_lines_and_names_bad_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": "é"}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": "é"}]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(
        ValueError, match="rows.jsonl:2: expected a JSON object per line, got invalid JSON"
    ):
        read_jsonl(path)


def test_read_paragraphs_joins_wrapped_lines(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("\n\n  one\n two \n\n\n\nthree\n   \nfour")
    assert read_paragraphs(path) == ["one two", "three", "four"]


def test_file_fingerprint_changes_with_the_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("a")
    first = file_fingerprint(path)
    path.write_text("ab")
    assert file_fingerprint(path) != first and first[0] == str(path.resolve())
    with pytest.raises(FileNotFoundError, match="Expected a data file"):
        file_fingerprint(tmp_path)


def test_load_hub_rows_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(
        ImportError, match=r"needs the `datasets` package.*pip install \"textgym\[data\]\""
    ):
        load_hub_rows("openai/gsm8k", "main", "test")


def test_select_task():
    ids = ("a", "b", "c")
    index_of = {t: i for i, t in enumerate(ids)}
    rng = np.random.default_rng(0)
    assert select_task(None, ids, index_of, rng) in (0, 1, 2)
    assert select_task({"task_index": np.int64(2)}, ids, index_of, rng) == 2
    assert select_task({"task_id": "b"}, ids, index_of, rng) == 1
    draws = {select_task({}, ids, index_of, np.random.default_rng(s)) for s in range(50)}
    assert draws == {0, 1, 2}
    for options in ({"task_index": 3}, {"task_index": 1.0}, {"task_id": ["a"]}, {"seed": 1}):
        with pytest.raises(ValueError):
            select_task(options, ids, index_of, rng)
