"""Reverse-text parsing and reward terms: tables, properties, and a check against a reference LCS."""

import difflib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.reverse_text.parsing import (
    CLOSE_TAG,
    OPEN_TAG,
    extract_reversed_text,
    is_well_formed,
)
from textgym.envs.reverse_text.rewards import format_reward, lcs_length, lcs_similarity, reverse


def reference_lcs(a: str, b: str) -> int:
    """Textbook dynamic-programming LCS length, O(len(a) * len(b))."""
    previous = [0] * (len(b) + 1)
    for char in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if char == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


@pytest.mark.parametrize(
    ("completion", "answer", "well_formed"),
    [
        ("<reversed_text>cba</reversed_text>", "cba", True),
        ("Sure! <reversed_text>\n cba \n</reversed_text> Done.", "cba", True),
        ("<reversed_text></reversed_text>", "", True),
        ("<reversed_text>x</reversed_text><reversed_text>y</reversed_text>", "y", False),
        ("<reversed_text>a<reversed_text>b</reversed_text>", "b", False),
        ("</reversed_text>oops<reversed_text>", None, False),
        ("<reversed_text>unclosed", None, False),
        ("no tags at all", None, False),
        ("", None, False),
        ("<REVERSED_TEXT>cba</REVERSED_TEXT>", None, False),
    ],
)
def test_extract_and_well_formed(completion, answer, well_formed):
    assert extract_reversed_text(completion) == answer
    assert is_well_formed(completion) is well_formed
    assert format_reward(completion) == (1.0 if well_formed else 0.0)


@pytest.mark.parametrize(
    ("answer", "target", "expected"),
    [
        ("abc", "abc", 1.0),
        ("", "abc", 0.0),
        ("", "", 1.0),
        ("abd", "abc", 2 / 3),
        ("abcx", "abc", 3 / 4),  # an extra character costs as much as a missing one
        ("ab", "abc", 2 / 3),
        ("cba", "abc", 1 / 3),
    ],
)
def test_lcs_similarity_table(answer, target, expected):
    assert lcs_similarity(answer, target) == pytest.approx(expected)


def test_lcs_is_exact_where_difflib_ratio_is_not():
    # 300 characters: difflib's autojunk drops every character that fills over 1% of b, so its
    # matching blocks miss most of the common subsequence. LCS sees all of it.
    target = ("the quick brown fox jumps over the lazy dog " * 7)[:300]
    answer = target.replace("o", "0")
    lcs = lcs_length(answer, target)
    assert lcs == len(target) - target.count("o")
    difflib_matches = sum(
        b.size for b in difflib.SequenceMatcher(None, answer, target).get_matching_blocks()
    )
    assert difflib_matches < lcs
    assert lcs_similarity(answer, target) == pytest.approx(lcs / 300)


def test_reverse_is_code_point_reversal():
    assert reverse("Abc, déf!") == "!féd ,cbA"
    assert reverse("") == ""


@given(st.text(max_size=30), st.text(max_size=30))
def test_lcs_length_matches_reference(a, b):
    assert lcs_length(a, b) == reference_lcs(a, b)


@given(st.text(), st.text())
def test_similarity_in_unit_interval_symmetric_and_one_iff_equal(a, b):
    sim = lcs_similarity(a, b)
    assert 0.0 <= sim <= 1.0
    assert sim == lcs_similarity(b, a)
    assert (sim == 1.0) is (a == b)


@given(st.text())
def test_similarity_is_one_for_identical_and_zero_against_empty(text):
    assert lcs_similarity(text, text) == 1.0
    assert lcs_similarity(reverse(text), reverse(text)) == 1.0
    if text:
        assert lcs_similarity("", text) == 0.0


@given(st.text())
def test_parsers_accept_any_text(completion):
    answer = extract_reversed_text(completion)
    assert answer is None or isinstance(answer, str)
    assert isinstance(is_well_formed(completion), bool)
    assert format_reward(completion) in (0.0, 1.0)


@given(st.text(), st.text(), st.text())
def test_parser_reads_the_last_pair(before, inner, after):
    completion = f"{before}{OPEN_TAG}{inner}{CLOSE_TAG}{after}"
    if CLOSE_TAG not in after and OPEN_TAG not in inner and CLOSE_TAG not in inner:
        assert extract_reversed_text(completion) == inner.strip()
