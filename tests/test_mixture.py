"""``textgym/Mixture-v0``: an episode's member is drawn by weight from its seed alone (a GRPO
group plays one env), plays as the member env alone does, and the trainer logs and evaluates
each member apart."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

import textgym  # noqa: F401
from textgym.builder import make_expert
from textgym.card import env_card
from textgym.cli.training_tables import eval_table_rows
from textgym.errors import SetupError
from textgym.mixture import MEMBER_EXPERTS, MEMBER_SEPARATOR, EnvMixture, member_of
from textgym.rollout import rollout

from ._runs import register_distinct_characters

TTT = {"env_id": "textgym/TicTacToe-v0", "env_kwargs": {"prompt_style": "compact"}}
REVERSE = {"env_id": "textgym/ReverseText-v0", "env_kwargs": {"max_chars": 80}}


def mixture(*specs, **kwargs):
    return gym.make("textgym/Mixture-v0", envs=list(specs), **kwargs)


def test_the_seed_alone_draws_the_member_by_weight():
    env, twin = mixture({**TTT, "weight": 3}, REVERSE), mixture({**TTT, "weight": 3}, REVERSE)
    drawn = []
    for seed in range(4000):
        obs, info = env.reset(seed=seed)
        if seed < 50:  # a twin (another process, another group copy) draws the same
            assert twin.reset(seed=seed) == (obs, info)
        drawn.append(info["mixture_member"])
    share = drawn.count("TicTacToe-v0") / len(drawn)
    assert abs(share - 0.75) < 3 * math.sqrt(0.75 * 0.25 / len(drawn))


def test_an_episode_plays_as_the_member_alone():
    env, alone = mixture(TTT, REVERSE), gym.make(TTT["env_id"], **TTT["env_kwargs"])
    obs, info = env.reset(seed=5, options={"member": "TicTacToe-v0", "random_move_prob": 1.0})
    obs_alone, info_alone = alone.reset(seed=5, options={"random_move_prob": 1.0})
    assert obs == obs_alone and info["system_prompt"] == info_alone["system_prompt"]
    assert info["task_id"] == f"TicTacToe-v0{MEMBER_SEPARATOR}{info_alone['task_id']}"
    assert member_of(info["task_id"]) == "TicTacToe-v0" and member_of("plain") is None
    for move in info_alone["legal_moves"][:3]:
        step, step_alone = env.step(f"<move>{move}</move>"), alone.step(f"<move>{move}</move>")
        assert step[:4] == step_alone[:4]
        assert step[4]["mixture_member"] == "TicTacToe-v0"
        if step[2] or step[3]:
            break


def test_the_contract_is_the_members_union():
    base = mixture(TTT, REVERSE, {"env_id": "textgym/EmailToolUse-v1"}).unwrapped
    assert base.names == ("TicTacToe-v0", "ReverseText-v0", "EmailToolUse-v1")
    assert "</move>" in base.stop_strings
    assert list(base.evaluation_settings) == [
        "TicTacToe-v0/random",
        "TicTacToe-v0/optimal",
        "ReverseText-v0/eval",
        "EmailToolUse-v1/eval",
    ]
    assert base.evaluation_settings["TicTacToe-v0/optimal"]["member"] == "TicTacToe-v0"
    assert base.expert_policy == MEMBER_EXPERTS and not base.has_gold_completion
    rng = np.random.default_rng(0)
    for name in base.names:  # the random floor draws in each member's own grammar
        obs, info = base.reset(seed=1, options={"member": name})
        _, _, _, _, step_info = base.step(base.random_action(obs, info, rng))
        assert step_info["mixture_member"] == name


def test_a_refused_reset_leaves_the_mixture_usable():
    env = mixture(TTT, REVERSE)
    with pytest.raises(ValueError, match="Unknown mixture member"):
        env.reset(seed=0, options={"member": "nobody"})
    with pytest.raises(ValueError, match="options"):
        env.unwrapped.reset(seed=0, options=[1])
    assert env.reset(seed=0)[1]["mixture_member"] in ("TicTacToe-v0", "ReverseText-v0")


@pytest.mark.parametrize(
    ("envs", "match"),
    [
        ([], "non-empty list"),
        ("textgym/TicTacToe-v0", "non-empty list"),
        ([{"env_id": "textgym/TicTacToe-v0", "colour": 1}], "unknown keys"),
        ([{**TTT, "weight": 0}], "weight"),
        ([{**TTT, "weight": float("nan")}], "weight"),
        ([{**TTT, "weight": True}], "weight"),
        ([{**TTT, "name": "a/b"}], "name"),
        ([TTT, TTT], "distinct member names"),
        ([{"env_id": "textgym/Mixture-v0"}], "mixture itself"),
        ([{"env_id": ""}], "env_id"),
        ([1], "JSON object"),
    ],
)
def test_a_bad_member_spec_is_one_clear_error(envs, match):
    with pytest.raises(ValueError, match=match):
        EnvMixture(envs)


def test_the_quality_card_of_the_default_mixture_passes():
    card = env_card("textgym/Mixture-v0", tasks=4)
    assert card["status"] == "pass", card["failed"]
    # The members' experts reach each member's own maximum (a draw is tic-tac-toe's 0.5).
    assert card["oracle"]["policy"] == "member_experts" and card["oracle"]["failing"] == 0


def test_the_evaluation_table_has_a_column_per_member_setting():
    settings, rows = eval_table_rows(
        {"TicTacToe-v0/random/return_mean": 0.5, "ReverseText-v0/eval/return_mean": 0.25}
    )
    assert settings == ["TicTacToe-v0/random", "ReverseText-v0/eval"]
    assert rows[0] == ("mean return", ["0.5000", "0.2500"])


def test_a_grpo_run_logs_and_evaluates_each_member(tmp_path):
    pytest.importorskip("torch")
    from textgym.algos.grpo import train
    from textgym.algos.grpo_config import GRPOConfig

    def config(steps, resume=False):
        return GRPOConfig(
            model="tiny",
            output_dir=str(tmp_path / "run"),
            env_id="textgym/Mixture-v0",
            env_kwargs={"envs": [TTT, REVERSE]},
            steps=steps,
            groups_per_step=4,
            group_size=2,
            rollout_batch_size=8,
            micro_batch_size=8,
            max_new_tokens=8,
            eval_every=2,
            eval_episodes=2,
            seed=3,
            device="cpu",
            tensorboard=False,
            progress=False,
            resume=resume,
        )

    train(config(1))
    train(config(2, resume=True))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    trains = [r for r in rows if r.get("stage") == "train"]
    assert [r["step"] for r in trains] == [1, 2]
    for row in trains:
        members = {k.split("/", 1)[0] for k in row if k.endswith("/episodes")}
        assert members and members <= {"TicTacToe-v0", "ReverseText-v0"}
        assert sum(row[f"{m}/episodes"] for m in members) == 8  # every episode, once
        assert all(0 <= row[f"{m}/flat_group_rate"] <= 1 for m in members)
    evals = [r for r in rows if r.get("stage") == "eval"]
    assert evals and all(
        {"TicTacToe-v0/optimal/return_mean", "ReverseText-v0/eval/return_mean"} <= set(r)
        for r in evals
    )
    from textgym.report.curves import chart_specs
    from textgym.report.runs import load_run

    charts, _, _ = chart_specs([load_run(tmp_path / "run")])
    (members,) = [c for c in charts if c["title"] == "Reward per env of the mixture (train)"]
    assert {s["label"] for s in members["series"]} <= {"TicTacToe-v0", "ReverseText-v0"}


def test_a_member_with_an_opponent_takes_an_opponent_range():
    env = mixture({**TTT, "opponent_random_move_prob": [0.0, 1.0]}, REVERSE)
    probs = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        if info["mixture_member"] == "TicTacToe-v0":
            probs.add(info["random_move_prob"])
    assert len(probs) > 3 and all(0.0 <= p <= 1.0 for p in probs)
    with pytest.raises(ValueError, match="no seeded opponent"):
        mixture({**REVERSE, "opponent_random_move_prob": [0.0, 1.0]})


def test_train_mixture_shortcut_builds_the_member_specs():
    pytest.importorskip("torch")
    from textgym.algos.grpo_config import GRPOConfig
    from textgym.mixture import members_from_ids

    config = GRPOConfig(
        env_id="textgym/Mixture-v0", mixture=("textgym/TicTacToe-v0:2", "textgym/ReverseText-v0")
    )
    assert config.env_kwargs == {
        "envs": [
            {"env_id": "textgym/TicTacToe-v0", "weight": 2.0},
            {"env_id": "textgym/ReverseText-v0"},
        ]
    }
    replayed = GRPOConfig(
        env_id=config.env_id, mixture=config.mixture, env_kwargs=config.env_kwargs
    )
    assert replayed.env_kwargs == config.env_kwargs  # a run.json replay gives both
    assert members_from_ids(["mypkg.capital:Capital-v0"]) == [
        {"env_id": "mypkg.capital:Capital-v0"}
    ]
    with pytest.raises(ValueError, match="mixture: expected ENV_ID textgym/Mixture-v0"):
        GRPOConfig(env_id="textgym/TicTacToe-v0", mixture=("textgym/ReverseText-v0",))
    with pytest.raises(ValueError, match="no other --env-kwargs"):
        GRPOConfig(env_id="textgym/Mixture-v0", mixture=("a",), env_kwargs={"envs": []})


def test_member_experts_play_each_episode_with_its_members_expert():
    """Each member's own expert, under its own kwargs: minimax never loses, the gold reversal
    and the look-up expert solve their tasks (the look-up expert reads the member's task id)."""
    specs = [TTT, REVERSE, {"env_id": "textgym/EmailToolUse-v1", "env_kwargs": {"num_steps": 1}}]
    env = mixture(*specs)
    expert = make_expert(env.unwrapped, {"envs": specs}, seed=0)
    env.close()
    assert expert.name == MEMBER_EXPERTS
    episodes = rollout(lambda: mixture(*specs), expert, list(range(24)), batch_size=5)
    returns = {}
    for episode in episodes:
        returns.setdefault(member_of(episode.task_id), []).append(episode.episode_return)
    assert set(returns) == {"TicTacToe-v0", "ReverseText-v0", "EmailToolUse-v1"}
    assert min(returns["TicTacToe-v0"]) >= 0.5  # minimax draws or wins
    assert set(returns["ReverseText-v0"]) == {1.1} and set(returns["EmailToolUse-v1"]) == {1.0}
    with pytest.raises(SetupError, match="takes no options"):
        EnvMixture.make_expert(env_kwargs={"envs": specs}, style="any")


def test_a_member_without_an_expert_leaves_the_mixture_without_one():
    base = mixture(TTT, {"env_id": register_distinct_characters()}).unwrapped
    assert base.expert_policy is None
    with pytest.raises(SetupError, match="names no expert policy"):
        make_expert(base, {}, seed=0)
