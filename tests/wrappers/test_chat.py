"""ChatMessages: the conversation view matches the rollout's record and the space."""

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.rollout import rollout
from textgym.wrappers import ChatMessages


@pytest.mark.parametrize(
    "env_id", ["textgym/TicTacToe-v0", "textgym/GSM8K-v0", "textgym/ReverseText-v0"]
)
def test_messages_equal_the_rollout_record_and_lie_in_the_space(env_id):
    (traj,) = rollout(lambda: gym.make(env_id), _Replay(), [5])
    env = ChatMessages(gym.make(env_id))
    messages, info = env.reset(seed=5)
    assert env.observation_space.contains(messages)
    for m in traj.messages[2::2]:  # the assistant turns, in order
        messages, *_, info = env.step(m["content"])
        assert env.observation_space.contains(messages)
    assert list(messages) == traj.messages


class _Replay:
    """Minimax moves on tic-tac-toe, gold answers on the dataset tasks."""

    name = "replay"

    def act(self, conversations, infos):
        if "board" in infos[0]:
            return MinimaxPolicy(seed=0).act(conversations, infos)
        from textgym.types import Completion

        return [Completion(info["gold_completion"]) for info in infos]


@given(st.lists(st.text(max_size=50), min_size=1, max_size=6))
def test_arbitrary_actions_are_recorded_verbatim(actions):
    env = ChatMessages(gym.make("textgym/TicTacToe-v0"))
    messages, _ = env.reset(seed=0)
    for i, action in enumerate(actions):
        messages, _, terminated, truncated, _ = env.step(action)
        assert messages[-2] == {"role": "assistant", "content": action}
        assert len(messages) == 2 + 2 * (i + 1)
        if terminated or truncated:
            break


def test_rejects_non_text_observations():
    with pytest.raises(TypeError, match="Text observation space"):
        ChatMessages(gym.make("CartPole-v1"))
