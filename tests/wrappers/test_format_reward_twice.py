"""FormatReward on an env that already pays its own ``format`` component (GSM8K, ReverseText)."""

import gymnasium as gym
import pytest

from textgym.wrappers import FormatReward  # importing textgym registers the envs


@pytest.mark.parametrize("env_id", ["textgym/GSM8K-v0", "textgym/ReverseText-v0"])
def test_refused_when_made_not_at_the_first_step(env_id):
    # It used to be accepted, then every episode crashed at its first step ("Reward component
    # 'format' is already present").
    with pytest.raises(
        ValueError, match=r"already pays a 'format' reward component \(format_weight=0.1\)"
    ):
        FormatReward(gym.make(env_id))


def test_another_name_adds_a_second_component_that_sums():
    env = FormatReward(gym.make("textgym/GSM8K-v0"), weight=0.3, name="format_bonus")
    _, info = env.reset(seed=0)
    _, reward, terminated, _, info = env.step(info["gold_completion"])
    components = info["reward_components"]
    assert terminated and set(components) == {"correct", "format", "format_bonus"}
    assert components["format_bonus"] == 0.3 and reward == pytest.approx(sum(components.values()))
