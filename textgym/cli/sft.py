"""``textgym sft``: supervised fine-tuning of a model on chat JSONL (``textgym collect``'s
output), loss on assistant tokens only; every option is a field of
``textgym.algos.sft_config.SFTConfig``."""

from __future__ import annotations

import dataclasses

from textgym.algos import sft
from textgym.algos.sft_config import SFTConfig
from textgym.cli._stops import run_training
from textgym.cli._trainer import trainer_config
from textgym.cli.training_tables import print_sft_summary
from textgym.data import check_data_file

__all__ = ["Config", "SFTCommandConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class SFTCommandConfig(SFTConfig):
    # The command's config: --data is checked before anything loads
    # (textgym.data.check_data_file): a path that is missing, a directory, a FIFO or a device
    # (/dev/null), unreadable, or not UTF-8 text is refused in one line naming the option.
    __doc__ = SFTConfig.__doc__

    def __post_init__(self) -> None:
        """Check ``--data`` first (its messages name the option), then the trainer's own checks.

        Raises:
            ValueError: ``--data`` is not a readable UTF-8 file, or the config's validation.
        """
        check_data_file(self.data, "--data", hint="make one with `textgym collect`")
        super().__post_init__()


Config = trainer_config(SFTCommandConfig)  # with --overwrite (textgym.cli.outputs)


def run(config: SFTConfig) -> int:
    """Fine-tune; print the run's summary as a table."""
    return run_training(config, lambda c: sft.train(c), print_sft_summary)
