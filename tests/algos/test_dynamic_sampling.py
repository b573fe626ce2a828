"""DAPO's dynamic sampling (``dynamic_sampling_rounds``): which groups a step keeps, the extra
rounds' task seeds, the config's checks, and a run's metrics."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.algos.dynamic_sampling import EXTRA_ROUND_SEEDS, round_seed, sample_groups
from textgym.errors import NonFiniteError

G = 2  # episodes per group in these tests


def _round(*group_returns, styles=None):
    """A round: ``(episodes, styles)`` with one ``(a, b)`` pair of returns per group; each
    episode's ``task_id`` names its group's first return so the picks can be read back."""
    episodes = [
        SimpleNamespace(episode_return=r, task_id=f"{pair}") for pair in group_returns for r in pair
    ]
    return episodes, styles


def _picked(sampled):
    return [sampled.batch[i].task_id for i in range(0, len(sampled.batch), G)]


def test_extra_rounds_play_until_the_batch_is_informative():
    rounds = [
        _round((1, 1), (0, 1), (0, 0), styles=["a", "b", "c"]),
        _round((0, 0), (1, 1), (0, 0), styles=["d", "e", "f"]),
        _round((1, 0), (0.5, 0), (1, 0), styles=["g", "h", "i"]),
        _round((1, 0), (1, 0), (1, 0), styles=["j", "k", "l"]),  # never played
    ]
    sampled = sample_groups(lambda r: rounds[r], groups=3, group_size=G, rounds=3)
    assert sampled.rounds == 3
    assert _picked(sampled) == ["(0, 1)", "(1, 0)", "(0.5, 0)"]  # the first three, play order
    assert len(sampled.played) == 3 * 3 * G
    assert sampled.opponents == list("abcdefghi")  # one per played group
    assert sampled.metrics(G) == {
        "rollout_rounds": 3.0,
        "groups_played": 9.0,
        "zero_variance_fraction_played": pytest.approx(5 / 9),
    }


def test_a_short_batch_is_filled_with_the_first_flat_groups():
    rounds = [_round((1, 1), (0, 1), (0, 0)), _round((0, 0), (1, 1), (0, 0))]
    sampled = sample_groups(lambda r: rounds[r], groups=3, group_size=G, rounds=1)
    assert sampled.rounds == 2 and sampled.informative == 1
    assert _picked(sampled) == ["(1, 1)", "(0, 1)", "(0, 0)"]
    assert sampled.opponents is None


def test_no_extra_round_when_the_first_suffices_or_none_are_allowed():
    calls = []

    def play(r):
        calls.append(r)
        return _round((1, 0), (0, 0))

    assert sample_groups(play, groups=2, group_size=G, rounds=0).rounds == 1
    assert calls == [0]
    informative = sample_groups(lambda r: _round((1, 0)), groups=1, group_size=G, rounds=5)
    assert informative.rounds == 1 and informative.informative == 1


@pytest.mark.parametrize(
    ("round_", "match"),
    [
        (_round((1, 0)), "Expected round 0 to play 2 groups of 2 episodes"),
        (_round((1, 0), (0, 1), styles=["a"]), "with one opponent each"),
        (_round((1, float("nan")), (0, 1)), "finite"),
    ],
)
def test_a_malformed_round_is_refused(round_, match):
    with pytest.raises(ValueError, match=match):
        sample_groups(lambda r: round_, groups=2, group_size=G, rounds=1)


def test_a_nan_return_is_a_non_finite_error():
    with pytest.raises(NonFiniteError):
        sample_groups(lambda r: _round((1, float("nan"))), groups=1, group_size=G, rounds=0)


@given(
    seed=st.integers(0, 50),
    groups=st.integers(1, 64),
    rounds=st.integers(1, 8),
    steps=st.integers(1, 200),
)
def test_every_round_of_every_step_has_its_own_tasks(seed, groups, rounds, steps):
    seen: set[int] = set()
    for step in range(steps):
        for r in range(rounds + 1):
            first = round_seed(seed, step, r, groups, rounds)
            tasks = set(range(first, first + groups))
            assert not tasks & seen
            seen |= tasks
    # Round 0 is the seed the trainer always used; all stay in the run's band.
    assert round_seed(seed, 3, 0, groups, rounds) == seed * 10**6 + 3 * groups
    assert max(seen) < (seed + 1) * 10**6 and min(seen) >= seed * 10**6
    assert all(s - seed * 10**6 < EXTRA_ROUND_SEEDS for s in seen if s < EXTRA_ROUND_SEEDS)


def _config(tmp_path, **overrides):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from textgym.algos.grpo_config import GRPOConfig

    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact"},
        dynamic_sampling_rounds=2,
        steps=1,
        groups_per_step=2,
        group_size=2,
        rollout_batch_size=12,
        micro_batch_size=4,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=1,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"dynamic_sampling_rounds": -1}, "dynamic_sampling_rounds: expected >= 0"),
        ({"rollout_engine": "llama-server", "lora_rank": 8}, "needs rollout_engine hf"),
        ({"steps": 10**5, "groups_per_step": 8}, "task seeds each kind of round has"),
    ],
)
def test_the_config_refuses_what_dynamic_sampling_cannot_run(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, **overrides)


def test_dynamic_sampling_needs_one_process(tmp_path):
    from textgym.algos.distributed import DistributedContext
    from textgym.algos.grpo_config import check_world_size

    ctx = DistributedContext(rank=0, world_size=2)
    with pytest.raises(ValueError, match="dynamic sampling runs in one process"):
        check_world_size(_config(tmp_path), ctx)


@pytest.mark.llm
@pytest.mark.slow
def test_a_run_plays_extra_rounds_while_its_groups_are_flat(tmp_path):
    from textgym.algos import grpo

    grpo.train(_config(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    (train,) = [r for r in rows if r["stage"] == "train"]
    # The untrained tiny model never plays a legal move, so every group is flat: the step plays
    # all 1 + 2 rounds, and the update has nothing to learn from.
    assert train["rollout_rounds"] == 3 and train["groups_played"] == 6
    assert train["zero_variance_fraction_played"] == 1.0
    assert train["skipped_update"] == 1.0
