"""What several test modules share: the arguments of a tiny ``textgym train`` run, an env on
which every training step learns, a LoRA adapter that changes the tiny model's output, and the
rows of the tables the CLI prints.

Test modules import it relatively (``from ._runs import train_argv``; pytest imports the tests
with ``--import-mode=importlib``, as ``tests.…`` modules); the ``torchrun`` workers of
``tests/algos/test_distributed.py`` run that module with ``-m`` from the repository root, so the
same import works there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from textgym.core import TextEnv
from textgym.spaces import UnicodeText

__all__ = [
    "DISTINCT_CHARACTERS",
    "TINY_TRAIN",
    "DistinctCharacters",
    "cli_options",
    "register_distinct_characters",
    "seeded_lora",
    "table",
    "train_argv",
]

#: A ``textgym train`` run of a few seconds a step, as options: the tiny model on compact
#: tic-tac-toe against opponents of stratified skill, 2 groups of 4 trajectories per step, 8 new
#: tokens, no evaluation during training (2 episodes per setting after it), on the CPU, without
#: TensorBoard.
TINY_TRAIN: dict[str, Any] = {
    "model": "tiny",
    "env_kwargs": '{"prompt_style": "compact"}',
    "opponent_random_move_prob": (0.5, 1.0),
    "groups_per_step": 2,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 8,
    "max_new_tokens": 8,
    "eval_every": 0,
    "eval_episodes": 2,
    "device": "cpu",
    "tensorboard": False,
}


def cli_options(**options: Any) -> list[str]:
    """``options`` as command-line arguments, in order.

    Example:
        >>> cli_options(group_size=4, progress=False, resume=True)
        ['--group-size', '4', '--no-progress', '--resume']
    """
    argv: list[str] = []
    for name, value in options.items():
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{flag}" if value else f"--no-{flag}")
        elif isinstance(value, tuple):
            argv += [f"--{flag}", *map(str, value)]
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def train_argv(**options: Any) -> list[str]:
    """The arguments of a tiny ``textgym train`` run: :data:`TINY_TRAIN` with ``options`` over
    it (``steps=1``, ``output_dir=path``, ``progress=False``)."""
    return ["train", "textgym/TicTacToe-v0", *cli_options(**(TINY_TRAIN | options))]


def table(text: str) -> dict[str, list[str]]:
    """``{first cell: the other cells}`` of each row of the ``rich`` tables printed in ``text``
    (a terminal wide enough for one line a row: ``COLUMNS=200``)."""
    rows = {}
    for line in text.splitlines():
        if line.count("│") >= 3:
            cells = [c.strip() for c in line.split("│")[1:-1]]
            rows[cells[0]] = cells[1:]
    return rows


class DistinctCharacters(TextEnv):
    """One turn; the reward is the number of distinct characters in the reply over 8.

    Untrained models (the tiny one, base Gemma) never write the tags of the real tasks, so
    every group of theirs has equal rewards and GRPO skips the update; this reward differs
    within a group, so every step of a test run updates the weights.
    """

    def __init__(self, render_mode: str | None = None):
        self._init_render(render_mode)
        self.observation_space = UnicodeText(256)
        self.action_space = UnicodeText(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        info = {"system_prompt": "Answer.", "tools": [], "task_id": "distinct"}
        return self._emit(f"Say {int(self.np_random.integers(100))}."), info

    def step(self, action):
        self._check_action(action)
        reward = len(set(action)) / 8
        info = {"reward_components": {"distinct": reward}, "invalid_action": False}
        return self._emit("done"), reward, True, False, info


#: The id :func:`register_distinct_characters` registers :class:`DistinctCharacters` under.
DISTINCT_CHARACTERS = "textgym_test/DistinctCharacters-v0"


def register_distinct_characters() -> str:
    """Register :class:`DistinctCharacters` (once per process) and return its id."""
    if DISTINCT_CHARACTERS not in gym.registry:
        gym.register(DISTINCT_CHARACTERS, entry_point=DistinctCharacters, max_episode_steps=1)
    return DISTINCT_CHARACTERS


def seeded_lora(model: Any, seed: int) -> Any:
    """``model`` with a rank-4 LoRA adapter (:func:`textgym.algos.model_loading.prepare_model`)
    whose B matrices are drawn from ``seed`` (times 0.05), in eval mode: a fresh adapter's B is
    zero and changes nothing, this one changes the output as a trained one does. LoRA's A
    matrices are drawn from torch's global generator, as ``prepare_model`` leaves them."""
    import torch

    from textgym.algos.model_loading import prepare_model

    model = prepare_model(model, lora_rank=4)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model.eval()
