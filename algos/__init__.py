"""Training algorithms (import path ``textgym.algos``): SFT warm-up and the batched GRPO trainer.

Modules, each importable on its own (they need the ``llm`` and ``train`` extras: torch,
transformers, peft, tyro):

- :mod:`textgym.algos.sft`: supervised fine-tuning on chat records (``textgym sft``):
  ``SFTConfig`` and ``train``.
- :mod:`textgym.algos.grpo`: GRPO on any textgym env (``textgym train``): ``GRPOConfig``,
  ``Learner`` / ``make_learner`` (the learner state), ``update`` (one update on a batch of
  trajectories), ``train`` (the loop) and ``evaluate``.
- :mod:`textgym.algos.losses`: the maths as pure torch functions: group advantages, the k3 KL,
  the table of policy-loss variants (GRPO, DAPO, Dr. GRPO, GSPO, CISPO) and chunked log-probs.
- :mod:`textgym.algos.common`: what both trainers share: their optimizer config base, config
  checks, the guards of an optimizer step, Ctrl-C handling.
- :mod:`textgym.algos.model_loading`: devices and the trained model (LoRA, gradient
  checkpointing).
- :mod:`textgym.algos.batches`: token batches, log-probs and the shared-prefix forward.
- :mod:`textgym.algos.checkpoints`: the checkpoint layout, atomic bounded saves, checked resumes.
- :mod:`textgym.algos.metrics`: the metrics log (JSONL and TensorBoard), progress lines, plots
  and run records.

Nothing is imported here, so ``import textgym.algos`` does not pull in torch.
"""

__all__: list[str] = []
