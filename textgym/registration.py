"""The one explicit list of textgym's registered environments.

Ids follow Gymnasium's ``namespace/Name-vN`` form; bump ``-vN`` on any change of behaviour.
Keyword arguments given to :func:`gymnasium.make` pass through to the env's constructor.
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_DESCRIPTIONS", "register_envs"]

#: One-line description per registered id (shown by ``textgym list``).
ENV_DESCRIPTIONS: dict[str, str] = {
    "textgym/TicTacToe-v0": "play X or O against a seeded minimax opponent of controllable skill "
    "(win 1, draw 0.5, loss 0)",
    "textgym/ReverseText-v0": "reverse a paragraph character by character inside "
    "<reversed_text> tags (normalized LCS similarity in [0, 1], + 0.1 format)",
    "textgym/GSM8K-v0": "grade-school math, final answer after #### or in \\boxed{} "
    "(1 if it equals the gold number, + 0.1 format; bundled sample set unless data_path/dataset)",
    "textgym/EmailToolUse-v0": "carry out a generated email request by calling tools on a sandboxed "
    "mailbox (1 if the final mailbox equals the gold outcome)",
    "textgym/Workplace-v0": "WorkBench workplace tasks: call 27 tools on sandboxed tables "
    "(1 if the final tables equal the gold outcome; bundled sample unless data_dir)",
}


def register_envs() -> None:
    """Register every textgym env with Gymnasium (idempotent)."""
    if "textgym/TicTacToe-v0" not in gym.registry:
        gym.register(
            id="textgym/TicTacToe-v0",
            entry_point="textgym.envs.tictactoe.env:TicTacToeEnv",
            max_episode_steps=10,
            kwargs={"opponent": "minimax", "random_move_prob": 0.0, "agent_mark": "X"},
        )
    if "textgym/ReverseText-v0" not in gym.registry:
        gym.register(
            id="textgym/ReverseText-v0",
            entry_point="textgym.envs.reverse_text.env:ReverseTextEnv",
            kwargs={"min_chars": 1, "max_chars": None, "format_weight": 0.1},
        )
    if "textgym/GSM8K-v0" not in gym.registry:
        gym.register(
            id="textgym/GSM8K-v0",
            entry_point="textgym.envs.gsm8k.env:GSM8KEnv",
            kwargs={"split": "test", "dataset": "sample", "format_weight": 0.1},
        )
    if "textgym/Workplace-v0" not in gym.registry:
        gym.register(
            id="textgym/Workplace-v0",
            entry_point="textgym.envs.workplace.env:WorkplaceEnv",
            max_episode_steps=10,
            kwargs={"max_turns": 10, "max_calls_per_step": 32},
        )
    if "textgym/EmailToolUse-v0" not in gym.registry:
        gym.register(
            id="textgym/EmailToolUse-v0",
            entry_point="textgym.envs.email_tool_use.env:EmailToolUseEnv",
            max_episode_steps=10,
            kwargs={"inbox_size": 20, "distractors": 2, "num_steps": 1, "max_turns": 10},
        )
