"""The outcome verifier: the state digest agrees with the table comparison."""

from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.workplace.sandbox import COMPARED_TABLES
from textgym.envs.workplace.verify import state_digest, state_matches

ROWS = st.lists(
    st.tuples(
        st.sampled_from(["", "a", "b", "a,b", '"', "\n", "\ud800"]),
        st.sampled_from(["", "a", "ab"]),
    ),
    max_size=3,
)
STATES = st.fixed_dictionaries(dict.fromkeys(COMPARED_TABLES, ROWS))


@given(STATES, STATES)
def test_digests_are_equal_exactly_when_the_states_match(a, b):
    assert len(state_digest(a)) == 32
    assert (state_digest(a) == state_digest(b)) == state_matches(a, b)


def test_rows_do_not_run_into_each_other_or_into_the_next_table():
    empty = {t: [] for t in COMPARED_TABLES}
    one = dict(empty, emails=[("a", "b")])
    assert state_digest(one) != state_digest(dict(empty, emails=[("ab",)]))
    assert state_digest(one) != state_digest(dict(empty, plots=[("a", "b")]))
    assert state_digest(one) != state_digest(dict(empty, emails=[("a",), ("b",)]))
