"""Data-parallel GRPO and SFT on 2 CPU processes (gloo) compute what one process computes.

One ``torchrun --standalone --nproc-per-node 2`` launch (the OS picks the rendezvous port) runs
this module (``python -m tests.algos.test_distributed`` from the repository root) as its worker
(:func:`worker`): every rank joins the process group through
:func:`textgym.algos.distributed.init_distributed`, exactly as ``textgym train`` under torchrun
does, and runs

* one GRPO :func:`~textgym.algos.grpo_update.update` (two optimizer steps, ``num_iterations=2``) on
  its half of a fixed batch of 4 groups x 4 trajectories, for every row of ``LOSS_VARIANTS`` and a
  few settings that touch the whole batch (``scale_rewards="batch"``, a KL penalty, a rank
  whose groups all have equal rewards and so nothing to learn);
* one SFT step on its share of 5 conversations (3 and 2), and a whole ``sft.train`` run;
* ``grpo.train`` for 2 steps uninterrupted, and for 1 step then resumed to 2.

The tests compare with the same calls in this (single) process: weights within atol 1e-5
(float32; SGD with learning rate 1, so a gradient off by more than that shows), the same
metrics, and a 2-rank run resumed from its step-1 checkpoint ends where the uninterrupted run
does; a 1-rank run resumes a 2-rank checkpoint. The whole module takes about a minute.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from textgym.algos import grpo, sft  # noqa: E402
from textgym.algos.distributed import (  # noqa: E402
    SINGLE_PROCESS,
    DistributedContext,
    init_distributed,
    shutdown_distributed,
)
from textgym.algos.grpo_config import GRPOConfig, check_world_size  # noqa: E402
from textgym.algos.grpo_update import update  # noqa: E402
from textgym.algos.learner import Learner  # noqa: E402
from textgym.algos.losses import LOSS_VARIANTS  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402
from textgym.algos.sft_data import conversation_tokens  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402
from textgym.tokens import ChatTokenizer  # noqa: E402

from .._runs import register_distinct_characters  # noqa: E402

pytestmark = pytest.mark.llm

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2
GROUP = 4


ENV_ID = register_distinct_characters()

#: One GRPO update per case: config overrides, and which groups get all-equal rewards.
UPDATE_CASES: dict[str, tuple[dict, tuple[int, ...]]] = {
    **{loss_type: ({"loss_type": loss_type}, (3,)) for loss_type in LOSS_VARIANTS},
    "grpo_batch_scale": ({"loss_type": "grpo", "scale_rewards": "batch"}, (3,)),
    "dapo_kl": ({"loss_type": "dapo", "beta": 0.1}, ()),
    "dapo_idle_rank": ({"loss_type": "dapo"}, (2, 3)),  # rank 1 has nothing to learn
}

CONVERSATIONS = [
    [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": f"board {i}\nfree 0 1 2 3 4 5 6 7 8"},
        {"role": "assistant", "content": f"<move>{i % 9}</move>" * (1 + i % 3)},
        {"role": "user", "content": f"opp {(i + 3) % 9}"},
        {"role": "assistant", "content": f"<move>{(i + 5) % 9}</move>"},
    ]
    for i in range(5)
]


def update_config(directory: Path, **overrides) -> GRPOConfig:
    settings = dict(
        model="tiny",
        output_dir=str(directory / "unused"),
        env_id="textgym/TicTacToe-v0",
        opponent_random_move_prob=(0.5, 1.0),
        groups_per_step=4,
        group_size=GROUP,
        micro_batch_size=3,
        max_new_tokens=8,
        num_iterations=2,
        device="cpu",
        tensorboard=False,
    )
    return GRPOConfig(**(settings | overrides))


def train_config(output_dir: Path, **overrides) -> GRPOConfig:
    settings = dict(
        model="tiny",
        output_dir=str(output_dir),
        env_id=ENV_ID,
        wrappers=(),
        steps=2,
        groups_per_step=2,
        group_size=GROUP,
        rollout_batch_size=8,
        micro_batch_size=3,
        max_new_tokens=8,
        learning_rate=1e-3,
        beta=0.1,
        eval_every=0,
        eval_episodes=2,
        save_every=1,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


def sft_config(directory: Path, output_dir: Path) -> SFTConfig:
    return SFTConfig(
        data=str(directory / "conversations.jsonl"),
        model="tiny",
        output_dir=str(output_dir),
        batch_size=3,
        epochs=2,
        micro_batch_size=2,
        learning_rate=1e-3,
        log_every=1,
        device="cpu",
        tensorboard=False,
        progress=False,
    )


def tiny_model(state: dict[str, torch.Tensor]):
    model, tokenizer = build_tiny_model(seed=0)
    model.load_state_dict(state)
    return model.train(), tokenizer


def sgd(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)


def run_update(inputs: dict, name: str, ctx: DistributedContext, directory: Path):
    """Weights and metrics after one GRPO update of case ``name`` on this rank's share."""
    overrides, flat_groups = UPDATE_CASES[name]
    trajectories = copy.deepcopy(inputs["trajectories"])
    for i, trajectory in enumerate(trajectories):
        if i // GROUP in flat_groups:
            trajectory.rewards = [0.5]
    share = len(trajectories) // ctx.world_size
    mine = trajectories[ctx.rank * share : (ctx.rank + 1) * share]
    model, _ = tiny_model(inputs["state"])
    config = update_config(directory, **overrides)
    optimizer, scheduler = sgd(model)
    learner = Learner(
        config=config,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        max_loss_tokens=config.max_new_tokens,
        reference=copy.deepcopy(model).eval() if config.beta > 0 else None,
        dist=ctx,
    )
    metrics = update(learner, mine)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, metrics


def run_sft_step(inputs: dict, ctx: DistributedContext, directory: Path):
    """Weights and (loss, tokens) after one SFT step on this rank's share of 5 conversations."""
    model, tokenizer = tiny_model(inputs["state"])
    chat = ChatTokenizer(tokenizer)
    batch = [conversation_tokens(chat, messages) for messages in CONVERSATIONS]
    share = -(-len(batch) // ctx.world_size)
    optimizer, scheduler = sgd(model)
    run = sft.SFTRun(
        config=sft_config(directory, directory / "unused"),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        device=torch.device("cpu"),
        pad_token_id=tokenizer.pad_token_id,
        total_steps=1,
        dist=ctx,
    )
    result = sft.sft_step(run, batch[ctx.rank * share : (ctx.rank + 1) * share])
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, result


def worker(directory: Path) -> None:
    """What each of the ``torchrun`` ranks runs; rank 0 pickles the results to ``directory``."""
    ctx = init_distributed("cpu")
    assert ctx.world_size == WORLD and ctx.device == torch.device("cpu")
    inputs = pickle.loads((directory / "inputs.pkl").read_bytes())
    results = {name: run_update(inputs, name, ctx, directory) for name in UPDATE_CASES}
    results["sft_step"] = run_sft_step(inputs, ctx, directory)
    grpo.train(train_config(directory / "whole"))
    grpo.train(train_config(directory / "resumed", steps=1))
    grpo.train(train_config(directory / "resumed", resume=True))
    sft.train(sft_config(directory, directory / "sft"))
    if ctx.is_main:
        (directory / "results.pkl").write_bytes(pickle.dumps(results))
    shutdown_distributed()  # as textgym train/sft do at the end of a torchrun launch


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Inputs (initial weights, trajectories), the 2-rank results, and the run directory."""
    directory = tmp_path_factory.mktemp("distributed")
    model, tokenizer = build_tiny_model(seed=0)
    policy = HFPolicy(model, tokenizer, max_new_tokens=8, seed=0, batch_size=16)
    seeds = [7 + i // GROUP for i in range(4 * GROUP)]
    trajectories = rollout(lambda: gym.make(ENV_ID), policy, seeds, token_level=True)
    inputs = {"state": model.state_dict(), "trajectories": trajectories}
    (directory / "inputs.pkl").write_bytes(pickle.dumps(inputs))
    lines = [json.dumps({"messages": messages}) for messages in CONVERSATIONS]
    (directory / "conversations.jsonl").write_text("\n".join(lines) + "\n")
    # This module, run with -m from the repository root: its import of tests/_runs.py works
    # in the workers too.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc-per-node={WORLD}", "-m", "tests.algos.test_distributed"]
    command.append(str(directory))
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return inputs, pickle.loads((directory / "results.pkl").read_bytes()), directory


def assert_same_metrics(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        same = math.isclose(got[key], value, rel_tol=1e-5, abs_tol=1e-6)
        assert same or (math.isnan(got[key]) and math.isnan(value)), (key, got[key], value)


def assert_same_weights(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=0, msg=name)


@pytest.mark.subprocess
@pytest.mark.parametrize("name", list(UPDATE_CASES))
def test_grpo_update_on_two_ranks_equals_one_process(launched, name, tmp_path):
    inputs, results, _ = launched
    weights, metrics = results[name]
    expected_weights, expected_metrics = run_update(inputs, name, SINGLE_PROCESS, tmp_path)
    assert metrics["skipped_update"] == 0.0 and metrics["loss_tokens"] > 0
    assert not torch.equal(expected_weights["lm_head.weight"], inputs["state"]["lm_head.weight"])
    assert_same_metrics(metrics, expected_metrics)
    assert_same_weights(weights, expected_weights)


@pytest.mark.subprocess
def test_sft_step_on_two_ranks_equals_one_process(launched):
    inputs, results, directory = launched
    weights, (loss, tokens) = results["sft_step"]
    expected_weights, (expected_loss, expected_tokens) = run_sft_step(
        inputs, SINGLE_PROCESS, directory
    )
    assert tokens == expected_tokens and math.isclose(loss, expected_loss, rel_tol=1e-6)
    assert_same_weights(weights, expected_weights)


@pytest.mark.subprocess
def test_sft_run_on_two_ranks_equals_one_process(launched, tmp_path):
    _, _, directory = launched
    summary = sft.train(sft_config(directory, tmp_path / "sft"))
    got = json.loads((directory / "sft" / "sft_summary.json").read_text())
    assert got["steps"] == summary["steps"] == 4
    assert math.isclose(got["final_loss"], summary["final_loss"], rel_tol=1e-5)
    rows = (directory / "sft" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 4, "rank 0 alone writes one row per step"
    assert_same_weights(
        load_file(str(directory / "sft" / "model.safetensors")),
        load_file(str(tmp_path / "sft" / "model.safetensors")),
    )


def train_rows(output_dir: Path) -> list[dict]:
    rows = map(json.loads, (output_dir / "metrics.jsonl").read_text().splitlines())
    return [r for r in rows if r["stage"] == "train"]


@pytest.mark.subprocess
def test_resumed_two_rank_run_matches_an_uninterrupted_one(launched):
    _, _, directory = launched
    whole, resumed = directory / "whole", directory / "resumed"
    assert [r["step"] for r in train_rows(whole)] == [1, 2], "rank 0 alone logs"
    for a, b in zip(train_rows(whole), train_rows(resumed)):
        keys = ("reward_mean", "loss", "grad_norm", "kl", "entropy", "loss_tokens")
        assert all(math.isclose(a[k], b[k], rel_tol=1e-6) for k in keys), (a, b)
    assert train_rows(whole)[1]["skipped_update"] == 0.0
    assert_same_weights(
        load_file(str(resumed / "checkpoint-2" / "model.safetensors")),
        load_file(str(whole / "checkpoint-2" / "model.safetensors")),
    )
    assert json.loads((whole / "final_eval.json").read_text()), "rank 0 evaluated"


@pytest.mark.subprocess
def test_one_process_resumes_a_two_rank_checkpoint(launched, tmp_path):
    _, _, directory = launched
    output = tmp_path / "one"
    shutil.copytree(directory / "whole", output)
    (output / "final_eval.json").unlink()
    # Only the newest checkpoint keeps its optimizer state (--save-total-limit's rule), so the
    # one process goes on from the two ranks' last checkpoint to a third step.
    grpo.train(train_config(output, resume=True, steps=3))
    rows = train_rows(output)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["skipped_update"] == 0.0
    before = load_file(str(output / "checkpoint-2" / "model.safetensors"))
    after = load_file(str(output / "checkpoint-3" / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in after.values())
    name = "model.embed_tokens.weight"
    assert not torch.equal(before[name], after[name])


def test_groups_must_split_evenly_over_the_ranks(tmp_path):
    config = train_config(tmp_path, groups_per_step=3)
    with pytest.raises(ValueError, match=r"^groups_per_step: expected a multiple of the 2 ranks"):
        check_world_size(config, DistributedContext(rank=0, world_size=2))


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
