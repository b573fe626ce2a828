"""Tokens of tic-tac-toe SFT conversations with compact and full prompts (Gemma 3's tokenizer).

Plays ``--games`` minimax games (opponent ``random_move_prob`` 0.5, the agent's mark drawn per
game, as the pipeline's SFT data) in each prompt style and prints the mean tokens of a whole
SFT conversation and of the first prompt. Input of issue 17's prompt-style choice
(benchmarks/results/tictactoe_prompt_style_cpu.json).

Run: ``python benchmarks/tictactoe_prompt_tokens.py``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

import textgym  # noqa: F401
from textgym.builder import EnvRecipe
from textgym.cli.usage import script_config
from textgym.collect import sft_record
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.models import load_model
from textgym.rollout import rollout
from textgym.tokens import ChatTokenizer


@dataclass
class Config:
    """The command line of this benchmark."""

    games: int = 100
    """Minimax games per prompt style."""


def main(argv: list[str] | None = None) -> None:
    args = script_config(Config, argv, "tictactoe_prompt_tokens.py", __doc__)
    _, tokenizer = load_model("gemma-3-270m")
    chat = ChatTokenizer(tokenizer)
    result = {}
    for style in ("compact", "full"):
        kwargs = {"random_move_prob": 0.5, "prompt_style": style, "agent_mark": "random"}
        make = EnvRecipe("textgym/TicTacToe-v0", kwargs).make
        games = rollout(make, MinimaxPolicy(seed=0, reasoning=False), range(args.games))
        records = [sft_record(g)["messages"] for g in games]
        result[style] = {
            "conversation_tokens_mean": statistics.mean(
                len(chat.encode(m, add_generation_prompt=False)) for m in records
            ),
            "first_prompt_tokens_mean": statistics.mean(len(chat.prompt(m[:2])) for m in records),
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
