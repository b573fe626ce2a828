"""The TRL side of ``grpo_vs_trl.py``: ``trl.GRPOTrainer`` at the settings of that script's
module docstring ("Equal settings"), its steps timed by a callback and its generation by a
wrapper of ``_generate_single_turn``. ``args`` is that script's ``Config``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from _grpo_task import (  # sibling module
    CLIP_RANGE,
    EQUAL_SETTINGS,
    device_type,
    env_id,
    step_summary,
    task_conversations,
)


def _trl_dataset(args: Any) -> Any:
    """One row per task of the run: its conversational prompt, reset seed and task id."""
    from datasets import Dataset

    tasks = args.groups_per_step * (args.warmup + args.steps)
    return Dataset.from_list(
        [
            {"prompt": messages, "task_seed": seed, "task_id": info["task_id"]}
            for seed, messages, info in task_conversations(args, tasks)
        ]
    )


def _step_timer() -> Any:
    """A ``TrainerCallback`` that times each optimizer step (``on_step_begin`` to
    ``on_step_end``), keeps the CUDA peak memory after it and the logged rows of completions."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.logs: list[dict[str, float]] = []
            self.cuda_max_memory_gib: list[float] = []
            self._began = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._began = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.times.append(time.perf_counter() - self._began)
            if torch.cuda.is_available():
                self.cuda_max_memory_gib.append(torch.cuda.max_memory_allocated() / 2**30)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
        ) -> None:
            if logs and "completions/mean_length" in logs:
                self.logs.append(dict(logs))

    return StepTimer()


def _trl_config(args: Any, out: Path) -> Any:
    """TRL's ``GRPOConfig`` at the settings of the module docstring ("Equal settings").

    Raises:
        RuntimeError: where TRL would not generate exactly one optimizer step's batch at once.
    """
    from trl import GRPOConfig

    batch = args.groups_per_step * args.group_size
    cuda = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(out),
        max_steps=args.warmup + args.steps,
        seed=args.seed,
        per_device_train_batch_size=args.micro_batch_size,
        gradient_accumulation_steps=batch // args.micro_batch_size,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        top_k=0,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=0.0,
        max_grad_norm=1.0,
        **EQUAL_SETTINGS,
        epsilon=CLIP_RANGE[0],
        epsilon_high=CLIP_RANGE[1],
        mask_truncated_completions=False,
        use_vllm=False,
        bf16=cuda,
        use_cpu=not cuda,
        gradient_checkpointing=False,
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        log_completions=False,
        dataloader_num_workers=0,
    )
    if (
        config.generation_batch_size != batch
        or config.steps_per_generation != config.gradient_accumulation_steps
    ):
        raise RuntimeError(
            f"TRL generation batch {config.generation_batch_size} (steps_per_generation "
            f"{config.steps_per_generation}) is not one optimizer step of {batch} completions"
        )
    return config


class _EnvReward:
    """TRL's reward function: the env's own reward (reset with the task's seed, step with the
    completion text); counts each call's generated tokens and keeps its mean reward."""

    __name__ = "env_reward"  # TRL names the reward's metrics after it

    def __init__(self, args: Any) -> None:
        self.env = gym.make(env_id(args.reward), max_chars=args.max_chars)
        self.tokens_per_call: list[int] = []
        self.rewards_per_call: list[float] = []

    def __call__(
        self, prompts: list, completions: list, completion_ids: list, task_seed: list, **_: Any
    ) -> list[float]:
        self.tokens_per_call.append(sum(len(ids) for ids in completion_ids))
        scores = []
        for completion, seed in zip(completions, task_seed, strict=True):
            self.env.reset(seed=seed)
            scores.append(float(self.env.step(completion[0]["content"])[1]))
        self.rewards_per_call.append(statistics.fmean(scores))
        return scores


def _time_generation(trainer: Any) -> list[float]:
    """Wrap the trainer's ``_generate_single_turn`` (timing only); returns the list that each
    call's seconds are appended to."""
    generate_times: list[float] = []
    generate = trainer._generate_single_turn

    def timed_generate(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            generate_times.append(time.perf_counter() - began)

    trainer._generate_single_turn = timed_generate
    return generate_times


def run_trl(args: Any, out: Path) -> dict[str, Any]:
    """Train with ``trl.GRPOTrainer`` at the same settings; time the steps after the warm-up.

    Raises:
        RuntimeError: where TRL ran another number of steps or reward calls than asked.
    """
    from trl import GRPOTrainer

    from textgym.models import load_model
    from textgym.tokens import ChatTokenizer

    model, tokenizer = load_model(args.model, device=device_type())
    config, dataset = _trl_config(args, out), _trl_dataset(args)
    reward, timer = _EnvReward(args), _step_timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    generate_times = _time_generation(trainer)
    trainer.train()

    tokens = reward.tokens_per_call
    if not len(timer.times) == len(tokens) == args.warmup + args.steps:
        raise RuntimeError(
            f"Expected {args.warmup + args.steps} steps and reward calls, got "
            f"{len(timer.times)} steps and {len(tokens)} reward calls"
        )
    ours_ids = ChatTokenizer(tokenizer).prompt(dataset[0]["prompt"], tools=[])
    trl_ids = trainer._tokenize_prompts([dataset[0]["prompt"]])[0][0]
    w = args.warmup
    result = step_summary(timer.times[w:], [float(t) for t in tokens[w:]])
    per_step = len(generate_times) == len(timer.times)  # one generation per optimizer step
    result.update(
        # Per step, as ours: generation, and the rest of the step (rewards, the accumulated
        # forward/backward passes, the optimizer step), None where generation did not run
        # once per step.
        generate_time_s=generate_times[w:] if per_step else None,
        update_time_s=[t - g for t, g in zip(timer.times[w:], generate_times[w:], strict=True)]
        if per_step
        else None,
        cuda_max_memory_gib=timer.cuda_max_memory_gib[w:] or None,
        cudnn_sdp_enabled=torch.backends.cuda.cudnn_sdp_enabled(),
        generate_time_mean_s=statistics.fmean(generate_times[w:]),
        generate_tokens_per_s=sum(tokens[w:]) / sum(generate_times[w:]),
        reward_mean=statistics.fmean(reward.rewards_per_call[w:]),
        logged_completion_mean_length=[log["completions/mean_length"] for log in timer.logs[w:]],
        prompt_ids_match_ours=list(trl_ids) == list(ours_ids),
        trl_config={
            "generation_batch_size": config.generation_batch_size,
            "steps_per_generation": config.steps_per_generation,
            "per_device_train_batch_size": config.per_device_train_batch_size,
            "gradient_accumulation_steps": config.gradient_accumulation_steps,
            "optim": str(config.optim),
            "bf16": config.bf16,
        },
    )
    return result
