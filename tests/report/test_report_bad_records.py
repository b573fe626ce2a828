"""``textgym report`` on bad records: each becomes a note on its line, never a crash.

Model output such as a ``<tool_call>`` followed by 100,000 ``[`` made the report raise
``RecursionError`` (Python's JSON parser recurses once per level), and one NaN or infinite
reward in ``trajectories.jsonl`` refused the whole report; both are data the report shows.
"""

import json
import shutil
from pathlib import Path

import pytest

from textgym.cli import main
from textgym.report import load_run
from textgym.report.segments import MAX_TEXT_CHARS, message_segments, pretty_json

TTT = "textgym/TicTacToe-v0"
DEEP = "[" * 100_000


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "clean"
    argv = ["eval", TTT, "--policy", "random", "--episodes", "4", "--no-progress"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    return out


@pytest.fixture
def bad_run(clean_run, tmp_path) -> Path:
    """The clean run with a 100,000-``[`` tool call in its second episode (as text and as a
    structured call's arguments) and a NaN step reward and an infinite return in its third."""
    run = tmp_path / "bad"
    shutil.copytree(clean_run, run)
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    deep = json.loads(lines[1])
    assistant = next(m for m in deep["messages"] if m["role"] == "assistant")
    assistant["content"] = "<tool_call>" + DEEP
    assistant["tool_calls"] = [{"function": {"name": "move", "arguments": DEEP}}]
    lines[1] = json.dumps(deep)
    nan = json.loads(lines[2])
    nan["rewards"][-1] = float("nan")
    nan["reward_components"][-1] = {"outcome": float("nan")}
    nan["return"] = float("inf")
    lines[2] = json.dumps(nan)  # NaN and Infinity, as Python's json writes them
    (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_a_deeply_nested_tool_call_is_raw_text():
    for role in ("assistant", "user"):
        segments = message_segments("<tool_call>" + DEEP, role)
        assert segments  # no RecursionError
    (call,) = message_segments("<tool_call>" + DEEP, "assistant")
    assert call["t"] == "call" and call["ok"] is False and call["name"] == ""
    assert call["v"].startswith("[" * 100) and len(call["v"]) < MAX_TEXT_CHARS + 100
    (result,) = message_segments("<tool_response>" + DEEP, "tool")
    assert result["t"] == "result" and result["v"].startswith("[[[")
    assert pretty_json(DEEP) == (DEEP, False)


def test_bad_records_become_notes_and_the_rest_is_read(bad_run, clean_run):
    run = load_run(bad_run)
    assert run.episodes_total == len(run.episodes) == 4
    assert run.summary == json.loads((clean_run / "summary.json").read_text())
    (note,) = run.notes
    assert note.startswith("trajectories.jsonl line 3: Episode return")
    assert "not a finite number" in note and note.endswith("left out of the summary")
    shown = run.episodes[2]
    assert shown["return"] is None and shown["step_info"][-1]["reward"] is None
    calls = [s for m in run.episodes[1]["messages"] for s in m["segments"] if s["t"] == "call"]
    assert len(calls) == 2 and all(c["v"].startswith("[[[") for c in calls)


def test_the_summary_computed_from_the_episodes_leaves_the_bad_one_out(bad_run):
    (bad_run / "summary.json").unlink()
    run = load_run(bad_run)
    assert run.summary["episodes"] == 3 and len(run.episodes) == 4
    assert any("line 3:" in note and "not a finite number" in note for note in run.notes)


def test_nested_lines_and_summaries_become_notes(bad_run):
    with open(bad_run / "trajectories.jsonl", "a") as fh:
        fh.write('{"messages": ' + DEEP + "\n")
    (bad_run / "summary.json").write_text(DEEP)
    run = load_run(bad_run)
    assert "line 5: expected a JSON object, got JSON nested too deeply to read" in "\n".join(
        run.notes
    )
    assert any(note.startswith("summary.json: could not be read") for note in run.notes)
    assert run.summary["episodes"] == 3  # computed from the readable, finite episodes


def test_a_collect_record_with_a_nan_return_is_noted(tmp_path):
    path = tmp_path / "sft.jsonl"
    chat = [{"role": "user", "content": "<tool_call>" + DEEP}]
    rows = [
        {"messages": chat, "return": 1.0, "tools": DEEP},
        {"messages": chat, "return": float("nan")},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = load_run(path)
    assert run.episodes_total == 1 and len(run.episodes) == 1
    assert run.notes == ["sft.jsonl line 2: its return nan is not a finite number; skipped"]


def test_cli_renders_the_page_with_the_notes(bad_run, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(bad_run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out} (1 run; 4 episodes; 1 note on unreadable input")
    page = out.read_text()
    assert "trajectories.jsonl line 3: Episode return" in page
    data = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "NaN" not in data and "Infinity" not in data  # JSON.parse reads it
    json.loads(data)
