"""ReverseText-v0 on the 6,134 real public-domain paragraphs in ../shared/data/paragraphs."""

import json
from pathlib import Path

import pytest

from textgym.envs.reverse_text import ReverseTextEnv
from textgym.envs.reverse_text.parsing import CLOSE_TAG, OPEN_TAG

PARAGRAPHS = (
    Path(__file__).resolve().parents[3].parent
    / "shared"
    / "data"
    / "paragraphs"
    / "paragraphs.jsonl"
)

pytestmark = pytest.mark.skipif(
    not PARAGRAPHS.is_file(),
    reason=f"the real paragraphs are not at {PARAGRAPHS} (../shared/data/paragraphs/paragraphs.jsonl "
    "beside the repository); the unit tests use project-written texts instead",
)


def test_exact_reversal_scores_one_and_unreversed_less_on_every_paragraph():
    rows = [json.loads(line) for line in PARAGRAPHS.read_text(encoding="utf-8").splitlines()]
    env = ReverseTextEnv(data_path=str(PARAGRAPHS))
    assert len(rows) == len(env.passages) == 6134
    not_exact, unreversed_full = [], []
    palindromes = 0
    for i, row in enumerate(rows):
        _, info = env.reset(options={"task_index": i})
        assert info["task_id"] == row["id"] and info["n_chars"] == row["n_chars"] == len(
            row["text"]
        )
        _, _, _, _, gold = env.step(info["gold_completion"])
        if gold["reward_components"]["lcs"] != 1.0 or not gold["exact"]:
            not_exact.append(row["id"])
        env.reset(options={"task_index": i})
        _, _, _, _, plain = env.step(f"{OPEN_TAG}{row['text']}{CLOSE_TAG}")
        if row["text"] == row["text"][::-1]:
            palindromes += 1
        elif plain["reward_components"]["lcs"] >= 1.0:
            unreversed_full.append(row["id"])
    assert not_exact == []
    assert unreversed_full == []
    assert palindromes == 0


def test_task_id_option_and_length_filter_on_real_paragraphs():
    env = ReverseTextEnv(data_path=str(PARAGRAPHS), min_chars=550, max_chars=600)
    assert env.passages and all(550 <= len(p.text) <= 600 for p in env.passages)
    passage = env.passages[-1]
    obs, info = env.reset(options={"task_id": passage.task_id})
    assert obs.endswith(passage.text) and info["n_chars"] == len(passage.text)
