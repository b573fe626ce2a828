"""``--policy random`` on every registered env: a random action from the env's action grammar,
seeded and deterministic, so a researcher always has a floor."""

import json

import gymnasium as gym
import jsonschema
import numpy as np
import pytest

import textgym
from textgym.cli import main
from textgym.envs.gsm8k.parsing import extract_final_answer, parse_number
from textgym.envs.reverse_text.parsing import extract_reversed_text
from textgym.policies import RandomPolicy
from textgym.policies.random_actions import random_json, random_tool_call

ENV_IDS = list(textgym.ENV_DESCRIPTIONS)


def run(tmp_path, env_id, *argv):
    out = tmp_path / "run"
    assert (
        main(
            ["eval", env_id, "--policy", "random", "--no-progress", "--output-dir", str(out), *argv]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    episodes = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    return summary, episodes


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_plays_every_env_deterministically(tmp_path, env_id):
    first, episodes = run(tmp_path / "a", env_id, "--limit", "3", "--seed", "4")
    second, again = run(tmp_path / "b", env_id, "--limit", "3", "--seed", "4")
    _, other = run(tmp_path / "c", env_id, "--limit", "3", "--seed", "5")
    assert first["episodes"] == 3 and first["invalid_action_rate"] == 0.0  # in the grammar
    assert [e["messages"] for e in episodes] == [e["messages"] for e in again]
    assert [e["messages"] for e in episodes] != [e["messages"] for e in other]
    assert first["mean_return"] == second["mean_return"]


def reset(env_id, seed=0):
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    return env, obs, info


def act(env, obs, info, seed=0):
    policy = RandomPolicy(seed, sample_action=env.unwrapped.random_action)
    return policy.act([[{"role": "user", "content": obs}]], [info])[0].text


def test_gsm8k_gets_a_random_number_in_its_answer_format():
    env, obs, info = reset("textgym/GSM8K-v0")
    answers = {parse_number(extract_final_answer(act(env, obs, info, s))) for s in range(20)}
    assert len(answers) > 10 and all(0 <= a < 1000 for a in answers)


def test_reverse_text_gets_the_texts_characters_shuffled_in_the_tags():
    env, obs, info = reset("textgym/ReverseText-v0")
    text = obs.split("\n\n", 1)[1]
    answer = extract_reversed_text(act(env, obs, info))
    assert sorted(answer) == sorted(text) and answer != text[::-1]
    _, reward, *_ = env.step(act(env, obs, info))
    assert 0.0 < reward < 1.0  # a floor above zero, below an exact reversal


@pytest.mark.parametrize("env_id", ["textgym/EmailToolUse-v1", "textgym/Workplace-v1"])
def test_tool_envs_get_schema_valid_calls_of_their_tools(env_id):
    env, obs, info = reset(env_id)
    schemas = {tool["name"]: tool["parameters"] for tool in info["tools"]}
    called = set()
    for seed in range(60):
        text = act(env, obs, info, seed)
        assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
        call = json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
        jsonschema.validate(call["arguments"], schemas[call["name"]])
        called.add(call["name"])
    assert len(called) >= min(len(schemas), 5)
    _, _, _, _, step_info = env.step(act(env, obs, info))
    assert step_info["invalid_action"] is False  # the env's own validation accepts it


SCHEMA = {
    "type": "object",
    "properties": {
        "box": {"type": "string", "enum": ["inbox", "outbox", "spam"]},
        "page": {"type": "integer", "minimum": 3, "maximum": 5},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1},
        "kind": {"const": "email"},
        "nested": {
            "type": "object",
            "properties": {"id": {"type": ["string", "null"], "minLength": 8}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
    "required": ["box", "page", "ratio", "tags", "nested"],
    "additionalProperties": False,
}


def test_random_json_validates_against_its_schema_and_uses_every_enum_value():
    values = [random_json(SCHEMA, np.random.default_rng(s)) for s in range(200)]
    for value in values:
        jsonschema.validate(value, SCHEMA)
    assert {v["box"] for v in values} == {"inbox", "outbox", "spam"}
    assert {v["page"] for v in values} == {3, 4, 5}
    assert any("flag" in v for v in values) and any("flag" not in v for v in values)
    assert random_json(SCHEMA, np.random.default_rng(7)) == random_json(
        SCHEMA, np.random.default_rng(7)
    )


def test_a_tool_call_in_the_chat_completions_form():
    tools = [{"type": "function", "function": {"name": "ping", "parameters": SCHEMA}}]
    call = json.loads(
        random_tool_call(tools, np.random.default_rng(0))
        .removeprefix("<tool_call>")
        .removesuffix("</tool_call>")
    )
    assert call["name"] == "ping"
    jsonschema.validate(call["arguments"], SCHEMA)
    with pytest.raises(ValueError, match="at least one tool schema"):
        random_tool_call([], np.random.default_rng(0))


def test_random_refuses_an_info_it_cannot_answer():
    with pytest.raises(KeyError, match="declares no random_action"):
        RandomPolicy(0).act([[{"role": "user", "content": "hi"}]], [{"task_id": "x"}])
