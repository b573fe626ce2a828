"""The committed recipes (recipes/*.toml): each loads and resolves, its first stages run at
smoke size, and the tic-tac-toe recipe runs end to end at smoke size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.recipes import RecipeError, load_recipe

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.toml"))


def test_there_are_recipes():
    assert {p.stem for p in RECIPES} >= {
        "tictactoe",
        "tictactoe_league",
        "reverse_text",
        "email",
        "mixture",
    }


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
@pytest.mark.parametrize("smoke", [False, True])
def test_each_recipe_resolves(recipe, smoke, tmp_path):
    loaded = load_recipe(recipe, tmp_path, smoke=smoke)
    assert loaded.description
    for stage in loaded.stages:
        assert not re.search(r"\{[\w.-]*\}", json.dumps(stage.options)), stage  # all resolved
        for key in ("output", "output_dir"):
            if key in stage.options:
                assert Path(stage.options[key]).is_relative_to(tmp_path)
        if smoke and "model" in stage.options:
            assert stage.options["model"] == "tiny" or str(tmp_path) in stage.options["model"]


def test_set_changes_an_option_and_names_a_stage(tmp_path):
    recipe = RECIPES[0]
    first = load_recipe(recipe, tmp_path).stages[0]
    key = next(k for k, v in first.options.items() if isinstance(v, int))
    changed = load_recipe(recipe, tmp_path, overrides=[f"{first.name}.{key}=7"]).stages[0]
    assert changed.options[key] == 7
    rt = RECIPES[[p.stem for p in RECIPES].index("reverse_text")]
    named = load_recipe(rt, tmp_path, overrides=['data.args=["--corpus", "{recipe_dir}/c.jsonl"]'])
    assert named.stages[0].options["args"][1] == f"{rt.parent.absolute()}/c.jsonl"
    with pytest.raises(RecipeError, match="no stage 'nope'"):
        load_recipe(recipe, tmp_path, overrides=["nope.x=1"])
    with pytest.raises(RecipeError, match="expected STAGE.OPTION=VALUE"):
        load_recipe(recipe, tmp_path, overrides=["x=1"])


@pytest.mark.llm
def test_the_tictactoe_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    pytest.importorskip("torch")
    recipe = str(RECIPES[[p.stem for p in RECIPES].index("tictactoe")])
    assert main(["run", recipe, "--work-dir", str(tmp_path), "--smoke"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["stage"] for r in rows][:2] == ["eval-base-greedy-random", "eval-base-greedy-optimal"]
    assert len(rows) == 10 and all(r["episodes"] == 8 for r in rows)
    sft = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    assert sft["conversations"] < sft["conversations_read"] == 40  # --cover thinned the games
    assert (tmp_path / "grpo" / "checkpoint-2" / "adapter_model.safetensors").is_file()


@pytest.mark.llm
@pytest.mark.parametrize(
    ("name", "until"),
    [
        ("reverse_text", "sft"),
        ("email", "sft"),
        ("tictactoe_league", "eval-o-minimax"),
        ("mixture", "grpo"),
        ("tictactoe_o_seat", "guided"),
    ],
)
def test_the_first_stages_of_a_recipe_run_at_smoke_size(tmp_path, name, until):
    pytest.importorskip("torch")
    recipe = str(RECIPES[[p.stem for p in RECIPES].index(name)])
    argv = ["run", recipe, "--work-dir", str(tmp_path), "--smoke", "--until", until]
    assert main(argv) == 0
    marks = sorted(p.stem for p in (tmp_path / ".textgym-run").glob("*.json"))
    assert until in marks
