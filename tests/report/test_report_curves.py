"""The report's curves: the data ``report.js`` draws, and the page in Chromium.

Train and SFT runs are written as the trainers write them (``metrics.jsonl`` rows with the keys
of ``algos/grpo.py`` and ``algos/sft.py``, ``run.json``'s config); the per-task view reads an
eval run made by the CLI. The browser test skips where Chromium and its driver are missing.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.data import iter_jsonl
from textgym.report import build_report, load_run
from textgym.report.curves import RUN_COLORS, chart_specs, step_axes, task_tables
from textgym.toolformat import from_chat_messages

from .test_report import browser  # noqa: F401  (the Chromium fixture, or a skip saying why)

EVAL_EPISODES = 20


def _write(path: Path, rows: list[dict], config: dict) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run.json").write_text(json.dumps({"command": [], "config": config}))
    return path


def grpo_run(path: Path) -> Path:
    """Six GRPO steps (step 2 skipped its update), evaluations at 0, 3 and 6; beta 0 (KL 0) and
    on-policy (clip fraction 0); reward_mean equal to reward/outcome, as with no invalid action."""
    rows = []
    for step in range(7):
        if step % 3 == 0:
            rows.append(
                {
                    "step": step,
                    "stage": "eval",
                    "random/return_mean": 0.1 * step,
                    "random/return_stderr": 0.05,
                    "random/invalid_rate": 0.0,
                    "random/win_rate": 0.1 * step,
                    "random/draw_rate": 0.2,
                    "random/loss_rate": 0.8 - 0.1 * step,
                }
            )
        if step:
            rows.append(
                {
                    "step": step,
                    "stage": "train",
                    "reward_mean": 0.1 * step,
                    "reward/outcome": 0.1 * step,
                    "reward/invalid_action": 0.0,
                    "invalid_rate": 0.0,
                    "loss": None if step == 2 else 0.5 / step,
                    "kl": 0.0,
                    "clip_fraction": 0.0,
                    "entropy": 1.0,
                    "skipped_update": float(step == 2),
                    "completion_tokens_mean": 10.0 * step,
                    "step_time_s": float(
                        step
                    ),  # uneven: the wall-time axis differs from the step axis
                }
            )
    config = {"batch_size": 4, "eval_episodes": EVAL_EPISODES, "env_id": "textgym/TicTacToe-v0"}
    return _write(path, rows, config)


def sft_run(path: Path, steps: int = 40) -> Path:
    rows = [
        {
            "step": s,
            "stage": "train",
            "loss": 2.0 / s,
            "epoch": 0,
            "tokens": 100.0,
            "elapsed_s": 0.5 * s,
        }
        for s in range(1, steps + 1)
    ]
    return _write(path, rows, {"model": "tiny"})


@pytest.fixture
def both(tmp_path: Path) -> list:
    return [
        load_run(sft_run(tmp_path / ("sft-" + "x" * 60))),
        load_run(grpo_run(tmp_path / "grpo")),
    ]


def _titles(charts: list[dict]) -> dict[str, dict]:
    return {c["title"]: c for c in charts}


def _page_data(page: str) -> dict:
    return json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.DOTALL).group(1))


def test_a_colour_means_a_run_and_series_of_one_run_differ_by_dash(both):
    charts, _, _ = chart_specs(both)
    for chart in charts:
        for s in chart["series"]:
            assert s["color"] == RUN_COLORS[s["run"]]
        styles = [(s["run"], s["dash"]) for s in chart["series"]]
        assert len(set(styles)) == len(styles), chart["title"]
    wdl = _titles(charts)["Evaluation vs random: win / draw / loss — GRPO"]
    assert {s["color"] for s in wdl["series"]} == {RUN_COLORS[1]}  # not run 0's colour
    assert [s["dash"] for s in wdl["series"]] == [0, 1, 2]


def test_reward_mean_has_its_own_chart(both):
    charts = _titles(chart_specs(both[1:])[0])
    reward = charts["Reward (train, mean over the step's episodes)"]
    assert [s["label"] for s in reward["series"]] == ["reward_mean"]
    labels = [s["label"] for s in charts["Reward components (train)"]["series"]]
    assert labels == ["reward/outcome", "reward/invalid_action"]  # a zero series beside others


def test_sft_and_grpo_never_share_a_chart(both):
    charts, _, _ = chart_specs(both)
    for chart in charts:
        assert len({both[s["run"]].kind for s in chart["series"]}) == 1, chart["title"]
    by_title = _titles(charts)
    assert [s["run"] for s in by_title["Loss — SFT"]["series"]] == [0]
    assert [s["run"] for s in by_title["Loss — GRPO"]["series"]] == [1]
    assert by_title["Loss — SFT"]["kind"] == "sft" and by_title["Loss — GRPO"]["kind"] == "train"


def test_all_zero_charts_are_listed_not_drawn(both):
    charts, not_logged, all_zero = chart_specs(both[1:])
    titles = _titles(charts)
    assert "KL to the reference policy (train)" in all_zero
    assert "Clipped fraction (train)" in all_zero
    assert "Invalid-action rate" in all_zero
    assert not set(all_zero) & set(titles)
    assert "Evaluation return" in titles and not not_logged


def test_skipped_updates_are_counted_and_the_axis_is_steps(both, tmp_path):
    page, runs = build_report([Path(r.path) for r in both], max_episodes=0)
    data = _page_data(page)
    assert data["runs"][1]["skipped"] == [1, 6]
    assert data["runs"][0]["skipped"] is None  # an SFT run skips nothing
    assert "optimizer updates" not in page  # steps are not all updates
    loss = _titles(data["charts"])["Loss — GRPO"]["series"][0]["points"]
    assert [p[0] for p in loss] == [1, 3, 4, 5, 6]  # the skipped step logged no loss


def test_names_are_not_cut(both):
    page, _ = build_report([Path(r.path) for r in both], max_episodes=0)
    name = both[0].name
    assert len(name) > 40
    assert f'title="{name}">{name}</th>' in page  # the summary's column head, whole
    css = page[page.index("<style>") : page.index("</style>")]
    assert "th.run-name { white-space: normal" in css
    assert ".list td.run, .list td.task { white-space: normal" in css


def test_eval_points_carry_their_standard_error(both):
    charts = _titles(chart_specs(both[1:])[0])
    wins = charts["Evaluation vs random: win / draw / loss"]["series"][0]["points"]
    for _step, p, se in wins:
        assert se == pytest.approx(math.sqrt(p * (1 - p) / EVAL_EPISODES))
    returns = charts["Evaluation return"]["series"][0]["points"]
    assert [p[2] for p in returns] == [0.05, 0.05, 0.05]  # logged beside the mean
    reward = charts["Reward (train, mean over the step's episodes)"]["series"][0]["points"]
    assert all(p[2] is None for p in reward)  # no error bar where none is known


def test_x_axes_wall_time_and_tokens(both):
    grpo = step_axes(both[1])
    assert grpo["wall"][0] == 0.0 and grpo["wall"][3] == 6.0 and grpo["wall"][6] == 21.0
    assert grpo["tokens"][2] == pytest.approx(4 * (10 + 20))  # completion tokens x batch
    sft = step_axes(both[0])
    assert sft["wall"][40] == 20.0 and sft["tokens"][40] == 4000.0
    page, _ = build_report([Path(r.path) for r in both], max_episodes=0)
    data = _page_data(page)
    assert data["x_axes"] == ["step", "wall", "tokens"]
    assert dict(map(tuple, data["runs"][1]["axes"]["wall"]))[6] == 21.0
    assert 'id="smooth"' in page and 'id="x-axis"' in page


def test_per_task_pass_at_k(tmp_path):
    out = tmp_path / "tasks"
    argv = ["eval", "textgym/EmailToolUse-v1", "--policy", "random", "--limit", "3"]
    assert main([*argv, "--rollouts-per-task", "2", "--output-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())["tasks"]
    (table,) = task_tables([load_run(out)])
    assert table["k"] == 2 and len(table["rows"]) == 3
    mean = sum(r["pass@1"] for r in table["rows"]) / 3
    assert mean == pytest.approx(summary["pass@1"])
    assert sum(r["pass@k"] for r in table["rows"]) / 3 == pytest.approx(summary["pass@2"])
    page, _ = build_report([out], max_episodes=0)
    assert _page_data(page)["tasks"][0]["rows"][0]["task"] == "seed=0"


def test_deeply_nested_json_is_a_bad_line_not_a_crash(tmp_path):
    deep = "[" * (sys.getrecursionlimit() + 100) + "]" * (sys.getrecursionlimit() + 100)
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n' + deep + "\n" + '{"b": 2}\n')
    skipped = []
    rows = list(iter_jsonl(path, skip=lambda n, found: skipped.append((n, found))))
    assert rows == [(1, {"a": 1}), (3, {"b": 2})]
    assert skipped == [(2, "JSON nested too deeply to read")]
    with pytest.raises(ValueError, match="rows.jsonl:2: expected a JSON object"):
        list(iter_jsonl(path))
    call = {"function": {"name": "f", "arguments": '{"x": ' + deep + "}"}, "id": "1"}
    with pytest.raises(ValueError, match="without a name or arguments"):
        from_chat_messages([{"role": "assistant", "content": "", "tool_calls": [call]}])


def test_smoothing_and_x_axis_in_chromium(both, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out = tmp_path / "report.html"
    assert main(["report", *(r.path for r in both), "--output", str(out)]) == 0
    browser.get(out.resolve().as_uri())
    css = "#curves figure.chart[data-title='Reward (train, mean over the step\\'s episodes) — GRPO'] polyline"

    def line() -> str:
        return browser.find_element(By.CSS_SELECTOR, css).get_attribute("points")

    raw = line()
    slider = browser.find_element(By.ID, "smooth")
    browser.execute_script(
        "arguments[0].value = 0.9; arguments[0].dispatchEvent(new Event('input'))", slider
    )
    smoothed = line()
    assert smoothed != raw and len(smoothed.split()) == len(raw.split())
    Select(browser.find_element(By.ID, "x-axis")).select_by_value("wall")
    assert "wall time" in browser.find_element(By.ID, "x-note").text
    assert line() != smoothed
    bars = browser.find_elements(By.CSS_SELECTOR, "#curves line.bar")
    assert bars  # error bars on the evaluation points
    assert "skipped 1 of 6" in browser.find_element(By.ID, "skipped-note").text
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
