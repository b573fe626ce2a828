"""The outcome verifier: the state digest agrees with the table comparison."""

from hypothesis import given
from hypothesis import strategies as st

from textgym.envs.workplace.dataset import load_workplace
from textgym.envs.workplace.sandbox import COMPARED_TABLES
from textgym.envs.workplace.verify import normalized_state, replay, state_digest, state_matches

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


# ---------------------------------------------------------------- the comparison rule
# NeMo Gym compares pandas DataFrames with DataFrame.equals: row labels (the index) and NaN vs ""
# count there. textgym compares the rows' values in row order; docs/tool_envs.md says why.

TEMPLATE = load_workplace().template
ADD = {"customer_name": "Zed", "assigned_to_email": "maya.okafor@atlas.com", "status": "Lead"}
DELETE = {
    "name": "customer_relationship_manager_delete_customer",
    "arguments": {"customer_id": "00000000"},
}


def outcome(calls):
    sb = TEMPLATE.new()
    writes, errors = replay(sb, calls)
    assert errors == 0 and writes == len(calls)
    return normalized_state(sb)


def test_an_empty_optional_field_equals_an_omitted_one():
    """In the reference an omitted field is NaN and an empty one "", so the two differ there."""
    omitted = outcome([{"name": "customer_relationship_manager_add_customer", "arguments": ADD}])
    empty = dict(ADD, customer_phone="", notes="", follow_up_by="", product_interest="")
    given = outcome([{"name": "customer_relationship_manager_add_customer", "arguments": empty}])
    assert state_matches(omitted, given) and state_digest(omitted) == state_digest(given)


def test_the_same_rows_reached_by_a_different_order_of_calls_verify_equal():
    """Reference: add-then-delete leaves a gap in the pandas index, delete-then-add does not."""
    add = {"name": "customer_relationship_manager_add_customer", "arguments": ADD}
    assert state_matches(outcome([add, DELETE]), outcome([DELETE, add]))


def test_row_order_is_compared():
    empty = {t: [] for t in COMPARED_TABLES}
    rows = [("a",), ("b",)]
    assert not state_matches(dict(empty, plots=rows), dict(empty, plots=rows[::-1]))


def test_a_literal_backslash_n_reads_as_a_newline():
    """WorkBench ran action strings through eval, where "\\n" inside quotes is a newline."""
    send = {"recipient": "maya.okafor@atlas.com", "subject": "Hi"}
    real = outcome([{"name": "email_send_email", "arguments": dict(send, body="a\nb")}])
    literal = outcome([{"name": "email_send_email", "arguments": dict(send, body="a\\nb")}])
    other = outcome([{"name": "email_send_email", "arguments": dict(send, body="a b")}])
    assert state_matches(real, literal) and not state_matches(real, other)
