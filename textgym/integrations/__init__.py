"""Adapters that let other RL libraries train and evaluate on textgym envs.

* :mod:`textgym.integrations.trl`: a textgym env as what TRL's ``GRPOTrainer`` takes: a
  ``datasets.Dataset`` of prompts, one reward function per reward component, and, for
  multi-turn envs, a ``rollout_func`` that plays whole episodes (extra ``trl``).
* :mod:`textgym.integrations.verifiers`: a textgym env as a ``verifiers`` environment
  (taskset + env, one reward per component) for verifiers' own evaluation loop (extra
  ``verifiers``).

Each submodule imports its library on first use, so importing it never needs the extra.
"""

__all__: list[str] = []
