"""The arguments of ``textgym sft`` (:class:`SFTConfig`) and the checks they pass.

Every field of :class:`SFTConfig` is an option of the command, its docstring the option's
``--help``; ``__post_init__`` raises :class:`~textgym.errors.SetupError` with the field's name
on the first setting that cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textgym.algos.checkpoints import check_checkpoint_settings
from textgym.algos.common import OptimizationConfig, check_positive_ints
from textgym.algos.sft_eval import check_eval_env
from textgym.checks import check_seed
from textgym.errors import SetupError

__all__ = ["SFTConfig"]


@dataclass(kw_only=True)
class SFTConfig(OptimizationConfig):
    """Arguments of textgym sft; every field is an option of the command."""

    data: str
    """JSONL file of chat records, each with a messages list (what textgym collect writes)."""
    model: str = "gemma-3-270m"
    """Model to fine-tune: gemma-3-270m, tiny (a small random model for tests), a local
    directory or a Hugging Face model id."""
    output_dir: str = "runs/sft"
    """Directory for the fine-tuned model (full weights, or with lora-rank above 0 only the
    LoRA adapter, which textgym loads on top of its base), metrics.jsonl and plots."""
    epochs: int = 1
    """Passes over the data."""
    batch_size: int = 16
    """Conversations per optimizer step."""
    learning_rate: float = 1e-4
    """AdamW learning rate (per optimizer step)."""
    max_length: int = 4096
    """Longest token sequence; longer conversations are dropped (and counted), never cut."""
    cover: bool = False
    """Train on a covering subset of the data: the fewest records, by greedy set cover, in
    which every prompt of the file still appears (textgym.collect.covering_records), e.g.
    expert games against mostly random opponents, whose common openings repeat."""
    seed: int = 0
    """Seed of the shuffling of the conversations and of a new LoRA adapter's initial weights;
    an integer in [0, 2**32 - 1], as for every command."""
    log_every: int = 10
    """Write metrics.jsonl every this many optimizer steps (the loss is averaged over them)."""
    save_every: int = 0
    """Also save a resumable checkpoint (output_dir/checkpoint-N) every this many optimizer
    steps (0: only on Ctrl-C or SIGTERM); the finished model is saved in output_dir itself."""
    save_total_limit: int | None = 2
    """Most checkpoint-* folders kept in output_dir (TRL's save_total_limit): the oldest are
    deleted once a new one is complete, and only the newest keeps the optimizer state. None
    keeps all."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (refused when it holds none)."""
    eval_env: str | None = None
    """Env id to evaluate the fine-tuned model in, greedily, after training (and every
    eval_every steps), as textgym train evaluates: each of the env's evaluation settings
    (tic-tac-toe: the random and the optimal opponent), eval_episodes each, no wrappers. None:
    no evaluation."""
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of eval_env (JSON on the command line)."""
    eval_episodes: int = 100
    """Episodes per evaluation setting."""
    eval_every: int = 0
    """Also evaluate every this many optimizer steps (0: only after the last)."""
    eval_max_new_tokens: int = 256
    """Most tokens the model generates per turn in an evaluation."""
    eval_data: str | None = None
    """JSONL of held-out chat records (the format of data), none of them trained on: their
    mean NLL per assistant token, the training loss's definition, is computed after each epoch
    (a stage="eval" row with heldout/loss, drawn on loss.png). None: no held-out loss."""
    early_stopping_patience: int = 0
    """With eval_data: stop after this many epochs in a row whose held-out loss is not below
    the best before them (transformers' EarlyStoppingCallback rule). 0: train every epoch."""
    load_best_model_at_end: bool = True
    """With eval_data: the model saved is the epoch with the lowest held-out loss
    (transformers' option of this name, on eval_loss); False: the last epoch's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed("seed", self.seed)
        check_positive_ints(
            self, ("epochs", "batch_size", "max_length", "log_every", "eval_episodes")
        )
        check_positive_ints(self, ("eval_max_new_tokens",))
        if self.eval_every < 0:
            raise SetupError(
                f"eval_every: expected >= 0 (0: only at the end), got {self.eval_every}"
            )
        if self.eval_env is not None:
            check_eval_env(self.eval_env, self.eval_env_kwargs)
        check_checkpoint_settings(self)
        for key in ("data", "eval_data"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise SetupError(
                    f"{key}: expected a JSONL file, got {path!r} (not found); make one with "
                    "`textgym collect`"
                )
        patience = self.early_stopping_patience
        if patience < 0 or (patience and self.eval_data is None):
            why = "" if patience < 0 else " without eval_data"
            raise SetupError(
                "early_stopping_patience: expected 0, or >= 1 with eval_data (the held-out "
                f"loss it watches), got {patience}{why}"
            )
