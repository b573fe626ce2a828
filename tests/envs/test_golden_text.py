"""Observations, rewards and infos are byte-identical to those recorded before the env refactor.

``golden_text.json`` was written by this module's ``__main__`` from the code as it was before
tic-tac-toe's prompt style was chosen once and GSM8K / ReverseText moved onto the single-turn
base. Each record is one scripted episode: seeded, with legal moves and every kind of invalid
action. Regenerate only for a deliberate change of behaviour (and bump the env's ``-vN``):
``python tests/envs/test_golden_text.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import textgym  # noqa: F401  (registers the ids)
from textgym.envs.gsm8k import GSM8KEnv
from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.tictactoe import TicTacToeEnv

GOLDEN = Path(__file__).with_name("golden_text.json")
SEEDS = (0, 1, 7, 42)
INVALID = ("hello", "<move>9</move>", "<move>x</move>", "x" * 65537)


def _plain(value: Any) -> Any:
    """JSON round trip, so recorded and fresh values compare alike (tuples become lists)."""
    return json.loads(json.dumps(value))


def _tictactoe_episode(style: str, mark: str, seed: int) -> list[Any]:
    env = TicTacToeEnv(agent_mark=mark, prompt_style=style, random_move_prob=0.3)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    records: list[Any] = [[obs, info]]
    for turn in range(12):
        if turn % 2:
            action = INVALID[int(rng.integers(len(INVALID)))]
        elif turn % 4 == 2 and env.board.count(".") < 9:
            action = f"<move>{env.board.index('X' if 'X' in env.board else 'O')}</move>"
        else:
            action = f"<think>hm</think><move>{int(rng.choice(info['legal_moves']))}</move>"
        obs, reward, terminated, truncated, info = env.step(action)
        records.append([obs, reward, terminated, truncated, info])
        if terminated:
            break
    return records


def _pettingzoo_episode(style: Any, first: str, seed: int) -> list[Any]:
    from textgym.envs.tictactoe.pettingzoo_env import TicTacToeTextAEC

    env = TicTacToeTextAEC(first_player=first, prompt_style=style)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    records: list[Any] = [[{s: env.observe(s) for s in env.agents}, env.infos]]
    for turn in range(20):
        seat = env.agent_selection
        if env.terminations[seat] or env.truncations[seat]:
            break
        if turn % 3 == 1:
            action = INVALID[int(rng.integers(len(INVALID)))]
        else:
            action = f"<move>{int(rng.choice(env.infos[seat]['legal_moves']))}</move>"
        env.step(action)
        records.append(
            [
                seat,
                {s: env.observe(s) for s in env.possible_agents},
                dict(env.rewards),
                env.infos,
                dict(env.terminations),
            ]
        )
    return records


def _single_turn_episodes(env: Any) -> list[Any]:
    records = []
    for seed in SEEDS:
        obs, info = env.reset(seed=seed)
        gold = info["gold_completion"]
        for action in (gold, "no answer", gold[: len(gold) // 2], "#### 12", "x" * 70000):
            obs2, info2 = env.reset(seed=seed)
            assert (obs2, info2) == (obs, info)
            records.append([obs, info, action[:100], *env.step(action)])
    return records


def record() -> dict[str, Any]:
    """Every scripted episode, keyed by what it plays."""
    out: dict[str, Any] = {}
    for style in ("full", "compact"):
        for mark in ("X", "O", "random"):
            for seed in SEEDS:
                out[f"tictactoe/{style}/{mark}/{seed}"] = _tictactoe_episode(style, mark, seed)
    styles: dict[str, Any] = {
        "full": "full",
        "compact": "compact",
        "mixed": {"player_0": "compact", "player_1": "full"},
    }
    for name, style in styles.items():
        for first in ("player_0", "player_1"):
            for seed in SEEDS[:2]:
                out[f"pettingzoo/{name}/{first}/{seed}"] = _pettingzoo_episode(style, first, seed)
    out["gsm8k/sample"] = _single_turn_episodes(GSM8KEnv())
    out["reverse_text/corpus"] = _single_turn_episodes(ReverseTextEnv(max_chars=200))
    out["gsm8k/weight"] = _single_turn_episodes(GSM8KEnv(format_weight=0.3))
    return _plain(out)


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    pytest.importorskip("pettingzoo")
    return record()


def test_same_episodes_recorded(golden, fresh):
    assert sorted(fresh) == sorted(golden)


@pytest.mark.parametrize("prefix", ["tictactoe/full", "tictactoe/compact", "pettingzoo", "gsm8k"])
def test_text_unchanged(golden, fresh, prefix):
    keys = [k for k in golden if k.startswith(prefix)]
    assert keys
    for key in keys:
        assert fresh[key] == golden[key], key


def test_reverse_text_unchanged(golden, fresh):
    assert fresh["reverse_text/corpus"] == golden["reverse_text/corpus"]


if __name__ == "__main__":
    GOLDEN.write_text(
        json.dumps(record(), ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    print(f"wrote {GOLDEN}")
