"""The trainers' public shape: small signatures, plain help text, one loss table."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

pytest.importorskip("torch")

from textgym.algos import losses  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402

ALGOS = Path(losses.__file__).resolve().parent


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_takes_more_than_five_positional_parameters():
    """Anything longer takes its options by keyword (after ``*``) or a state object."""
    found = []
    for path in sorted(ALGOS.glob("*.py")):
        for node in _functions(ast.parse(path.read_text())):
            names = [a.arg for a in node.args.posonlyargs + node.args.args]
            names = [n for n in names if n not in ("self", "cls")]
            if len(names) > 5:
                found.append(f"{path.name}:{node.lineno} {node.name}({', '.join(names)})")
    assert not found, found


def _field_docs(config: type) -> dict[str, str]:
    """Each field's docstring (the string after its annotation), over the class hierarchy."""
    docs: dict[str, str] = {}
    for cls in reversed(config.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
            ):
                docs[node.target.id] = after.value.value
    return docs


@pytest.mark.parametrize("config", [GRPOConfig, SFTConfig])
def test_every_option_has_plain_help_and_a_default(config):
    """tyro turns field docstrings into --help text: no reST markup, and a default for every
    option but what names the task (SFT's data file, GRPO's env)."""
    docs = _field_docs(config)
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        assert field.name in docs, f"{field.name} has no docstring"
        assert "``" not in docs[field.name] and ":class:" not in docs[field.name], field.name
        assert ":func:" not in docs[field.name], field.name
        has_default = field.default is not dataclasses.MISSING or (
            field.default_factory is not dataclasses.MISSING
        )
        assert has_default or field.name in ("data", "env_id"), field.name


def test_loss_names_come_from_the_table():
    assert typing.get_args(losses.LossType) == losses.LOSS_TYPES == tuple(losses.LOSS_VARIANTS)
    for name, variant in losses.LOSS_VARIANTS.items():
        config = GRPOConfig(model="tiny", env_id="textgym/TicTacToe-v0", loss_type=name)
        assert (config.epsilon_low, config.epsilon_high) == variant.epsilons
        assert config.scale_rewards == variant.scale_rewards[0]


def test_public_trainer_api():
    from textgym.algos import grpo, grpo_config, grpo_rollouts, grpo_update, learner

    assert "train" in grpo.__all__ and "update" in grpo_update.__all__
    assert "GRPOConfig" in grpo_config.__all__ and "evaluate" in grpo_rollouts.__all__
    assert {"Learner", "make_learner"} <= set(learner.__all__)
    assert not hasattr(grpo, "make_learner")  # one name, one home
    assert not hasattr(grpo, "_train_on") and not hasattr(grpo, "opponent_skill")
    assert "opponent_random_move_prob" in {f.name for f in dataclasses.fields(GRPOConfig)}
