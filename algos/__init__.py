"""Training algorithms (import path ``textgym.algos``): SFT warm-up and the batched GRPO trainer.

Nothing is implemented here yet; see the project's issues for the trainer work.
"""

__all__: list[str] = []
