"""Training algorithms (import path ``textgym.algos``): SFT warm-up and the batched GRPO trainer.

Modules, each importable on its own (they need the ``llm`` and ``train`` extras: torch,
transformers, peft, tyro):

- :mod:`textgym.algos.sft`: supervised fine-tuning on chat records (``textgym sft``):
  ``train``; :mod:`textgym.algos.sft_config` holds ``SFTConfig``, :mod:`textgym.algos.sft_data`
  reads and checks the records and tokenizes them with their loss masks; :mod:`textgym.algos.sft_eval` the held-out loss,
  early stopping and the evaluation in an env.
- :mod:`textgym.algos.grpo`: GRPO on any textgym env (``textgym train``), read top to bottom:
  ``train`` (the loop) and one step; :mod:`textgym.algos.grpo_run` the run around them
  (set-up, save, evaluate, stop, restore); :mod:`textgym.algos.grpo_update` the
  ``update`` under a step (advantages, loss, optimizer step on padded or packed
  micro-batches); :mod:`textgym.algos.grpo_config` holds
  ``GRPOConfig`` and its table of checks, :mod:`textgym.algos.learner` the ``Learner`` state and ``make_learner``,
  and :mod:`textgym.algos.grpo_rollouts` the training env, the sampling and evaluation
  policies, a step's rollouts and their metrics, ``evaluate``.
- :mod:`textgym.algos.losses`: the maths as pure torch functions: the k3 KL and the table of
  policy-loss variants (GRPO, DAPO, Dr. GRPO, GSPO, CISPO); :mod:`textgym.algos.advantages`
  group advantages and flat groups, :mod:`textgym.algos.token_log_probs` chunked log-probs of
  chosen tokens.
- :mod:`textgym.algos.common`: what both trainers share: their optimizer config base, config
  checks, the guards of an optimizer step, Ctrl-C handling.
- :mod:`textgym.algos.model_loading`: devices and the trained model (LoRA, gradient
  checkpointing).
- :mod:`textgym.algos.batches`: token batches and their log-probs;
  :mod:`textgym.algos.decoder_passes` the padded, shared-prefix and packed decoder passes.
- :mod:`textgym.algos.checkpoints`: atomic, bounded saves and disk estimates;
  :mod:`textgym.algos.checkpoint_layout` the layout, finding checkpoints, RNG state and the
  errors; :mod:`textgym.algos.resume` loading a checkpoint and checking that a run may resume it.
- :mod:`textgym.algos.metrics`: the metrics log (JSON Lines, TensorBoard, trackers) and the run
  record (``run.json``); :mod:`textgym.algos.metric_rows` reading the rows back,
  :mod:`textgym.algos.metric_plots` PNG panels, :mod:`textgym.algos.metric_summaries` progress
  lines, closing summaries and runs compared.
- :mod:`textgym.algos.distributed`: data-parallel training under ``torchrun`` (the rank context
  and its collectives).
- :mod:`textgym.algos.rollout_weights`: the bfloat16 copy of the policy that samples rollouts;
  :mod:`textgym.algos.server_rollouts`: rollouts sampled by a llama.cpp server.

Nothing is imported here, so ``import textgym.algos`` does not pull in torch.
"""

__all__: list[str] = []
