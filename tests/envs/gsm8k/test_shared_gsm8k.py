"""GSM8K-v0 against the real dataset in ../shared/data/gsm8k: the verifier on all 8,792 rows."""

import json
from fractions import Fraction
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.envs.gsm8k import GSM8KEnv

GSM8K = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "gsm8k"

pytestmark = pytest.mark.skipif(
    not (GSM8K / "train.jsonl").is_file() or not (GSM8K / "test.jsonl").is_file(),
    reason=f"the real GSM8K is not at {GSM8K} (../shared/data/gsm8k beside the repository); "
    "the unit tests use project-written problems instead",
)


@pytest.mark.parametrize(("split", "n_rows", "n_negative"), [("train", 7473, 3), ("test", 1319, 2)])
def test_gold_solution_is_correct_and_gold_plus_one_is_not_on_every_row(split, n_rows, n_negative):
    rows = [
        json.loads(line)
        for line in (GSM8K / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    env = GSM8KEnv(split=split, data_path=str(GSM8K))
    assert len(rows) == len(env.problems) == n_rows
    gold_wrong, plus_one_right, negatives = [], [], 0
    for i, row in enumerate(rows):
        _, info = env.reset(options={"task_index": i})
        assert info["task_id"] == f"gsm8k-{split}-{i:05d}"
        # An independent reading of the final answer: integers, sometimes with thousands commas.
        expected = int(row["answer"].rsplit("\n#### ", 1)[1].replace(",", ""))
        negatives += expected < 0
        _, reward, terminated, _, step = env.step(info["gold_completion"])
        if not (
            step["reward_components"] == {"correct": 1.0, "format": 0.1}
            and Fraction(step["answer"]) == expected
            and terminated
        ):
            gold_wrong.append((info["task_id"], row["answer"][-40:], step["answer"]))
        head = info["gold_completion"].rsplit("####", 1)[0]
        env.reset(options={"task_index": i})
        _, _, _, _, step = env.step(f"{head}#### {expected + 1:,}")
        if step["reward_components"] != {"correct": 0.0, "format": 0.1}:
            plus_one_right.append(info["task_id"])
    assert gold_wrong == []
    assert plus_one_right == []
    assert negatives == n_negative


def test_cli_gold_eval_on_the_test_split(tmp_path, capsys):
    kwargs = json.dumps({"split": "test", "data_path": str(GSM8K / "test.jsonl")})
    assert (
        main(
            [
                "eval",
                "textgym/GSM8K-v0",
                "--policy",
                "gold",
                "--episodes",
                "1319",
                "--env-kwargs",
                kwargs,
                "--no-progress",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 1319
    assert summary["reward_components"] == {"correct": 1.0, "format": pytest.approx(0.1)}
    assert summary["invalid_action_rate"] == 0.0
