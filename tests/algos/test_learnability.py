"""Learnability diagnostics of GRPO: the hint table, the hint line of a run whose groups all
have equal rewards, ``--dry-run``, the drift from the start policy, and progress lines that move
before any episode finishes."""

from __future__ import annotations

import json
import math
import os

import pytest

from textgym.algos.learnability import hint_rule, learnability_hint, member_hint_rules
from textgym.progress import progress_text
from textgym.rollout import Trajectory

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SKIPPED = {"skipped_update": 1.0, "zero_variance_fraction": 1.0}


@pytest.mark.parametrize(
    ("row", "rule", "words"),
    [
        (
            SKIPPED | {"invalid_rate": 0.92, "reward_mean": -0.1, "reward_std": 0.0},
            "invalid",
            ["92% of actions were invalid", "textgym sft", "format_reward"],
        ),
        (
            SKIPPED | {"invalid_rate": 0.0, "reward_mean": 0.0, "reward_std": 0.0},
            "all_zero",
            ["every episode returned 0", "too hard", "SFT warm-up", "easier setting"],
        ),
        (
            SKIPPED | {"invalid_rate": 0.0, "reward_mean": 0.5, "reward_std": 0.0},
            "all_equal",
            ["every episode returned 0.5", "more resolution"],
        ),
        (
            SKIPPED
            | {
                "invalid_rate": 0.1,
                "reward_mean": 0.4,
                "reward_std": 0.3,
                "entropy": None,
                "sampled_entropy": 0.02,
            },
            "low_entropy",
            ["0.02 nats/token", "raise --temperature"],
        ),
        (
            SKIPPED
            | {"invalid_rate": 0.1, "reward_mean": 0.4, "reward_std": 0.3, "sampled_entropy": 2.0},
            "flat_groups",
            [
                "std 0.3",
                "--group-size",
                "--temperature",
                "--dynamic-sampling-rounds",
                "--expert-guidance 1",
            ],
        ),
        (
            {
                "skipped_update": 0.0,
                "zero_variance_fraction": 0.875,
                "invalid_rate": 0.0,
                "reward_mean": 0.3,
                "reward_std": 0.2,
                "entropy": 0.05,
            },
            "low_entropy",
            ["88% of groups had equal rewards", "0.05 nats/token"],
        ),
    ],
)
def test_hint_rules(row, rule, words):
    got = hint_rule(row)
    assert got is not None and got[0] == rule
    for word in words:
        assert word in got[1]
    assert learnability_hint(row) == got[1]


@pytest.mark.parametrize(
    "row",
    [
        {"skipped_update": 0.0, "zero_variance_fraction": 0.5, "invalid_rate": 0.9},
        {"skipped_update": 0.0, "zero_variance_fraction": None},
        {},
        SKIPPED | {"reward_std": None, "reward_mean": None},  # nothing measured: no guess
    ],
)
def test_no_hint_when_the_step_learns_or_nothing_is_measured(row):
    assert learnability_hint(row) is None


def test_rollout_metrics_reward_spread_and_sampled_entropy():
    from textgym.algos.distributed import SINGLE_PROCESS
    from textgym.algos.grpo_rollouts import rollout_metrics

    def traj(reward, logprobs):
        return Trajectory(
            env_id=None,
            seed=0,
            task_id="t",
            rewards=[reward],
            reward_components=[{}],
            invalid_actions=[False],
            finish_reasons=["stop"],
            token_ids=[1] * (len(logprobs) + 1),
            loss_mask=[0] + [1] * len(logprobs),
            token_logprobs=[0.0, *logprobs],
        )

    equal = rollout_metrics([traj(-0.1, [-1.0, -2.0]), traj(-0.1, [-3.0])], SINGLE_PROCESS)
    assert equal["reward_std"] == 0.0  # exactly: -0.1 three times has a rounded mean
    assert equal["sampled_entropy"] == pytest.approx(2.0)  # 6 nats over 3 tokens
    mixed = rollout_metrics([traj(0.0, [-1.0]), traj(1.0, [-1.0])], SINGLE_PROCESS)
    assert mixed["reward_std"] == pytest.approx(0.5)


def test_progress_moves_before_any_episode_finishes():
    line = progress_text("eval x", 0, 20, 60, 12.0)
    assert "5.00 actions/s" in line and "0.00 episodes/s" not in line
    assert progress_text("eval x", 0, 20, 0, 1.0).endswith("0.00 episodes/s")
    assert progress_text("eval x", 4, 20, 60, 2.0).endswith("2.00 episodes/s")


# --- runs of the tiny model ----------------------------------------------------------------------


def _small(tmp_path, **overrides):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from textgym.algos.grpo_config import GRPOConfig

    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        steps=2,
        groups_per_step=1,
        group_size=2,
        rollout_batch_size=2,
        micro_batch_size=2,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=1,
        device="cpu",
        tensorboard=False,
    )
    return GRPOConfig(**(settings | overrides))


@pytest.mark.llm
@pytest.mark.slow
def test_a_run_whose_groups_are_all_equal_prints_the_hint_and_logs_the_drift(tmp_path, capsys):
    from textgym.algos import grpo

    grpo.train(_small(tmp_path, lora_rank=4, learning_rate=1e-3))
    err = capsys.readouterr().err
    hints = [line for line in err.splitlines() if line.startswith("hint: ")]
    # The random tiny model plays no valid move: every group is flat, every action invalid.
    assert "update skipped: the group had equal rewards" in err
    assert len(hints) == 1, err  # printed once for a run of steps alike
    assert "of actions were invalid" in hints[0] and "textgym sft" in hints[0]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    train = [r for r in rows if r["stage"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    for row in train:
        assert row["reward_std"] == 0.0 and row["sampled_entropy"] > 0.0
    # LoRA: the adapter disabled is the start policy; measured on the last step only here
    # (eval_every=0), an extra forward pass kept off the other steps.
    assert "kl_to_start" not in train[0]
    assert train[1]["kl_to_start"] is not None and train[1]["kl_to_start"] >= 0.0
    # The drift's forward pass is timed on its own, outside the step's rollout + update.
    assert train[1]["drift_time_s"] > 0.0
    for row in train:
        parts = row["rollout_time_s"] + row["update_time_s"]
        assert row["step_time_s"] == pytest.approx(parts, abs=1e-6)


@pytest.mark.llm
@pytest.mark.slow
def test_dry_run_prints_the_diagnostics_and_writes_nothing(tmp_path, capsys):
    from textgym.algos import grpo

    config = _small(tmp_path, dry_run=True)
    metrics = grpo.train(config)
    err = capsys.readouterr().err
    assert "dry run: 2 episodes in 1 groups of 2" in err
    assert "hint: " in err and "of actions were invalid" in err
    assert metrics["skipped_update"] == 1.0 and metrics["zero_variance_fraction"] == 1.0
    assert math.isfinite(metrics["sampled_entropy"])
    assert not (tmp_path / "run").exists()


def test_each_mixture_member_is_judged_on_its_own_episodes():
    """A member stuck at zero is named while the step as a whole learns."""
    row = {
        "skipped_update": 0.0,
        "zero_variance_fraction": 0.5,
        "TicTacToe-v0/flat_group_rate": 1.0,
        "TicTacToe-v0/reward_mean": 0.0,
        "TicTacToe-v0/reward_std": 0.0,
        "TicTacToe-v0/invalid_rate": 0.1,
        "ReverseText-v0/flat_group_rate": 0.0,
        "ReverseText-v0/reward_mean": 0.4,
        "ReverseText-v0/reward_std": 0.2,
        "ReverseText-v0/invalid_rate": 0.0,
    }
    assert hint_rule(row) is None
    rules = member_hint_rules(row)
    assert list(rules) == ["TicTacToe-v0"] and rules["TicTacToe-v0"][0] == "all_zero"
    assert member_hint_rules({"reward_mean": 0.0, "zero_variance_fraction": 1.0}) == {}


@pytest.mark.llm
def test_a_mixture_dry_run_prints_a_hint_per_stuck_member(tmp_path, capsys):
    from textgym.algos import grpo
    from textgym.algos.grpo_config import GRPOConfig

    ttt = {"env_id": "textgym/TicTacToe-v0", "env_kwargs": {"prompt_style": "compact"}}
    config = GRPOConfig(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/Mixture-v0",
        env_kwargs={"envs": [ttt, {"env_id": "textgym/ReverseText-v0"}]},
        groups_per_step=4,
        group_size=2,
        max_new_tokens=8,
        seed=2,  # draws both members
        device="cpu",
        dry_run=True,
        tensorboard=False,
    )
    metrics = grpo.train(config)
    err = capsys.readouterr().err
    # The random tiny model plays no legal move and writes no answer tag in 8 tokens.
    for member in ("TicTacToe-v0", "ReverseText-v0"):
        assert metrics[f"{member}/invalid_rate"] == 1.0
        (line,) = [x for x in err.splitlines() if x.startswith(f"hint ({member}): ")]
        assert "of actions were invalid" in line
    assert not (tmp_path / "run").exists()
