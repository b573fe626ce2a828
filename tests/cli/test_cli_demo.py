"""``textgym demo``: both models play the same seeded games against both opponents, one table;
a missing adapter is one line. The tiny model and a seeded LoRA adapter of it stand in for
Gemma 3 270M and the committed adapter (the real pair is the README's main job)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from textgym.algos.checkpoints import save_model  # noqa: E402
from textgym.cli import main  # noqa: E402
from textgym.cli.demo import DemoConfig, model_rows, table  # noqa: E402
from textgym.models import load_model  # noqa: E402

from .._runs import seeded_lora  # noqa: E402

pytestmark = pytest.mark.llm


def test_demo_plays_both_models_on_the_same_games_side_by_side(tmp_path, capsys):
    base, tokenizer = load_model("tiny")
    save_model(seeded_lora(base, seed=0), tokenizer, tmp_path / "adapter", base="tiny")
    argv = ["demo", "--model", "tiny", "--adapter", str(tmp_path / "adapter"), "--games", "3"]
    argv += ["--max-new-tokens", "4", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for opponent in ("optimal", "random"):
        assert out.count(opponent) >= 2  # a row per model
    assert "base" in out and "trained" in out and "To train one" in out

    config = DemoConfig(model="tiny", games=3, max_new_tokens=4, progress=False)
    rows = model_rows(config, "base", "tiny")
    assert [(r["opponent"], r["episodes"]) for r in rows] == [("optimal", 3), ("random", 3)]
    again = model_rows(config, "base", "tiny")
    assert [r["outcomes"] for r in again] == [r["outcomes"] for r in rows]  # seeded, greedy
    assert table(rows).row_count == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--adapter", "/nonexistent/adapter"],
        ["--games", "0"],
        ["--seed", "-1"],
        ["--max-new-tokens", "0"],
    ],
)
def test_demo_refuses_bad_input_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--model", "tiny", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("textgym: error:"), err
