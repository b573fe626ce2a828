"""parse_timestamp: the year-first numeric part of what NeMo Gym's tools read with pandas.

The reference validates ``event_start`` and search bounds with ``pandas.Timestamp``. textgym does
not depend on pandas; where pandas is installed, these tests check that every timestamp textgym
reads, pandas reads as the same wall-clock time and offset (textgym never accepts what the
reference refuses), and list what pandas reads that textgym refuses on purpose.
"""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textgym.envs.workplace.timestamps import parse_timestamp


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-12-01 10:00:00", datetime(2023, 12, 1, 10)),
        ("2023/12/01 10:00:00", datetime(2023, 12, 1, 10)),
        ("2023.12.1", datetime(2023, 12, 1)),
        ("20231201T103000", datetime(2023, 12, 1, 10, 30)),
        (" 2023-12-01T10:00:00.5 ", datetime(2023, 12, 1, 10, 0, 0, 500000)),
        ("2023-12-01 12 AM", datetime(2023, 12, 1, 0)),
        ("2023-12-01 1:05 pm", datetime(2023, 12, 1, 13, 5)),
        ("2023-12-01T10:00Z", datetime(2023, 12, 1, 10, tzinfo=timezone.utc)),
        (
            "2023-12-01 10:00 -05:30",
            datetime(2023, 12, 1, 10, tzinfo=timezone(-timedelta(hours=5.5))),
        ),
        ("2023-W48-5", None),
        ("2023-335", None),
        ("12/01/2023", None),
        ("1 Dec 2023", None),
        ("2023-12", None),
        ("10:00", None),
        ("today", None),
        ("2023-12-01 13:00 PM", None),
        ("2023-12-01 24:00", None),
        ("2023-12-01 10:00 +24:00", None),
        ("2023-12-01 10:00:00" + " " * 100, None),  # longer than any timestamp: not read
        ("２０２３-12-01", None),  # full-width digits
        ("", None),
    ],
)
def test_table(text, expected):
    assert parse_timestamp(text) == expected


DATES = st.builds(
    lambda y, m, d, sep, pad: (
        f"{y:04d}{m:02d}{d:02d}"
        if sep == ""
        else sep.join((f"{y:04d}", f"{m:0{pad}d}", f"{d:0{pad}d}"))
    ),
    st.integers(1700, 2200),
    st.integers(1, 12),
    st.integers(1, 31),
    st.sampled_from(["-", "/", ".", ""]),
    st.sampled_from([1, 2]),
)
TIMES = st.one_of(
    st.just(""),
    st.builds(
        lambda sep, h, m, s, f, ampm, tz: f"{sep}{h}{m}{s}{f}{ampm}{tz}",
        st.sampled_from(["T", " ", "  "]),
        st.sampled_from(["0", "9", "09", "10", "12", "23"]),
        st.sampled_from(["", ":00", ":30", ":59"]),
        st.sampled_from(["", ":00", ":45"]),
        st.just(""),
        st.sampled_from(["", " AM", "pm", " PM"]),
        st.sampled_from(["", "Z", " UTC", "+01:00", "-0530", "+02"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(DATES, TIMES)
def test_what_textgym_reads_pandas_reads_alike(date, time):
    pd = pytest.importorskip("pandas")
    text = date + time
    ours = parse_timestamp(text)
    try:
        theirs = pd.Timestamp(text)
    except (ValueError, OverflowError):
        theirs = None
    if ours is None:
        return  # refusing more than the reference is allowed (documented above)
    assert theirs is not None, text
    assert theirs.to_pydatetime().replace(tzinfo=None) == ours.replace(tzinfo=None), text
    assert (theirs.utcoffset() is None) == (ours.utcoffset() is None), text
    if ours.utcoffset() is not None:
        assert theirs.utcoffset() == ours.utcoffset(), text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-/.: TZAPMapm+", max_size=30))
def test_never_accepts_what_pandas_refuses(text):
    pd = pytest.importorskip("pandas")
    ours = parse_timestamp(text)
    if ours is not None:
        assert pd.Timestamp(text).to_pydatetime().replace(tzinfo=None) == ours.replace(tzinfo=None)


def test_linear_on_a_long_input():
    assert parse_timestamp("2023-12-01 " + "1" * 1_000_000) is None
