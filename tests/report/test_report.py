"""``textgym report``: reading runs, the page's data, and the page in a real headless Chromium.

Runs are made by the CLI itself with scripted policies (``textgym eval``/``collect``), and a
training run's ``metrics.jsonl`` by :class:`~textgym.algos.metrics.MetricsLogger` (a real
``textgym train`` takes ~30 s on two cores, all of it in the model, none in what is tested
here). The browser test skips, with its reason, where Chromium and its driver cannot be
started (``apt-get install chromium chromium-driver`` and ``pip install "textgym[report]"``).
"""

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.report import build_report, load_run
from textgym.report.curves import chart_specs
from textgym.report.page import script_json, summary_rows
from textgym.report.runs import episode_outcome
from textgym.report.segments import MAX_TEXT_CHARS, message_segments, parse_boards

TTT = "textgym/TicTacToe-v0"
MARKUP_NAME = "<em onclick=x>run&amp;"  # a run directory named with markup
HOSTILE = '</script><img src=x onerror="window.pwned=1"><!-- & \u2028 \ud800 <b>bold</b>'


def _eval(tmp_path: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    assert main(["eval", *args, "--output-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """An eval run of each kind of policy, a collect file of a tool env and a train run."""
    tmp = tmp_path_factory.mktemp("runs")
    random = _eval(tmp, "random", TTT, "--policy", "random", "--episodes", "12")
    minimax = _eval(tmp, "minimax", TTT, "--policy", "minimax", "--episodes", "6")
    collect = tmp / "email.jsonl"
    assert (
        main(["collect", "textgym/EmailToolUse-v1", "--policy", "gold", "--episodes", "3",
              "--output", str(collect)])
        == 0
    )  # fmt: skip
    return {"random": random, "minimax": minimax, "collect": collect, "train": _train_run(tmp)}


def _train_run(tmp: Path) -> Path:
    """A train run's metrics.jsonl as the GRPO trainer logs it (keys of algos/grpo.py)."""
    from textgym.algos.metrics import MetricsLogger

    out = tmp / "train"
    with MetricsLogger(out, tensorboard=False) as logger:
        for step in range(0, 7):
            if step % 3 == 0:
                logger.log(
                    step,
                    {
                        "random/return_mean": 0.3 + 0.05 * step,
                        "random/invalid_rate": 0.2 - 0.02 * step,
                        "random/win_rate": 0.3 + 0.05 * step,
                        "random/draw_rate": 0.1,
                        "random/loss_rate": 0.6 - 0.05 * step,
                    },
                    stage="eval",
                )
            if step:
                logger.log(
                    step,
                    {
                        "reward_mean": 0.1 * step,
                        "reward/outcome": 0.1 * step + 0.05,
                        "reward/invalid_action": -0.05,
                        "invalid_rate": 0.5 / step,
                        "loss": 0.2 / step,
                        "kl": float("nan"),  # beta 0: never computed
                        "entropy": 1.0 - 0.1 * step,
                        "skipped_update": float(step == 2),
                    },
                )
    return out


# --- what the page draws of a message ----------------------------------------------------------

EMPTY_BOARD = " 0 | 1 | 2\n---+---+---\n 3 | 4 | 5\n---+---+---\n 6 | 7 | 8"


@pytest.mark.parametrize(
    ("text", "boards"),
    [
        (EMPTY_BOARD, [[""] * 9]),
        (
            "You played 0.\n\n X | O | 2\n---+---+---\n 3 | X | 5\n---+---+---\n 6 | 7 | O\n\nnext",
            [["X", "O", "", "", "X", "", "", "", "O"]],
        ),
        (
            EMPTY_BOARD + "\n\n" + EMPTY_BOARD.replace("4", "X"),
            [[""] * 9, [""] * 4 + ["X"] + [""] * 4],
        ),
        (" X | O\n---+---\n 3 | X", []),  # not 3x3
        (" X | O | Z\n---+---+---\n 3 | X | 5\n---+---+---\n 6 | 7 | O", []),  # Z is no mark
        ("no board here", []),
        ("opp 8\n012\n345\n67X\nfree 0 1 2 3 4 5 6 7", [[""] * 8 + ["X"]]),  # compact style
        ("call 123\n456\n789", []),  # digits out of place: not a board
        (" 1 | 0 | 2\n---+---+---\n 3 | 4 | 5\n---+---+---\n 6 | 7 | 8", []),
    ],
)
def test_parse_boards(text, boards):
    assert parse_boards(text) == boards


def test_segments_of_a_tool_reply_and_its_responses():
    reply = (
        "<think>Find Paz first.</think>\nI will look.\n"
        '<tool_call>{"name": "find", "arguments": {"name": "Paz", "n": [1, 2]}}</tool_call>\n'
        "<tool_call>{not json</tool_call>"
    )
    segments = message_segments(reply)
    assert [s["t"] for s in segments] == ["think", "text", "call", "call"]
    assert segments[0]["v"] == "Find Paz first."
    assert segments[2]["name"] == "find" and segments[2]["ok"] is True
    assert json.loads(segments[2]["v"]) == {"name": "Paz", "n": [1, 2]}
    assert "\n  " in segments[2]["v"]  # indented
    assert segments[3] == {"t": "call", "name": "", "v": "{not json", "ok": False}
    responses = message_segments(
        '<tool_response>\n{"ids": ["a", "b"]}\n</tool_response>\n'
        "<tool_response>\nEmail sent.\n</tool_response>",
        "user",
    )
    assert [s["t"] for s in responses] == ["result", "result"]
    assert json.loads(responses[0]["v"]) == {"ids": ["a", "b"]} and "\n" in responses[0]["v"]
    assert responses[1]["v"] == "Email sent."


def test_each_speaker_has_its_own_tags():
    # The env's words "<think>" (tic-tac-toe's invalid-move message) are text, and its board
    # is still drawn; the model's "<tool_response>" is text; a system prompt's tags are examples.
    invalid = (
        "Invalid move: no <move>N</move> tag was found (moves inside <think> do not count). "
        "The board is unchanged.\n\n" + EMPTY_BOARD + "\n\nYour turn (X)."
    )
    assert [s["t"] for s in message_segments(invalid, "user")] == ["text", "board", "text"]
    assert "<think> do not count" in message_segments(invalid, "user")[0]["v"]
    assert [s["t"] for s in message_segments("<tool_response>\nok\n</tool_response>")] == ["text"]
    system = "Example: <think>The centre is free.</think><move>4</move>\n\n" + EMPTY_BOARD
    assert [s["t"] for s in message_segments(system, "system")] == ["text", "board"]
    assert [s["t"] for s in message_segments(system, "assistant")] == [
        "text",
        "think",
        "text",
        "board",
    ]


def test_segments_of_a_cut_completion_and_a_long_text():
    # A completion cut at the token limit leaves its <think> open: the rest is the thought.
    assert message_segments("<think>I should play 4 because") == [
        {"t": "think", "v": "I should play 4 because"}
    ]
    long = message_segments("y" * (MAX_TEXT_CHARS + 10))[0]["v"]
    assert long.startswith("y" * MAX_TEXT_CHARS) and "10 more characters cut" in long
    obs = message_segments("You played 4.\n\n" + EMPTY_BOARD + "\n\nYour turn.", "user")
    assert [s["t"] for s in obs] == ["text", "board", "text"]
    assert message_segments("pin\n120\n345\n678\nok") == [
        {"t": "text", "v": "pin\n120\n345\n678\nok"}  # not a board: one text, as written
    ]


@pytest.mark.parametrize(
    ("outcome", "truncated", "terminated", "totals", "expected"),
    [
        ("win", False, True, {"outcome": 1.0}, "win"),
        (None, True, False, {"outcome": 0.0}, "time limit"),
        (None, False, True, {"correct": 1.0, "format": 0.1}, "success"),
        (None, False, True, {"lcs": 0.93}, "failure"),
        (None, False, True, {"format": 0.1}, "unknown"),
    ],
)
def test_episode_outcome(outcome, truncated, terminated, totals, expected):
    assert episode_outcome(outcome, truncated, terminated, totals) == expected


def test_script_json_cannot_end_its_element_and_reads_back_the_same():
    value = {"text": HOSTILE, "x": [1.5, float("nan"), float("inf")]}
    text = script_json(value)
    assert not set("<>&") & set(text) and "\u2028" not in text
    assert json.loads(text) == {"text": HOSTILE, "x": [1.5, None, None]}


# --- reading runs ------------------------------------------------------------------------------


def test_an_eval_run_reads_as_eval_wrote_it(runs):
    run = load_run(runs["random"])
    summary = json.loads((runs["random"] / "summary.json").read_text())
    assert run.kind == "eval" and run.summary == summary and not run.notes
    assert run.episodes_total == len(run.episodes) == 12
    first = run.episodes[0]
    record = json.loads((runs["random"] / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["return"] == record["return"] and first["outcome"] == record["outcome"]
    assert len(first["step_info"]) == first["steps"] == len(record["rewards"])
    assert [s["components"] for s in first["step_info"]] == record["reward_components"]
    assistant = [m for m in first["messages"] if m["role"] == "assistant"]
    assert len(assistant) == first["steps"]
    boards = [s for m in first["messages"] for s in m["segments"] if s["t"] == "board"]
    assert len(boards) >= first["steps"]  # every observation draws the board


def test_the_summary_is_computed_from_the_episodes_when_summary_json_is_missing(runs, tmp_path):
    copy = tmp_path / "interrupted"
    shutil.copytree(runs["random"], copy)
    (copy / "summary.json").unlink()
    run = load_run(copy)
    written = json.loads((runs["random"] / "summary.json").read_text())
    for key in ("episodes", "mean_return", "outcomes", "invalid_action_rate", "truncated_rate"):
        assert run.summary[key] == pytest.approx(written[key]), key
    assert any("summary.json is missing" in note for note in run.notes)


def test_broken_lines_become_notes_and_the_rest_is_read(runs, tmp_path):
    copy = tmp_path / "broken"
    shutil.copytree(runs["minimax"], copy)
    lines = (copy / "trajectories.jsonl").read_text().splitlines()
    lines[2] = lines[2][:50]  # cut mid-write
    lines.insert(4, "[1, 2]")
    lines.insert(5, '{"rewards": "many"}')
    (copy / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(copy)
    assert len(run.episodes) == 5  # 6 written, one cut
    assert len(run.notes) == 3
    assert run.notes[0].startswith(
        "trajectories.jsonl line 3: expected a JSON object, got invalid JSON"
    )
    assert "line 5: expected a JSON object, got list" in run.notes[1]
    assert "line 6: not a trajectory record" in run.notes[2]


def test_a_collect_file_of_a_tool_env(runs):
    run = load_run(runs["collect"])
    assert run.kind == "collect" and run.episodes_total == 3 and not run.notes
    episode = run.episodes[0]
    calls = [s for m in episode["messages"] for s in m["segments"] if s["t"] == "call"]
    assert calls and all(c["ok"] and c["name"].startswith(("email_", "company_")) for c in calls)
    assert isinstance(json.loads(calls[0]["v"]), dict)
    assert any(m["role"] == "tool" for m in episode["messages"])
    assert episode["step_info"] is None and episode["outcome"] == "success"
    assert episode["tools"] >= 0  # the tools the env offered, stored once
    assert run.summary["mean_return"] == pytest.approx(1.0)


def test_a_collect_run_directory_reads_as_its_records(tmp_path):
    out = tmp_path / "games"
    argv = ["collect", "textgym/TicTacToe-v0", "--policy", "minimax", "--episodes", "3"]
    assert main([*argv, "--no-progress", "--output-dir", str(out)]) == 0
    run = load_run(out)
    assert run.kind == "collect" and run.name == "games" and run.episodes_total == 3
    assert not run.notes and run.summary["mean_return"] > 0


def test_a_train_run_gives_curves_and_its_final_evaluation(runs):
    run = load_run(runs["train"])
    assert run.kind == "train" and len(run.metrics) == 9
    charts, not_logged, _ = chart_specs([run])
    by_title = {c["title"]: c for c in charts}
    reward = by_title["Reward (train, mean over the step's episodes)"]
    components = by_title["Reward components (train)"]
    assert [s["label"] for s in reward["series"]] == ["reward_mean"]
    assert [s["label"] for s in components["series"]] == ["reward/outcome", "reward/invalid_action"]
    assert reward["series"][0]["points"] == [[s, pytest.approx(0.1 * s), None] for s in range(1, 7)]
    wdl = by_title["Evaluation vs random: win / draw / loss"]
    assert [s["label"] for s in wdl["series"]] == ["win", "draw", "loss"]
    assert [p[0] for p in wdl["series"][0]["points"]] == [0, 3, 6]
    assert "KL to the reference policy (train)" in not_logged  # all NaN
    rows = dict(summary_rows([run]))
    assert rows["training steps"] == ["6"]
    assert rows["updates skipped (equal rewards in every group)"] == ["1 of 6"]
    assert rows["eval vs random: win / draw / loss"] == ["60.0% / 10.0% / 30.0%"]


def test_runs_side_by_side(runs, tmp_path):
    page, read = build_report([runs["random"], runs["minimax"], runs["train"]], max_episodes=4)
    assert [r.name for r in read] == ["random", "minimax", "train"]
    rows = dict(summary_rows(read))
    assert rows["kind"] == ["eval", "eval", "train"]
    assert rows["win / draw / loss"][1] == "0.0% / 100.0% / 0.0%"  # minimax always draws
    assert rows["win / draw / loss"][2] == "–"
    assert [len(r.episodes) for r in read] == [4, 4, 0]
    assert [r.episodes_total for r in read] == [12, 6, 0]
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.DOTALL).group(1))
    assert len(data["episodes"]) == 8 and {e["run"] for e in data["episodes"]} == {0, 1}
    prompts = {
        json.loads(line)["messages"][0]["content"]
        for run in ("random", "minimax")
        for line in (runs[run] / "trajectories.jsonl").read_text().splitlines()[:4]
    }
    assert len(data["shared"]) == len(prompts) < 8  # each system prompt once, not per episode
    # Two runs of the same name get their parents' names.
    other = tmp_path / "b" / "random"
    shutil.copytree(runs["random"], other)
    _, read = build_report([runs["random"], other], max_episodes=0)
    assert len({r.name for r in read}) == 2


def test_hostile_model_text_is_data_not_markup(runs, tmp_path):
    copy = _hostile_copy(runs["minimax"], tmp_path)
    page, _ = build_report([copy])
    assert "onerror" not in page.split('id="report-data">')[0]
    data_text = page.split('id="report-data">')[1].split("</script>")[0]
    assert "<" not in data_text and HOSTILE not in page
    shown = json.loads(data_text)["episodes"][0]["messages"][1]["segments"][0]["v"]
    assert shown.startswith(HOSTILE.replace("\ud800", "\ufffd"))  # lone surrogates: not text
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page
    assert "default-src 'none'" in page  # nothing may be fetched
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page)


def _hostile_copy(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of an eval run whose first episode's first reply is ``HOSTILE``, and whose name
    (the page's title and a column header) is markup too."""
    copy = tmp_path / MARKUP_NAME
    shutil.copytree(run_dir, copy)
    lines = (copy / "trajectories.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    index = next(i for i, m in enumerate(record["messages"]) if m["role"] == "assistant")
    record["messages"][index]["content"] = HOSTILE + "<move>0</move>"
    lines[0] = json.dumps(record)
    (copy / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    return copy


# --- the command -------------------------------------------------------------------------------


def test_cli_writes_the_page(runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    argv = ["report", str(runs["random"]), str(runs["train"]), "--output", str(out)]
    assert main([*argv, "--max-episodes", "5"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out} (2 runs; 5 episodes of 12 (--max-episodes 5 per run)")
    page = out.read_text()
    assert '"episodes_total":12' in page and '"episodes_shown":5' in page
    assert html.escape("mean return ± stderr") in page


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: tmp / "missing", "does not exist; expected a run directory or a collect file"),
        (lambda tmp: tmp, "is not a textgym run: expected summary.json or trajectories.jsonl"),
    ],
    ids=["missing", "not-a-run"],
)
def test_cli_bad_run_is_one_line(tmp_path, capsys, make, expected):
    with pytest.raises(SystemExit) as exc:
        main(["report", str(make(tmp_path)), "--output", str(tmp_path / "r.html")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("textgym: error: ") and expected in err
    assert not (tmp_path / "r.html").exists()


def test_cli_broken_lines_are_noted_in_the_page(runs, tmp_path, capsys):
    copy = tmp_path / "cut"
    shutil.copytree(runs["minimax"], copy)
    with open(copy / "trajectories.jsonl", "a") as fh:
        fh.write('{"env_id": "textgym/Tic')  # a crash mid-write
    out = tmp_path / "r.html"
    assert main(["report", str(copy), "--output", str(out)]) == 0
    assert "1 note on unreadable input, shown in the page" in capsys.readouterr().out
    assert "trajectories.jsonl line 7: expected a JSON object, got invalid JSON" in out.read_text()


# --- the page in a browser ---------------------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--window-size=1400,1000",
]


@pytest.fixture
def browser():
    """A headless Chromium driven by chromedriver (Debian's packages), or a skip saying why."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason='needs selenium: pip install "textgym[report]"'
    )
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("needs Chromium and its driver: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except WebDriverException as exc:
        pytest.skip(f"Chromium could not be started: {' '.join(str(exc).split())[:300]}")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_in_chromium(runs, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    hostile = _hostile_copy(runs["minimax"], tmp_path)
    out = tmp_path / "report.html"
    argv = [str(runs["random"]), str(hostile), str(runs["collect"]), str(runs["train"])]
    assert main(["report", *argv, "--output", str(out)]) == 0
    browser.get(out.resolve().as_uri())
    by_id = browser.find_element

    def listed() -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, "#episode-list tr.ep"))

    # Curves: one chart per logged panel, each with its lines.
    charts = browser.find_elements(By.CSS_SELECTOR, "#curves figure.chart")
    assert len(charts) >= 5
    assert all(c.find_elements(By.TAG_NAME, "polyline") for c in charts)
    # The summary: a column per run, the markup in a run's name shown as text.
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.summary thead th")]
    assert headers == ["statistic", "random", MARKUP_NAME, "email.jsonl", "train"]
    # Filters change what is listed.
    total = 12 + 6 + 3
    assert listed() == total and by_id(By.ID, "f-count").text == f"{total} of {total} episodes"
    Select(by_id(By.ID, "f-outcome")).select_by_value("draw")
    draws = listed()
    assert 6 <= draws < total  # minimax draws all 6; random some
    by_id(By.ID, "f-min").send_keys("0.9")  # draws earn 0.5
    assert listed() == 0 and by_id(By.ID, "f-count").text == f"0 of {total} episodes"
    by_id(By.ID, "f-reset").click()
    assert listed() == total
    Select(by_id(By.ID, "f-run")).select_by_visible_text(MARKUP_NAME)
    assert listed() == 6
    # An episode opens: its conversation, its boards drawn as 3x3 grids, its steps' rewards.
    browser.find_elements(By.CSS_SELECTOR, "#episode-list tr.ep")[0].click()
    view = by_id(By.ID, "episode-view")
    boards = view.find_elements(By.CSS_SELECTOR, ".board")
    assert boards and all(len(b.find_elements(By.TAG_NAME, "span")) == 9 for b in boards)
    last = [s.text for s in boards[-1].find_elements(By.TAG_NAME, "span")]
    assert last.count("X") >= 3 and last.count("O") >= 3
    assert "step 1" in view.find_elements(By.CSS_SELECTOR, ".step")[0].text
    # The hostile reply is shown as text; none of its markup became elements or ran.
    before, after = HOSTILE.replace("\ud800", "\ufffd").split("\u2028")
    assert before.strip() in view.text and after.strip() in view.text
    assert not view.find_elements(By.TAG_NAME, "img")
    assert browser.execute_script("return window.pwned") is None
    # A tool episode: its calls as indented JSON.
    Select(by_id(By.ID, "f-run")).select_by_visible_text("email.jsonl")
    browser.find_elements(By.CSS_SELECTOR, "#episode-list tr.ep")[0].click()
    call = view.find_element(By.CSS_SELECTOR, ".call pre").text
    assert call.startswith("{\n  ") and isinstance(json.loads(call), dict)
    browser.find_elements(By.CSS_SELECTOR, "#episode-list tr.ep")[0].click()
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
