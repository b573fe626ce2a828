"""StructuredTicTacToe: a board/Discrete(9) view on the text env's dynamics; SB3 trains on it."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import textgym  # noqa: F401
from textgym.envs.tictactoe import TicTacToeEnv
from textgym.wrappers.structured import StructuredTicTacToe, encode_board


def test_check_env():
    check_env(StructuredTicTacToe(TicTacToeEnv()), skip_render_check=True)


@pytest.mark.parametrize(
    ("board", "mark", "expected"),
    [
        (".........", "X", [0] * 9),
        ("X.O......", "X", [1, 0, 2, 0, 0, 0, 0, 0, 0]),
        ("X.O......", "O", [2, 0, 1, 0, 0, 0, 0, 0, 0]),
        ("XOXOXOOXO", "O", [2, 1, 2, 1, 2, 1, 1, 2, 1]),
    ],
)
def test_encode_board(board, mark, expected):
    assert encode_board(board, mark).tolist() == expected


@pytest.mark.parametrize("agent_mark", ["X", "O", "random"])
@pytest.mark.parametrize("prob", [0.0, 0.5, 1.0])
def test_structured_and_text_env_agree_step_for_step(agent_mark, prob):
    rng = np.random.default_rng(0)
    for seed in range(15):
        text = gym.make("textgym/TicTacToe-v0", agent_mark=agent_mark, random_move_prob=prob)
        view = StructuredTicTacToe(
            gym.make("textgym/TicTacToe-v0", agent_mark=agent_mark, random_move_prob=prob)
        )
        _, text_info = text.reset(seed=seed)
        obs, info = view.reset(seed=seed)
        while True:
            expected = encode_board(text_info["board"], text_info["agent_mark"])
            assert obs.tolist() == expected.tolist()
            assert view.observation_space.contains(obs)
            assert view.action_masks().tolist() == [c in text_info["legal_moves"] for c in range(9)]
            assert info["action_mask"].tolist() == view.action_masks().tolist()
            assert {k: v for k, v in info.items() if k != "action_mask"} == text_info
            # Mostly legal moves, sometimes an occupied cell (an invalid action in both).
            legal = text_info["legal_moves"]
            action = int(rng.integers(9)) if rng.random() < 0.2 else int(rng.choice(legal))
            _, text_reward, text_term, text_trunc, text_info = text.step(f"<move>{action}</move>")
            obs, reward, terminated, truncated, info = view.step(action)
            assert (reward, terminated, truncated) == (text_reward, text_term, text_trunc)
            assert type(reward) is float
            if terminated or truncated:
                assert {k: v for k, v in info.items() if k != "action_mask"} == text_info
                break


def test_invalid_action_and_errors():
    env = StructuredTicTacToe(TicTacToeEnv(opponent="random"))
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(4)
    opponent_cell = info["opponent_move"]
    before = obs.copy()
    obs, reward, terminated, _, info = env.step(opponent_cell)
    assert info["invalid_action"] and info["invalid_reason"] == "occupied"
    assert obs.tolist() == before.tolist() and reward == 0.0 and not terminated
    with pytest.raises(ValueError, match="Discrete"):
        env.step(9)

    class NoBoard(gym.Env):
        observation_space = action_space = gym.spaces.Discrete(1)

        def reset(self, *, seed=None, options=None):
            return 0, {}

    with pytest.raises(KeyError, match="board"):
        StructuredTicTacToe(NoBoard()).reset()


def _win_rate(model, games: int = 300) -> float:
    env = StructuredTicTacToe(gym.make("textgym/TicTacToe-v0", random_move_prob=1.0))
    wins = 0
    for i in range(games):
        obs, info = env.reset(seed=1_000_000 + i)
        while True:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, _, terminated, truncated, info = env.step(int(action))
            if terminated or truncated:
                wins += info["outcome"] == "win"
                break
    return wins / games


def test_short_maskable_ppo_run_improves_on_the_untrained_policy():
    pytest.importorskip("sb3_contrib")
    torch = pytest.importorskip("torch")
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    vec_env = DummyVecEnv(
        [
            lambda: StructuredTicTacToe(gym.make("textgym/TicTacToe-v0", random_move_prob=1.0))
            for _ in range(4)
        ]
    )
    vec_env.seed(0)
    model = MaskablePPO(
        "MlpPolicy",
        vec_env,
        n_steps=256,
        batch_size=256,
        n_epochs=10,
        learning_rate=1e-3,
        ent_coef=0.01,
        policy_kwargs={"net_arch": [64, 64]},
        seed=0,
        device="cpu",
    )
    before = _win_rate(model)
    model.learn(total_timesteps=6144)
    after = _win_rate(model)
    assert after >= before + 0.1, (before, after)
