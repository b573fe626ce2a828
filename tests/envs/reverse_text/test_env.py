"""ReverseTextEnv: sources, filters, task selection, rewards and info, on project-written data."""

import json
import sys
import types

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401  (registers the ids)
from textgym.envs.reverse_text import ReverseTextEnv, load_passages
from textgym.envs.reverse_text.env import CORPUS_PATH
from textgym.envs.reverse_text.parsing import CLOSE_TAG, OPEN_TAG

TEXTS = ["Hello, world! This is a test.", "Short one.", "A man, a plan, a canal: Panama", "abba"]


def answer(text: str) -> str:
    return f"{OPEN_TAG}{text}{CLOSE_TAG}"


# -- the bundled corpus -------------------------------------------------------------------------
def test_bundled_corpus_is_large_varied_and_unique():
    env = ReverseTextEnv()
    texts = [p.text for p in env.passages]
    lengths = [len(t) for t in texts]
    assert len(texts) >= 200
    assert min(lengths) < 80 and max(lengths) > 450
    assert sum(len(t) < 120 for t in texts) >= 40 and sum(len(t) > 300 for t in texts) >= 20
    assert len(set(texts)) == len(texts)
    assert len({p.task_id for p in env.passages}) == len(texts)
    assert env.passages[0].task_id == "corpus-00000"
    assert all(t == t.strip() and "\n" not in t for t in texts)
    assert len(texts) == len(CORPUS_PATH.read_text(encoding="utf-8").strip().split("\n\n")) == 229
    assert load_passages() == env.passages


def test_gold_earns_full_reward_on_every_corpus_paragraph():
    env = ReverseTextEnv()
    for i, passage in enumerate(env.passages):
        obs, info = env.reset(options={"task_index": i})
        assert obs.endswith("\n\n" + passage.text)
        assert info["task_id"] == passage.task_id and info["n_chars"] == len(passage.text)
        _, reward, terminated, truncated, step_info = env.step(info["gold_completion"])
        assert step_info["reward_components"] == {"lcs": 1.0, "format": 0.1}
        assert reward == 1.1 and terminated and not truncated and step_info["exact"]
        env.reset(options={"task_index": i})
        *_, step_info = env.step(answer(passage.text))
        assert step_info["reward_components"]["lcs"] < 1.0 and not step_info["exact"]


# -- sources and filters ------------------------------------------------------------------------
def test_texts_source_ids_and_filters():
    env = ReverseTextEnv(texts=TEXTS, min_chars=5, max_chars=29)
    assert [p.task_id for p in env.passages] == ["text-00000", "text-00001"]
    with pytest.raises(ValueError, match="No text from texts"):
        ReverseTextEnv(texts=TEXTS, min_chars=100)
    with pytest.raises(ValueError, match="min_chars <= max_chars"):
        ReverseTextEnv(texts=TEXTS, min_chars=10, max_chars=5)
    with pytest.raises(ValueError, match="max_chars to be an int >= 1"):
        ReverseTextEnv(texts=TEXTS, max_chars=0)
    with pytest.raises(ValueError, match="list of strings"):
        ReverseTextEnv(texts="just one string")
    with pytest.raises(ValueError, match="expected a str text"):
        ReverseTextEnv(texts=["ok", 3])


def test_texts_are_stripped_and_empty_ones_dropped():
    env = ReverseTextEnv(texts=["  padded text \n", "   "])
    assert [p.text for p in env.passages] == ["padded text"]


def test_jsonl_source_with_and_without_ids(tmp_path):
    path = tmp_path / "paras.jsonl"
    rows = [
        {"id": "p-1", "text": "First paragraph here."},
        {"text": "Second one, no id."},
        {"id": 7, "body": "x", "text": "Third."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    env = ReverseTextEnv(data_path=str(path))
    assert [p.task_id for p in env.passages] == ["p-1", "paras-00001", "7"]
    with pytest.raises(ValueError, match="row 0: expected a 'body' field"):
        ReverseTextEnv(data_path=str(path), text_field="body")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"key": "k1", "body": "Custom fields work."}) + "\n")
    env = ReverseTextEnv(data_path=str(other), text_field="body", id_field="key")
    assert [(p.task_id, p.text) for p in env.passages] == [("k1", "Custom fields work.")]


def test_text_file_source_reads_paragraphs(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("First line\nwrapped here.\n\n\nSecond paragraph.\n")
    env = ReverseTextEnv(data_path=str(path))
    assert [(p.task_id, p.text) for p in env.passages] == [
        ("notes-00000", "First line wrapped here."),
        ("notes-00001", "Second paragraph."),
    ]


def test_source_errors(tmp_path):
    with pytest.raises(ValueError, match="at most one text source"):
        ReverseTextEnv(texts=TEXTS, data_path="x.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        ReverseTextEnv(data_path=str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n[1, 2]\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        ReverseTextEnv(data_path=str(bad))
    with pytest.raises(ValueError, match="format_weight"):
        ReverseTextEnv(format_weight=-0.1)
    with pytest.raises(ValueError, match="render_mode"):
        ReverseTextEnv(render_mode="rgb_array")


def test_hub_source_goes_through_datasets(monkeypatch):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"text": "From the hub."}, {"text": "Another hub row."}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = ReverseTextEnv(dataset="someone/paragraphs-test-a", dataset_split="validation")
    assert calls == [("someone/paragraphs-test-a", None, "validation")]
    assert [p.task_id for p in env.passages] == [
        "someone-paragraphs-test-a-validation-00000",
        "someone-paragraphs-test-a-validation-00001",
    ]


def test_hub_source_without_datasets_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r'pip install "textgym\[data\]"'):
        ReverseTextEnv(dataset="someone/paragraphs-test-b")


def test_file_cache_notices_changes(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("One paragraph.\n")
    assert len(ReverseTextEnv(data_path=str(path)).passages) == 1
    path.write_text("One paragraph.\n\nAnd a second, longer one.\n")
    assert len(ReverseTextEnv(data_path=str(path)).passages) == 2


# -- episodes -----------------------------------------------------------------------------------
def test_reset_selects_by_seed_index_or_id():
    env = ReverseTextEnv(texts=TEXTS)
    first = [env.reset(seed=s)[1]["task_id"] for s in range(30)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(30)]
    assert first == again and len(set(first)) == len(TEXTS)
    assert env.reset(options={"task_index": 2})[1]["task_id"] == "text-00002"
    assert env.reset(options={"task_id": "text-00001"})[0].endswith("Short one.")
    for options, message in [
        ({"task_index": 4}, r"in \[0, 3\] \(4 tasks\)"),
        ({"task_index": True}, "task_index"),
        ({"task_id": "nope"}, "Unknown options\\['task_id'\\]"),
        ({"task_index": 0, "task_id": "text-00000"}, "not both"),
        ({"colour": "red"}, "Unknown reset options"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.reset(options=options)


@pytest.mark.parametrize(
    ("completion", "lcs", "fmt", "invalid", "exact"),
    [
        (answer(".enO"), 1.0, 0.1, False, True),
        (f"Here you go:\n{answer('.enO')}\n", 1.0, 0.1, False, True),
        (answer(" .enO\n"), 1.0, 0.1, False, True),
        (answer("One."), 0.25, 0.1, False, False),
        (answer(".en"), 0.75, 0.1, False, False),
        (answer("x") + answer(".enO"), 1.0, 0.0, False, True),
        (answer(""), 0.0, 0.1, False, False),
        (".enO", 0.0, 0.0, True, False),
        ("", 0.0, 0.0, True, False),
    ],
)
def test_step_rewards_and_info(completion, lcs, fmt, invalid, exact):
    env = ReverseTextEnv(texts=["One."])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(completion)
    assert info["reward_components"] == {"lcs": pytest.approx(lcs), "format": fmt}
    assert reward == pytest.approx(lcs + fmt) and type(reward) is float
    assert terminated is True and truncated is False
    assert info["invalid_action"] is invalid and info["exact"] is exact
    assert info["invalid_reason"] == ("no_answer_tag" if invalid else None)
    assert info["well_formed"] is (fmt > 0)
    assert isinstance(obs, str) and env.observation_space.contains(obs)


def test_format_weight_and_palindrome():
    env = ReverseTextEnv(texts=["abba"], format_weight=0.0)
    env.reset(seed=0)
    _, reward, *_, info = env.step(answer("abba"))
    assert reward == 1.0 and info["reward_components"] == {"lcs": 1.0, "format": 0.0}


def test_step_errors_and_single_turn():
    env = ReverseTextEnv(texts=["abc"])
    with pytest.raises(RuntimeError, match="reset"):
        env.step(answer("cba"))
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(3)
    assert env.step("nothing")[1] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step(answer("cba"))
    env.reset(seed=0)
    assert env.step(answer("cba"))[1] == pytest.approx(1.1)


def test_registered_env_and_render():
    env = gym.make("textgym/ReverseText-v0", max_chars=100, render_mode="ansi")
    assert env.spec.max_episode_steps is None  # single turn: it always terminates at step 1
    obs, info = env.reset(seed=1)
    assert info["n_chars"] <= 100 and env.render() == obs
    assert info["system_prompt"] and info["tools"] == []
    assert type(env.unwrapped).is_well_formed(info["gold_completion"])


# -- properties ---------------------------------------------------------------------------------
ENV = ReverseTextEnv()
WEIGHT = ENV.format_weight


def completions():
    tagged = st.builds(
        lambda a, b, c: f"{a}{OPEN_TAG}{b}{CLOSE_TAG}{c}", st.text(), st.text(), st.text()
    )
    return st.one_of(st.text(), tagged)


@given(st.integers(0, 2**32 - 1), completions())
def test_step_accepts_any_text(seed, completion):
    ENV.reset(seed=seed)
    obs, reward, terminated, truncated, info = ENV.step(completion)
    assert type(reward) is float and 0.0 <= reward <= 1.0 + WEIGHT
    assert 0.0 <= info["reward_components"]["lcs"] <= 1.0
    assert sum(info["reward_components"].values()) == reward
    assert terminated is True and truncated is False and ENV.observation_space.contains(obs)


def test_min_chars_must_be_an_int():
    with pytest.raises(ValueError, match="min_chars to be an int >= 1, got None"):
        ReverseTextEnv(texts=TEXTS, min_chars=None)
