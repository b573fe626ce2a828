"""Reward wrappers: component bookkeeping, penalties, stratified opponent skill."""

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.wrappers import (
    FormatReward,
    InvalidActionPenalty,
    OpponentSkill,
    StratifiedOpponent,
)

WELL = "<think>t</think><move>{}</move>"


def ttt(**kwargs):
    return gym.make("textgym/TicTacToe-v0", **kwargs)


def play_out(env, seed, first_actions=()):
    """Play the given actions, then legal well-formed moves until the episode ends."""
    _, info = env.reset(seed=seed)
    steps = []
    for action in first_actions:
        steps.append(env.step(action))
        info = steps[-1][4]
    while not (steps and (steps[-1][2] or steps[-1][3])):
        steps.append(env.step(WELL.format(info["legal_moves"][0])))
        info = steps[-1][4]
    return steps


def test_format_reward_is_fraction_of_well_formed_actions_paid_at_end():
    env = FormatReward(ttt(opponent="random"), weight=0.2)
    steps = play_out(env, 0, first_actions=["<move>4</move>"])
    fmt = [s[4]["reward_components"]["format"] for s in steps]
    assert all(v == 0.0 for v in fmt[:-1])
    n = len(steps)
    assert fmt[-1] == pytest.approx(0.2 * (n - 1) / n)
    for _obs, reward, *_rest, info in steps:
        assert sum(info["reward_components"].values()) == pytest.approx(reward)


def test_format_reward_paid_on_truncation():
    env = FormatReward(ttt())
    env.reset(seed=0)
    for _ in range(10):
        _, reward, _, truncated, info = env.step("<think>hm</think><move>x</move>")
    assert truncated and info["reward_components"]["format"] == 0.0
    env.reset(seed=0)
    for _ in range(10):
        _, reward, _, truncated, info = env.step("nothing")
    assert info["reward_components"]["format"] == 0.0


def test_format_reward_requires_a_check():
    class Plain(gym.Env):
        observation_space = action_space = textgym.UnicodeText(10)

    with pytest.raises(TypeError, match="is_well_formed"):
        FormatReward(Plain())
    with pytest.raises(ValueError, match="weight >= 0"):
        FormatReward(ttt(), weight=-1)


def test_duplicate_component_name_is_an_error():
    env = FormatReward(FormatReward(ttt()))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="already present"):
        env.step("<move>4</move>")


def test_invalid_penalty_episode_mode_is_flat():
    env = InvalidActionPenalty(ttt(opponent="random"))
    steps = play_out(env, 1, first_actions=["x", "<move>9</move>", "y"])
    pen = [s[4]["reward_components"]["invalid_action"] for s in steps]
    assert pen[:3] == [-0.1, 0.0, 0.0] and all(p == 0.0 for p in pen[3:])


def test_invalid_penalty_action_mode_with_cap():
    env = InvalidActionPenalty(ttt(), penalty=0.1, mode="action", cap=0.25)
    env.reset(seed=0)
    pens = [env.step("bad")[4]["reward_components"]["invalid_action"] for _ in range(4)]
    assert pens == pytest.approx([-0.1, -0.1, -0.05, 0.0])
    env.reset(seed=1)
    assert env.step("bad")[1] == pytest.approx(-0.1)  # reset clears the running total


@pytest.mark.parametrize("kwargs", [{"penalty": -1}, {"mode": "step"}, {"cap": -0.5}])
def test_invalid_penalty_validates(kwargs):
    with pytest.raises(ValueError, match="Expected"):
        InvalidActionPenalty(ttt(), **kwargs)


def test_stratified_opponent_stratifies_consecutive_episodes():
    env = StratifiedOpponent(ttt(), random_move_prob=(0.2, 0.6), groups=4)
    env.reset(seed=0)
    probs = [env.reset()[1]["random_move_prob"] for _ in range(8)]
    buckets = [int((p - 0.2) / 0.1) for p in probs]
    assert buckets == [1, 2, 3, 0, 1, 2, 3, 0]
    assert all(0.2 <= p <= 0.6 for p in probs)


def test_stratified_opponent_same_seed_same_opponent_and_explicit_override():
    a, b = StratifiedOpponent(ttt(), groups=3), StratifiedOpponent(ttt(), groups=3)
    assert a.reset(seed=5)[1]["random_move_prob"] == b.reset(seed=5)[1]["random_move_prob"]
    prob = a.reset(seed=5, options={"random_move_prob": 0.9, "episode_index": 2})[1][
        "random_move_prob"
    ]
    assert prob == 0.9
    with pytest.raises(ValueError, match="episode_index"):
        a.reset(options={"episode_index": -1})
    with pytest.raises(ValueError, match="low <= high"):
        StratifiedOpponent(ttt(), random_move_prob=(0.8, 0.2))
    with pytest.raises(ValueError, match="low <= high"):
        StratifiedOpponent(ttt(), random_move_prob=0.5)
    with pytest.raises(ValueError, match="groups"):
        StratifiedOpponent(ttt(), groups=0)


def test_stratified_opponent_refuses_an_env_without_an_opponent():
    with pytest.raises(ValueError, match="GSM8KEnv has no seeded opponent"):
        StratifiedOpponent(gym.make("textgym/GSM8K-v0"))


def test_opponent_skill_is_a_deprecated_alias_with_the_same_draws():
    with pytest.warns(DeprecationWarning, match="StratifiedOpponent"):
        old = OpponentSkill(ttt(), low=0.2, high=0.6, groups=4)
    new = StratifiedOpponent(ttt(), random_move_prob=(0.2, 0.6), groups=4)
    assert isinstance(old, StratifiedOpponent)
    for seed in range(5):
        assert old.reset(seed=seed)[1] == new.reset(seed=seed)[1]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_reward_wrappers_refuse_non_finite_or_negative_sizes(bad):
    env = gym.make("textgym/TicTacToe-v0")
    with pytest.raises(ValueError, match="finite"):
        InvalidActionPenalty(env, penalty=bad)
    with pytest.raises(ValueError, match="finite"):
        InvalidActionPenalty(env, mode="action", cap=bad)
    with pytest.raises(ValueError, match="finite"):
        FormatReward(env, weight=bad)


def test_format_reward_does_not_read_an_over_long_action():
    checked = []
    env = FormatReward(
        gym.make("textgym/TicTacToe-v0"),
        weight=1.0,
        is_well_formed=lambda a: checked.append(a) or True,
    )
    env.reset(seed=0)
    limit = env.unwrapped.action_space.max_length
    _, _, _, _, info = env.step("<think>x</think><move>4</move>" + " " * limit)
    assert info["invalid_reason"] == "too_long" and checked == []


def test_every_wrapper_is_rebuilt_by_gym_make_of_its_spec():
    from textgym.wrappers import ChatMessages, StructuredTicTacToe

    def layers(env):
        out = []
        while isinstance(env, gym.Wrapper):
            out.append((type(env), getattr(env, "_saved_kwargs", None)))
            env = env.env
        return out

    stacks = [
        ChatMessages(InvalidActionPenalty(ttt(), penalty=0.3, mode="action", cap=0.5)),
        StructuredTicTacToe(StratifiedOpponent(ttt(), (0.1, 0.9), groups=2)),
        FormatReward(ttt(), weight=0.5, name="fmt"),
    ]
    for env in stacks:
        rebuilt = gym.make(env.spec)
        assert layers(rebuilt) == layers(env)
        first, again = env.reset(seed=3), rebuilt.reset(seed=3)
        assert str(first) == str(again)
