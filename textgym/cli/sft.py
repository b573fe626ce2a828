"""``textgym sft``: supervised fine-tuning of a model on chat JSONL (``textgym collect``'s
output), loss on assistant tokens only; every option is a field of
``textgym.algos.sft.SFTConfig``."""

from __future__ import annotations

from textgym.algos import sft
from textgym.cli._stops import run_training
from textgym.cli._trainer import trainer_config
from textgym.cli.training_tables import print_sft_summary

__all__ = ["Config", "run"]

Config = trainer_config(sft.SFTConfig)  # with --overwrite (textgym.cli.outputs)


def run(config: sft.SFTConfig) -> int:
    """Fine-tune; print the run's summary as a table."""
    return run_training(config, lambda c: sft.train(c), print_sft_summary)
