"""recipes/reverse_text_split.py and reverse_text_buckets.py: the ReverseText train/test split by
task-id hash, the word-aligned windows and the per-length-bucket results."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.reverse_text import load_passages

from ..._recipe_scripts import load

passage_split = load("reverse_text_split").passage_split
passage_windows = load("reverse_text_split").passage_windows
LengthEpisode = load("reverse_text_buckets").LengthEpisode
length_bucket_summary = load("reverse_text_buckets").length_bucket_summary


def test_split_is_deterministic_disjoint_and_near_its_fraction():
    ids = [p.task_id for p in load_passages()]
    first = {i: passage_split(i) for i in ids}
    assert first == {i: passage_split(i) for i in reversed(ids)}  # order does not matter
    test = [i for i in ids if first[i] == "test"]
    assert 0.1 < len(test) / len(ids) < 0.3  # 229 passages, fraction 0.2
    assert {passage_split(i, 0.0) for i in ids} == {"train"}
    assert {passage_split(i, 1.0) for i in ids} == {"test"}
    # A larger fraction only moves passages into the test side.
    assert set(test) <= {i for i in ids if passage_split(i, 0.5) == "test"}


def test_valid_side_takes_only_training_passages():
    ids = [p.task_id for p in load_passages()]
    sides = {i: passage_split(i, 0.2, 0.15) for i in ids}
    assert {i for i in ids if sides[i] == "test"} == {i for i in ids if passage_split(i) == "test"}
    valid = [i for i in ids if sides[i] == "valid"]
    assert 0.05 < len(valid) / len(ids) < 0.25 and set(sides.values()) == {"train", "test", "valid"}
    with pytest.raises(ValueError, match=r"valid_fraction in \[0, 1 - test_fraction\]"):
        passage_split("x", 0.5, 0.6)


def test_split_refuses_a_fraction_outside_0_1():
    with pytest.raises(ValueError, match=r"test_fraction in \[0, 1\]"):
        passage_split("corpus-00000", 1.5)


@given(
    words=st.lists(st.text("abcXY,.!'", min_size=1, max_size=12), min_size=0, max_size=30),
    gaps=st.lists(st.sampled_from([" ", "  ", "\n", " \t "]), min_size=30, max_size=30),
    count=st.integers(0, 8),
    low=st.integers(1, 40),
    extra=st.integers(0, 40),
    seed=st.text(max_size=8),
)
def test_windows_are_distinct_whole_word_pieces_within_the_bounds(
    words, gaps, count, low, extra, seed
):
    text = "".join(w + g for w, g in zip(words, gaps)).strip()
    pieces = passage_windows(text, count, low, low + extra, seed=seed)
    assert len(pieces) <= count and len(set(pieces)) == len(pieces)
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    starts, ends = {a for a, _ in spans}, {b for _, b in spans}
    for piece in pieces:
        assert low <= len(piece) <= low + extra
        # A slice of the text that begins at a word's start and ends at a word's end.
        assert any(text[a : a + len(piece)] == piece and a + len(piece) in ends for a in starts)
    assert pieces == passage_windows(text, count, low, low + extra, seed=seed)


def test_windows_of_the_corpus_give_many_short_texts():
    passages = load_passages(min_chars=200)
    pieces = [w for p in passages for w in passage_windows(p.text, 5, 20, 60, seed=p.task_id)]
    assert len(pieces) >= 4 * len(passages)
    assert all(20 <= len(w) <= 60 and w == w.strip() for w in pieces)
    assert passage_windows("a" * 80, 3, 20, 60, seed="x") == []  # one word, too long


def test_windows_refuse_bad_bounds():
    with pytest.raises(ValueError, match="min_chars <= max_chars"):
        passage_windows("some text here", 2, 30, 20, seed="x")


def test_buckets_group_by_length_with_their_statistics():
    episodes = [
        LengthEpisode("a", 50, 1.0, True),
        LengthEpisode("a", 50, 0.5, False),
        LengthEpisode("b", 100, 0.25, False),
        LengthEpisode("b", 100, 0.75, False),
        LengthEpisode("c", 101, 0.9, False),
        LengthEpisode("c", 101, 0.8, False),
    ]
    rows = length_bucket_summary(episodes, edges=(100, 200), ks=(1, 2))
    assert [r["bucket"] for r in rows] == ["1-100", "101-200", "201+"]
    short, middle, long = rows
    assert (short["episodes"], short["tasks"], short["high"]) == (4, 2, 100)
    assert short["lcs"]["mean"] == pytest.approx(0.625)
    values = [1.0, 0.5, 0.25, 0.75]
    std = math.sqrt(sum((v - 0.625) ** 2 for v in values) / 3)
    assert short["lcs"]["stderr"] == pytest.approx(std / 2)
    assert short["exact"]["rate"] == 0.25
    assert short["exact"]["stderr"] == pytest.approx(math.sqrt(0.25 * 0.75 / 4))
    # pass@1 per passage (a: 1/2, b: 0), pass@2 (a: 1, b: 0), averaged over passages
    assert short["pass@1"] == pytest.approx(0.25) and short["pass@2"] == pytest.approx(0.5)
    assert middle["episodes"] == 2 and middle["lcs"]["mean"] == pytest.approx(0.85)
    assert middle["exact"]["rate"] == 0.0 and middle["pass@2"] == 0.0
    assert long["episodes"] == 0 and long["high"] is None and math.isnan(long["lcs"]["mean"])
    assert "pass@1" not in long


def test_pass_at_k_left_out_when_a_passage_has_fewer_rollouts():
    rows = length_bucket_summary([LengthEpisode("a", 5, 1.0, True)], edges=(10,), ks=(1, 4))
    assert rows[0]["pass@1"] == 1.0 and "pass@4" not in rows[0]


@pytest.mark.parametrize(
    ("edges", "episode", "match"),
    [
        ((100, 100), LengthEpisode("a", 1, 0.5, False), "strictly increasing"),
        ((0,), LengthEpisode("a", 1, 0.5, False), "strictly increasing"),
        ((100,), LengthEpisode("a", 1, 1.5, False), r"lcs in \[0, 1\]"),
    ],
)
def test_bad_edges_and_scores_are_refused(edges, episode, match):
    with pytest.raises(ValueError, match=match):
        length_bucket_summary([episode], edges)


def test_split_script_refuses_a_missing_corpus_in_one_line(tmp_path):
    script = Path(__file__).resolve().parents[3] / "recipes" / "reverse_text_split.py"
    argv = [sys.executable, str(script), "--corpus", str(tmp_path / "nope.jsonl")]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "nope.jsonl" in done.stderr
    assert not (tmp_path / "train.jsonl").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--edges", "32,x", "eval"], "comma-separated integers"), (["--edges", "32"], "EVAL_DIR")],
)
def test_buckets_bad_command_line_is_one_line_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exited:
        load("reverse_text_buckets").main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
