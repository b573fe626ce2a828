"""GSM8KEnv: data sources, task selection, rewards and info, on project-written problems."""

import json
import sys
import types

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import textgym  # noqa: F401  (registers the ids)
from textgym.envs.gsm8k import GSM8KEnv
from textgym.envs.gsm8k.env import PATH_ENV_VAR, SAMPLE_PATH

# Problems written for these tests, in GSM8K's original format.
ROWS = [
    {
        "question": "Ada has 3 boxes of 4 pens. How many pens does she have?",
        "answer": "She has 3 * 4 = <<3*4=12>>12 pens.\n#### 12",
    },
    {
        "question": "A hall seats 1,200 people and 350 more stand. How many people fit?",
        "answer": "1200 + 350 = <<1200+350=1550>>1550 people fit.\n#### 1,550",
    },
    {
        "question": "It is 2 degrees and the temperature drops by 9. What is it now?",
        "answer": "2 - 9 = <<2-9=-7>>-7 degrees.\n#### -7",
    },
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def data_dir(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "test.jsonl", ROWS)
    return tmp_path


# -- sources ------------------------------------------------------------------------------------
def test_default_is_the_bundled_sample_and_gold_is_correct_on_all_of_it():
    env = GSM8KEnv()
    rows = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines()]
    assert len(env.problems) == len(rows) == 18
    for i, row in enumerate(rows):
        obs, info = env.reset(options={"task_index": i})
        assert obs == row["question"] and info["task_id"] == f"gsm8k-sample-{i:05d}"
        assert info["gold_completion"] == row["answer"]
        _, reward, terminated, truncated, step_info = env.step(info["gold_completion"])
        assert step_info["reward_components"] == {"correct": 1.0, "format": 0.1}, row
        assert reward == 1.1 and terminated and not truncated and step_info["correct"]
        assert step_info["answer"] == step_info["gold_answer"] == info["gold_answer"]


def test_local_file_and_folder(data_dir):
    env = GSM8KEnv(split="test", data_path=str(data_dir / "test.jsonl"))
    assert [p.task_id for p in env.problems] == [
        "gsm8k-test-00000",
        "gsm8k-test-00001",
        "gsm8k-test-00002",
    ]
    assert [p.answer for p in env.problems] == [12, 1550, -7]
    env = GSM8KEnv(split="train", data_path=str(data_dir))
    assert [p.task_id for p in env.problems] == ["gsm8k-train-00000", "gsm8k-train-00001"]


def test_env_var_names_the_local_copy_of_the_real_dataset(data_dir, monkeypatch):
    monkeypatch.setenv(PATH_ENV_VAR, str(data_dir))
    assert len(GSM8KEnv(dataset="openai/gsm8k", split="train").problems) == 2
    assert len(GSM8KEnv().problems) == 18  # the sample set ignores it


def test_hub_dataset_goes_through_datasets(monkeypatch):
    monkeypatch.delenv(PATH_ENV_VAR, raising=False)
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return ROWS

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = GSM8KEnv(dataset="someone/gsm8k-copy-a", split="train")
    assert calls == [("someone/gsm8k-copy-a", "main", "train")]
    assert env.problems[2].task_id == "gsm8k-train-00002" and env.problems[2].answer == -7


def test_hub_dataset_without_datasets_says_how_to_install(monkeypatch):
    monkeypatch.delenv(PATH_ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r'pip install "textgym\[data\]"'):
        GSM8KEnv(dataset="someone/gsm8k-copy-b")


def test_bad_arguments_and_rows(tmp_path):
    with pytest.raises(ValueError, match="split in"):
        GSM8KEnv(split="validation")
    with pytest.raises(ValueError, match="format_weight"):
        GSM8KEnv(format_weight=float("nan"))
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        GSM8KEnv(data_path=str(tmp_path / "nowhere.jsonl"))
    bad = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], {"question": "Q?", "answer": "no marker"}])
    with pytest.raises(ValueError, match=r"row 1: expected the 'answer' field to end in '#### N'"):
        GSM8KEnv(data_path=str(bad))
    bad = write_jsonl(tmp_path / "bad2.jsonl", [{"problem": "Q?", "solution": "#### 1"}])
    with pytest.raises(ValueError, match="row 0: expected string fields"):
        GSM8KEnv(data_path=str(bad))
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(ValueError, match="holds no problems"):
        GSM8KEnv(data_path=str(empty))


# -- episodes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("completion", "correct", "fmt", "answer", "reason"),
    [
        ("3 * 4 = 12\n#### 12", 1.0, 0.1, "12", None),
        ("#### 12.0", 1.0, 0.1, "12", None),
        ("The total is \\boxed{12}.", 1.0, 0.1, "12", None),
        ("#### $12 pens.", 1.0, 0.1, "12", None),
        ("#### 13", 0.0, 0.1, "13", None),
        ("#### 12\nno wait\n#### 13", 0.0, 0.1, "13", None),
        ("#### twelve", 0.0, 0.0, None, "not_a_number"),
        ("#### 12 or 13", 0.0, 0.0, None, "not_a_number"),
        ("I think it is 12.", 0.0, 0.0, None, "no_final_answer"),
        ("", 0.0, 0.0, None, "no_final_answer"),
    ],
)
def test_step_rewards_and_info(data_dir, completion, correct, fmt, answer, reason):
    env = GSM8KEnv(data_path=str(data_dir / "test.jsonl"))
    _, info = env.reset(options={"task_index": 0})
    assert info["gold_answer"] == "12"
    obs, reward, terminated, truncated, info = env.step(completion)
    assert info["reward_components"] == {"correct": correct, "format": fmt}
    assert reward == correct + fmt and type(reward) is float
    assert terminated is True and truncated is False
    assert info["correct"] is (correct == 1.0) and info["answer"] == answer
    assert info["invalid_action"] is (reason is not None) and info["invalid_reason"] == reason
    assert "12" in obs and env.observation_space.contains(obs)


def test_negative_and_comma_answers(data_dir):
    env = GSM8KEnv(data_path=str(data_dir / "test.jsonl"))
    for index, good, bad in [
        (1, "#### 1,550", "#### 1,551"),
        (1, "\\boxed{1550}", "#### 155"),
        (2, "#### -7", "#### 7"),
        (2, "It is −7 degrees: \\boxed{-7}", "#### -7.5"),
    ]:
        env.reset(options={"task_index": index})
        assert env.step(good)[4]["correct"] is True
        env.reset(options={"task_index": index})
        assert env.step(bad)[4]["correct"] is False


def test_reset_selects_by_seed_index_or_id(data_dir):
    env = GSM8KEnv(data_path=str(data_dir / "test.jsonl"))
    first = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert first == [env.reset(seed=s)[1]["task_id"] for s in range(20)] and len(set(first)) == 3
    assert env.reset(options={"task_id": "gsm8k-test-00002"})[0] == ROWS[2]["question"]
    with pytest.raises(ValueError, match=r"in \[0, 2\] \(3 tasks\)"):
        env.reset(options={"task_index": -1})
    with pytest.raises(ValueError, match="Unknown reset options"):
        env.reset(options={"split": "train"})


def test_step_errors_and_single_turn():
    env = GSM8KEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("#### 1")
    _, info = env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(None)
    assert env.step("no answer")[1] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step(info["gold_completion"])
    _, info = env.reset(seed=0)
    assert env.step(info["gold_completion"])[1] == pytest.approx(1.1)


def test_registered_env():
    env = gym.make("textgym/GSM8K-v0", render_mode="ansi")
    assert env.spec.max_episode_steps is None  # single turn: it always terminates at step 1
    obs, info = env.reset(seed=3)
    assert env.render() == obs and info["tools"] == [] and "####" in info["system_prompt"]
    assert type(env.unwrapped).is_well_formed(info["gold_completion"])
    *_, terminated, truncated, _ = env.step(info["gold_completion"])
    assert terminated is True and truncated is False


# -- properties ---------------------------------------------------------------------------------
ENV = GSM8KEnv()
WEIGHT = ENV.format_weight


def completions():
    marked = st.builds(lambda a, b: f"{a}\n#### {b}", st.text(), st.text())
    boxed = st.builds(lambda a, b: f"{a}\\boxed{{{b}}}", st.text(), st.text())
    numbers = st.builds(lambda a, n: f"{a}\n#### {n:,}", st.text(), st.integers(-(10**6), 10**6))
    return st.one_of(st.text(), marked, boxed, numbers)


@given(st.integers(0, 2**32 - 1), completions())
def test_step_accepts_any_text(seed, completion):
    ENV.reset(seed=seed)
    obs, reward, terminated, truncated, info = ENV.step(completion)
    assert type(reward) is float and 0.0 <= reward <= 1.0 + WEIGHT
    assert info["reward_components"]["correct"] in (0.0, 1.0)
    assert info["reward_components"]["format"] in (0.0, WEIGHT)
    assert sum(info["reward_components"].values()) == reward
    assert terminated is True and truncated is False and ENV.observation_space.contains(obs)
