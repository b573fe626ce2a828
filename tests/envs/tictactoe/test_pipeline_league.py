"""benchmarks/tictactoe_pipeline.py's mastery phase is the league (issue 34): with LoRA it trains
the GRPO adapter further against every opponent style, from critical start positions, and the
exported adapters load as one chain whose mastery adapter sits on the SFT one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

pytestmark = [pytest.mark.llm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import tictactoe_pipeline  # noqa: E402  (a script beside the benchmarks, not a package)

from textgym.envs.tictactoe.env import OPPONENTS  # noqa: E402
from textgym.models import adapter_base_of, load_model  # noqa: E402


def test_the_mastery_phase_continues_the_grpo_adapter_against_the_league(tmp_path):
    argv = ["--smoke", "--lora-rank", "4", "--mastery-steps", "1", "--work-dir", str(tmp_path)]
    for stage in ("sft", "grpo", "mastery"):  # the training stages only: no evaluation
        assert tictactoe_pipeline.main([*argv, "--stage", stage]) == 0
    run = json.loads((tmp_path / "mastery" / "run.json").read_text())["config"]
    assert run["env_kwargs"]["opponent"] == list(OPPONENTS)
    assert run["env_kwargs"]["start_boards"] == "critical"
    assert run["env_kwargs"]["start_board_prob"] == 0.5
    assert run["continue_adapter"] and run["learning_rate"] == 1e-4
    assert run["opponent_random_move_prob"] == [0.0, 0.5]
    # One adapter trained further: the mastery checkpoint sits on the SFT model, as GRPO's does.
    grpo = tictactoe_pipeline.latest_checkpoint(tmp_path / "grpo")
    mastery = tictactoe_pipeline.latest_checkpoint(tmp_path / "mastery")
    assert Path(adapter_base_of(mastery)).resolve() == Path(adapter_base_of(grpo)).resolve()
    adapters = tictactoe_pipeline.export_adapters(
        tictactoe_pipeline.parse_args(argv), tmp_path, tmp_path / "exported"
    )
    exported = Path(adapters["mastery"])
    config = json.loads((exported / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "../sft"
    # The exported chain loads (base ../sft resolved beside it) and plays what the checkpoint
    # plays: the same logits up to the bfloat16 export of the adapter factors.
    exported_model, tokenizer = load_model(str(exported), dtype="float32")
    trained_model, _ = load_model(str(mastery), dtype="float32")
    ids = tokenizer("X to move. Board: 1 2 3 / 4 5 6 / 7 8 9", return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = exported_model(ids).logits, trained_model(ids).logits
    assert torch.allclose(a, b, atol=0.05, rtol=0.05)
