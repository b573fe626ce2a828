"""The GRPO trainer: configuration checks, accumulation invariance, resume equivalence."""

from __future__ import annotations

import copy
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos import grpo  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.grpo_update import update  # noqa: E402
from textgym.algos.learner import Learner  # noqa: E402
from textgym.errors import SetupError  # noqa: E402
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.rollout import rollout  # noqa: E402
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm

COMPACT = {"prompt_style": "compact"}


def small(tmp_path, **overrides) -> GRPOConfig:
    """A configuration that trains the tiny model for a few seconds."""
    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs=COMPACT,
        opponent_random_move_prob=(0.5, 1.0),
        steps=2,
        groups_per_step=2,
        group_size=4,
        rollout_batch_size=8,
        micro_batch_size=8,
        max_new_tokens=8,
        learning_rate=1e-3,
        eval_every=0,
        eval_episodes=2,
        device="cpu",
        tensorboard=False,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"group_size": 1}, "group_size: expected >= 2"),
        ({"loss_type": "ppo"}, "loss_type: unknown loss_type 'ppo'"),
        ({"loss_type": "dr_grpo", "scale_rewards": "group"}, "scale_rewards: .*'none'"),
        ({"wrappers": ("nope",)}, "wrappers: unknown wrapper 'nope'"),
        (
            {"opponent_random_move_prob": (0.8, 0.2)},
            "opponent_random_move_prob: .*0 <= low <= high <= 1",
        ),
        ({"temperature": 0.0}, "temperature: expected > 0"),
        ({"micro_batch_size": 0}, "micro_batch_size: expected an int >= 1"),
        ({"learning_rate": 0.0}, "learning_rate: expected > 0"),
        ({"max_grad_norm": -1.0}, "max_grad_norm: expected >= 0"),
        ({"beta": -0.1}, "beta: expected >= 0"),
        ({"top_p": 1.5}, "top_p: "),
        ({"lora_rank": 4, "lora_alpha": 0}, "lora_alpha: expected > 0"),
    ],
)
def test_config_explains_bad_settings(tmp_path, overrides, message):
    """Each message is one line that starts with the field's name (the CLI prints it as
    ``textgym: error: ...``)."""
    with pytest.raises(ValueError, match=message) as error:
        small(tmp_path, **overrides)
    assert str(error.value).split(": ")[0] in overrides
    assert "\n" not in str(error.value)


def test_config_derives_defaults_per_loss_type(tmp_path):
    assert small(tmp_path, loss_type="dr_grpo").scale_rewards == "none"
    dapo = small(tmp_path, loss_type="dapo")
    assert (dapo.scale_rewards, dapo.epsilon_low, dapo.epsilon_high) == ("group", 0.2, 0.28)
    assert small(tmp_path, loss_type="gspo").epsilon_high == 4e-4
    assert small(tmp_path, groups_per_step=3, group_size=5).batch_size == 15


def test_model_defaults_to_gemma_as_in_every_command():
    assert GRPOConfig(env_id="textgym/TicTacToe-v0").model == "gemma-3-270m"


def learner_for(model, config) -> Learner:
    """A learner on ``model`` with plain SGD (params move by the gradient) and a flat schedule."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return Learner(
        config=config, model=model, optimizer=optimizer, scheduler=scheduler, max_loss_tokens=80
    )


@pytest.fixture(scope="module")
def batch_of_trajectories():
    """Token-level trajectories of the tiny model: 2 tasks x 4 copies, rewards that differ."""
    model, tokenizer = build_tiny_model(seed=0)
    policy = HFPolicy(model, tokenizer, max_new_tokens=8, seed=0, stop=["</move>"], batch_size=8)
    make = lambda: gym.make("textgym/TicTacToe-v0", opponent="random", **COMPACT)  # noqa: E731
    trajs = rollout(make, policy, [0] * 4 + [1] * 4, batch_size=8)
    # Give the groups distinct returns so no group is skipped (the model is untrained).
    for i, traj in enumerate(trajs):
        traj.rewards[-1] = float(i % 4)
    return model, trajs


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "gspo", "cispo", "dr_grpo"])
def test_update_does_not_depend_on_micro_batch_size(tmp_path, batch_of_trajectories, loss_type):
    model, trajs = batch_of_trajectories
    results = []
    for micro in (1, 3, 8):
        config = small(tmp_path, micro_batch_size=micro, loss_type=loss_type, num_iterations=2)
        trained = copy.deepcopy(model).train()
        metrics = update(learner_for(trained, config), trajs)
        assert metrics["skipped_update"] == 0.0 and metrics["loss_tokens"] > 0
        results.append(torch.cat([p.detach().flatten() for p in trained.parameters()]))
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert not torch.equal(results[0], before), "the update changed nothing"
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], atol=1e-6, rtol=1e-5)


def test_all_equal_groups_skip_the_update(tmp_path, batch_of_trajectories):
    model, trajs = batch_of_trajectories
    flat = copy.deepcopy(trajs)
    for traj in flat:
        traj.rewards = [0.5] * len(traj.rewards)
    trained = copy.deepcopy(model)
    metrics = update(learner_for(trained, small(tmp_path)), flat)
    assert metrics["skipped_update"] == 1.0 and metrics["zero_variance_fraction"] == 1.0
    for a, b in zip(trained.parameters(), model.parameters()):
        assert torch.equal(a, b)


def final_weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    whole = small(tmp_path / "a", steps=3, save_every=1)
    grpo.train(whole)
    first = small(tmp_path / "b", steps=1)
    grpo.train(first)
    resumed = small(tmp_path / "b", steps=3, resume=True)
    grpo.train(resumed)

    a = final_weights(tmp_path / "a" / "run" / "checkpoint-3")
    b = final_weights(tmp_path / "b" / "run" / "checkpoint-3")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    rows_a = [
        json.loads(line)
        for line in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    rows_b = [
        json.loads(line)
        for line in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    train_a = [r["reward_mean"] for r in rows_a if r["stage"] == "train"]
    train_b = [r["reward_mean"] for r in rows_b if r["stage"] == "train"]
    assert train_a == train_b and len(train_a) == 3
    assert (tmp_path / "b" / "run" / "plots" / "reward.png").exists()


def test_metrics_and_eval_are_written(tmp_path, capsys):
    result = grpo.train(small(tmp_path, steps=1))
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in progress] == ["step 1/1"]
    assert "reward -0.1" in progress[0] and "tokens/s" in progress[0]
    assert {"random/win_rate", "optimal/win_rate", "random/invalid_rate"} <= set(result)
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["stage"] for r in rows] == ["eval", "train", "eval"]
    train = rows[1]
    for key in (
        "reward_mean",
        "invalid_rate",
        "clip_fraction",
        "entropy",
        "kl",
        "step_time_s",
        "zero_variance_fraction",
        "reward/outcome",
        "reward/invalid_action",
    ):
        assert key in train, key


def test_time_limit_checkpoints_and_a_resumed_run_finishes_the_same(tmp_path):
    """A run that hits its time limit after step 1 saves checkpoint-1 and returns; resuming it
    reaches the weights of an uninterrupted run."""
    whole = small(tmp_path / "a", steps=2)
    grpo.train(whole)
    grpo.train(small(tmp_path / "b", steps=2, time_limit_minutes=1e-9))
    run = tmp_path / "b" / "run"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]
    grpo.train(small(tmp_path / "b", steps=2, resume=True))
    a = final_weights(tmp_path / "a" / "run" / "checkpoint-2")
    b = final_weights(run / "checkpoint-2")
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert (run / "run.json").exists()
    with pytest.raises(ValueError, match="time_limit_minutes"):
        small(tmp_path, time_limit_minutes=0)


def test_env_workers_train_the_same_as_in_process(tmp_path):
    """env_workers=True steps the envs in worker processes: same episodes, same update."""
    grpo.train(small(tmp_path / "a", steps=1))
    grpo.train(small(tmp_path / "b", steps=1, env_workers=True))
    rows = [
        [json.loads(x) for x in (tmp_path / run / "run" / "metrics.jsonl").read_text().splitlines()]
        for run in ("a", "b")
    ]
    train = [  # every wall time (rollout, update, step, drift) left out
        [
            {k: v for k, v in r.items() if not k.endswith("_time_s")}
            for r in x
            if r["stage"] == "train"
        ]
        for x in rows
    ]
    assert train[0] == train[1] and len(train[0]) == 1


def test_a_new_run_into_a_finished_one_is_refused_before_it_writes(tmp_path):
    config = small(tmp_path, steps=1)
    grpo.train(config)
    out = tmp_path / "run"
    record, metrics = (out / "run.json").read_text(), (out / "metrics.jsonl").read_text()
    with pytest.raises(SetupError, match="hold no training run yet.*--resume"):
        grpo.train(small(tmp_path, steps=1, learning_rate=5e-4))
    # The earlier run's record and metrics are as it left them.
    assert (out / "run.json").read_text() == record
    assert (out / "metrics.jsonl").read_text() == metrics
