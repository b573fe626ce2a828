"""The episodes a GRPO run trained on: ``train_episodes.jsonl`` written with
``--log-completions`` groups per step in the eval record format, read by ``textgym report``, and
cut back to the resumed step on ``--resume``."""

from __future__ import annotations

import json
import os

import pytest

from textgym.algos.train_episodes import TRAIN_EPISODES, TrainEpisodesLog, episode_records
from textgym.rollout import Trajectory

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")

EVAL_FIELDS = {
    "env_id",
    "seed",
    "task_id",
    "messages",
    "rewards",
    "reward_components",
    "invalid_actions",
    "outcome",
    "return",
    "component_totals",
}


def _traj(reward: float) -> Trajectory:
    return Trajectory(
        env_id="e",
        seed=1,
        task_id="t",
        messages=[{"role": "user", "content": "hi"}],
        rewards=[reward],
        reward_components=[{"win": reward}],
        invalid_actions=[False],
        finish_reasons=["stop"],
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        token_logprobs=[0.0, -1.0, -2.0],
    )


def test_episode_records_keep_the_first_groups_with_their_advantages():
    trajs = [_traj(r) for r in (1.0, 0.0, 0.5, 0.5, 1.0, 1.0)]  # 3 groups of 2
    records = episode_records(trajs, step=4, groups=2, group_size=2, scale_rewards="group")
    assert len(records) == 4
    assert [r["group"] for r in records] == [0, 0, 1, 1]
    assert all(r["step"] == 4 for r in records)
    assert records[0]["advantage"] > 0 > records[1]["advantage"]
    assert records[2]["advantage"] == records[3]["advantage"] == 0.0  # a flat group
    assert records[0].keys() >= EVAL_FIELDS
    assert records[0]["component_totals"] == {"win": 1.0}
    assert records[0]["token_ids"] == records[0]["token_logprobs"] == []  # not the batch
    assert episode_records(trajs, step=1, groups=0, group_size=2, scale_rewards="group") == []


def test_truncate_after_keeps_the_resumed_steps_only(tmp_path):
    log = TrainEpisodesLog(tmp_path, groups=1)
    for step in (1, 2, 3):
        log.write(
            episode_records(
                [_traj(1.0), _traj(0.0)], step=step, groups=1, group_size=2, scale_rewards="group"
            )
        )
    with open(tmp_path / TRAIN_EPISODES, "a") as fh:
        fh.write('{"step": 3, "half')  # a line cut by a killed run
    log.truncate_after(2)
    lines = (tmp_path / TRAIN_EPISODES).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 1, 2, 2]


def _small(tmp_path, **overrides):
    pytest.importorskip("transformers")
    from textgym.algos.grpo_config import GRPOConfig

    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        opponent_random_move_prob=(0.5, 1.0),
        steps=1,
        groups_per_step=2,
        group_size=2,
        rollout_batch_size=4,
        micro_batch_size=4,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=1,
        device="cpu",
        tensorboard=False,
        log_completions=1,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


@pytest.mark.llm
@pytest.mark.slow
def test_a_run_keeps_its_episodes_the_report_reads_them_and_resume_cuts_back(tmp_path):
    from textgym.algos import grpo
    from textgym.report.runs import load_run

    grpo.train(_small(tmp_path, save_every=1))
    path = tmp_path / "run" / TRAIN_EPISODES
    records = [json.loads(line) for line in path.open()]
    assert len(records) == 2  # 1 step x log_completions 1 group x group_size 2
    for record in records:
        assert EVAL_FIELDS | {"step", "group", "advantage"} <= record.keys()
        assert record["step"] == 1 and record["group"] == 0
        assert record["env_id"] == "textgym/TicTacToe-v0"
    run = load_run(tmp_path / "run")
    assert run.kind == "train" and run.episodes_total == 2 and run.episodes
    assert not run.notes

    # A line of a step past the checkpoint (a run killed before saving it) goes on resume.
    with path.open("a") as fh:
        fh.write(json.dumps(records[0] | {"step": 2}) + "\n")
    grpo.train(_small(tmp_path, steps=2, resume=True))
    steps = [json.loads(line)["step"] for line in path.open()]
    assert steps == [1, 1, 2, 2]
    assert load_run(tmp_path / "run").episodes_total == 4


@pytest.mark.llm
@pytest.mark.slow
def test_log_completions_0_writes_no_file(tmp_path):
    from textgym.algos import grpo

    grpo.train(_small(tmp_path, log_completions=0, groups_per_step=1, rollout_batch_size=2))
    assert not (tmp_path / "run" / TRAIN_EPISODES).exists()
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
