"""``textgym train``: GRPO training of an LLM policy on an env (ENV_ID); every option is a field
of ``textgym.algos.grpo_config.GRPOConfig``."""

from __future__ import annotations

from textgym.algos import grpo
from textgym.algos.grpo_config import GRPOConfig
from textgym.cli._stops import run_training
from textgym.cli._trainer import trainer_config
from textgym.cli.training_tables import print_train_summary

__all__ = ["Config", "run"]

Config = trainer_config(GRPOConfig)  # with --overwrite (textgym.cli.outputs)


def run(config: GRPOConfig) -> int:
    """Train; print the run's summary and its last evaluation as tables."""
    return run_training(config, lambda c: grpo.train(c), print_train_summary)
