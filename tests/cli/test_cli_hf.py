"""``textgym eval --policy hf`` plays complete games with a real (tiny, random) LLM on CPU."""

import json

import pytest

pytest.importorskip("torch", reason="needs the llm extra: pip install 'textgym[llm]'")
pytest.importorskip("transformers", reason="needs the llm extra: pip install 'textgym[llm]'")

from textgym.cli import main  # noqa: E402

pytestmark = pytest.mark.llm


def test_eval_hf_tiny_plays_complete_games(tmp_path, capsys):
    out = tmp_path / "hf"
    code = main(
        [
            "eval",
            "textgym/TicTacToe-v0",
            "--policy",
            "hf",
            "--model",
            "tiny",
            "--episodes",
            "4",
            "--rollout-batch-size",
            "4",
            "--max-new-tokens",
            "12",
            "--seed",
            "0",
            "--output-dir",
            str(out),
            "--wrappers",
            "format_reward,invalid_action_penalty",
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "hf" and summary["model"] == "tiny" and summary["episodes"] == 4
    assert summary["tokens_generated"] > 0
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        # A random tiny model almost never writes a legal move: games end by the time limit,
        # every step is an invalid action, and the penalty is paid once.
        assert record["terminated"] or record["truncated"]
        assert len(record["rewards"]) == sum(m["role"] == "assistant" for m in record["messages"])
        assert record["return"] == pytest.approx(sum(record["rewards"]))
    assert "generated tokens / s" in capsys.readouterr().out
