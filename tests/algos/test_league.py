"""Prioritised opponent sampling (``opponent_priority="loss"``): the league's draw follows the
policy's loss rates, its state survives a checkpoint, and a GRPO run draws one style a group."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textgym.algos.league import OpponentLeague

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STYLES = ("minimax", "fork", "random")


def test_styles_not_played_yet_are_drawn_alike():
    league = OpponentLeague(STYLES)
    assert league.loss_rates() == [0.5, 0.5, 0.5]
    assert league.probabilities() == pytest.approx([1 / 3] * 3)


def test_the_draw_follows_the_losses_and_the_floor_keeps_every_style():
    league = OpponentLeague(STYLES, floor=0.05, decay=1.0)
    # 10 games a style: lost 8 to fork, none to the others.
    league.add(league.counts(["fork"] * 10 + ["minimax"] * 10 + ["random"] * 10,
                             ["loss"] * 8 + ["draw"] * 2 + ["draw"] * 10 + ["win"] * 10))  # fmt: skip
    rates = league.loss_rates()
    assert rates == pytest.approx([0.5 / 11, 8.5 / 11, 0.5 / 11])
    p = dict(zip(STYLES, league.probabilities(), strict=True))
    assert p["fork"] > 0.7 and p["minimax"] == p["random"] > 0.05
    drawn = league.draw(1000, "0/1/league")
    assert 0.7 < drawn.count("fork") / 1000 < 0.9
    assert drawn == league.draw(1000, "0/1/league")  # the same seed, the same draw
    assert drawn != league.draw(1000, "0/2/league")


def test_old_steps_fade_by_the_decay():
    league = OpponentLeague(STYLES, decay=0.5)
    league.add(league.counts(["fork"] * 4, ["loss"] * 4))
    league.add(league.counts(["fork"] * 4, ["win"] * 4))
    assert league.losses[1] == 2.0 and league.games[1] == 6.0  # 4 x 0.5 + 0; 4 x 0.5 + 4


@given(
    st.lists(
        st.tuples(st.sampled_from(STYLES), st.sampled_from(["win", "draw", "loss", None])),
        max_size=50,
    )
)
def test_probabilities_are_a_distribution_with_every_style_above_the_floor(episodes):
    league = OpponentLeague(STYLES, floor=0.05)
    league.add(league.counts([s for s, _ in episodes], [o for _, o in episodes]))
    p = league.probabilities()
    assert sum(p) == pytest.approx(1.0)
    # Each weight is floor + rate, rates in [0, 1]: at least floor / (3 x (floor + 1)).
    assert min(p) >= 0.05 / (3 * 1.05) - 1e-12


def test_the_state_round_trips_and_refuses_another_league():
    league = OpponentLeague(STYLES)
    league.add(league.counts(["fork", "random"], ["loss", "win"]))
    again = OpponentLeague(STYLES)
    again.load_state_dict(json.loads(json.dumps(league.state_dict())))
    assert again.probabilities() == league.probabilities()
    with pytest.raises(ValueError, match="styles"):
        OpponentLeague(("minimax", "fork")).load_state_dict(league.state_dict())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: OpponentLeague(("minimax", "minimax")), "at least two opponent styles"),
        (lambda: OpponentLeague(STYLES, floor=0), "floor > 0"),
        (lambda: OpponentLeague(STYLES).counts(["greedy_edge"], ["loss"]), "not in the league"),
        (lambda: OpponentLeague(STYLES).counts(["fork"], []), "one outcome per episode"),
    ],
)
def test_bad_leagues_and_episodes_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _config(tmp_path, **overrides):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from textgym.algos.grpo_config import GRPOConfig

    settings = dict(
        model="tiny",
        output_dir=str(tmp_path / "run"),
        env_id="textgym/TicTacToe-v0",
        env_kwargs={"prompt_style": "compact", "opponent": ["minimax", "random"]},
        opponent_priority="loss",
        opponent_random_move_prob=(0.0, 0.5),
        steps=2,
        groups_per_step=3,
        group_size=2,
        rollout_batch_size=6,
        micro_batch_size=6,
        max_new_tokens=4,
        eval_every=0,
        eval_episodes=1,
        save_every=1,
        log_completions=3,
        device="cpu",
        tensorboard=False,
        progress=False,
    )
    return GRPOConfig(**(settings | overrides))


@pytest.mark.parametrize(
    ("env_kwargs", "match"),
    [
        ({"opponent": "minimax"}, "list of at least two styles"),
        ({"opponent": ["fork", "fork"]}, "list of at least two styles"),
    ],
)
def test_the_loss_priority_needs_a_list_of_styles(tmp_path, env_kwargs, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, env_kwargs=env_kwargs)


@pytest.mark.llm
@pytest.mark.slow
def test_a_run_draws_one_style_a_group_and_checkpoints_the_league(tmp_path):
    from textgym.algos import grpo
    from textgym.algos.checkpoints import latest_checkpoint
    from textgym.algos.resume import read_trainer_state

    config = _config(tmp_path)
    grpo.train(config)
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    train = [r for r in rows if r["stage"] == "train"]
    for row in train:
        assert row["league_p/minimax"] + row["league_p/random"] == pytest.approx(1.0)
    # Step 1 draws from the prior; the tiny model never moves legally, so it loses or is cut
    # short in every game and the losses it did record move step 2's draw.
    assert train[0]["league_p/minimax"] == pytest.approx(0.5)
    episodes = [json.loads(line) for line in (run / "train_episodes.jsonl").open()]
    for step in (1, 2):
        groups: dict[int, set[str]] = {}
        for e in (e for e in episodes if e["step"] == step):
            # task_id: tictactoe-{mark}-{opponent}-p{prob}; the group's copies share it.
            groups.setdefault(e["group"], set()).add(e["task_id"].split("-")[2])
        assert len(groups) == 3 and all(len(styles) == 1 for styles in groups.values())
    state = read_trainer_state(latest_checkpoint(run), optimizer_needed=False)
    assert state["extra"]["league"]["styles"] == ["minimax", "random"]
    assert sum(state["extra"]["league"]["games"]) == pytest.approx(0.9 * 6 + 6)
