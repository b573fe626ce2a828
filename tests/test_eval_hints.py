"""The hint ``textgym eval`` prints after a base model's run names the env's own expert policy:
``gold`` on ReverseText, ``minimax`` on tic-tac-toe, none where there is none; never
``--policy minimax`` on an env it cannot play."""

import math

import pytest

from textgym.cli import main
from textgym.cli.evaluate import verdict


def summary(env_id):
    return {
        "env_id": env_id,
        "policy": "hf",
        "model": "tiny",
        "episodes": 2,
        "invalid_action_rate": 1.0,
        "outcomes": {"win": math.nan, "draw": math.nan, "loss": math.nan},
        "mean_return": 0.0,
        "truncated_rate": 0.0,
    }


@pytest.mark.parametrize(
    ("env_id", "expert", "hint"),
    [
        (
            "textgym/TicTacToe-v0",
            "minimax",
            "`textgym collect textgym/TicTacToe-v0 --policy minimax "
            "--output minimax-TicTacToe-v0.jsonl`",
        ),
        (
            "textgym/GSM8K-v0",
            "gold",
            "`textgym collect textgym/GSM8K-v0 --policy gold --output gold-GSM8K-v0.jsonl`",
        ),
        (
            "mypkg.plain:Plain-v0",
            None,
            "`textgym train mypkg.plain:Plain-v0` (GRPO; the env has no expert",
        ),
    ],
)
def test_the_hint_names_the_envs_expert(env_id, expert, hint):
    text = verdict(summary(env_id), expert=expert)
    assert hint in text
    assert expert == "minimax" or "minimax" not in text


def test_a_base_models_eval_on_reverse_text_hints_at_gold(capsys):
    pytest.importorskip("transformers", reason="needs the llm extra: pip install 'textgym[llm]'")
    argv = ["eval", "textgym/ReverseText-v0", "--policy", "hf", "--model", "tiny", "--limit", "1"]
    assert main([*argv, "--max-new-tokens", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "`textgym collect textgym/ReverseText-v0 --policy gold --output " in out
    assert "minimax" not in out
