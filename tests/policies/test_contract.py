"""The policy contract is declared and every built-in policy keeps it: ``name`` and
``tokens_generated`` are read, never probed."""

from __future__ import annotations

import typing

import pytest

from textgym.builder import make_policy, policy_names
from textgym.policies import Policy

# The policies that need no model, server or terminal; hf, openai and human are checked in
# their own tests (test_hf, test_openai_compat), which read tokens_generated after a call.
CHEAP = ("random", "minimax", "gold")


def test_protocol_declares_what_callers_read():
    hints = typing.get_type_hints(Policy)
    assert hints["name"] is str
    assert hints["tokens_generated"] == (int | None)


@pytest.mark.parametrize("name", CHEAP)
def test_scripted_policies_keep_the_contract(name):
    assert name in policy_names()
    policy = make_policy(name)
    assert policy.name == name
    assert policy.tokens_generated is None  # no model tokens: tokens/s is left out, not 0


def test_the_command_line_offers_every_policy_the_builder_builds():
    # --policy's choices are a Literal (tyro lists them in --help): they must not drift from
    # the builder's names, the registered envs' own experts included.
    from textgym.cli.evaluate import EvalConfig

    choices, _ = typing.get_args(typing.get_type_hints(EvalConfig)["policy"])  # Literal | None
    offered = set(typing.get_args(choices))
    assert offered - {"expert"} == set(policy_names()) - {"human"}
