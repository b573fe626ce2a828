"""Tool-use conversations in text form and structured form: conversion both ways, `collect`
records that TRL's SFTTrainer reads for tool calling, and `textgym sft` reading them back."""

import json

import gymnasium as gym
import pytest

import textgym  # noqa: F401
from textgym.cli import main
from textgym.policies import GoldPolicy
from textgym.rollout import rollout
from textgym.toolformat import chat_tools, from_chat_messages, to_chat_messages

TOOL_ENVS = ["textgym/EmailToolUse-v1", "textgym/Workplace-v1"]


def gold(env_id, seeds):
    return rollout(lambda: gym.make(env_id), GoldPolicy(), seeds, batch_size=len(seeds))


@pytest.mark.parametrize("env_id", TOOL_ENVS)
def test_text_to_structured_and_back_is_the_identity(env_id):
    episodes = gold(env_id, list(range(8)))
    assert any("<tool_call>" in m["content"] for t in episodes for m in t.messages)
    for traj in episodes:
        structured = to_chat_messages(traj.messages)
        if traj.num_steps > 1:  # the calls ran: they and their results are structured
            assert any(m.get("tool_calls") for m in structured)
            assert any(m["role"] == "tool" for m in structured)
        assert from_chat_messages(structured) == traj.messages


def test_from_chat_messages_refuses_what_does_not_read():
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    prompt = {"role": "user", "content": "go"}
    with pytest.raises(ValueError, match="without the calls"):
        from_chat_messages([prompt, {"role": "tool", "tool_call_id": "a", "content": "x"}])
    with pytest.raises(ValueError, match="expected \\['a'\\]"):
        from_chat_messages(
            [
                prompt,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "b", "content": "x"},
            ]
        )
    bad = {**call, "function": {"name": "f", "arguments": "[1]"}}
    with pytest.raises(ValueError, match="without a name or arguments"):
        from_chat_messages([prompt, {"role": "assistant", "content": "", "tool_calls": [bad]}])


def collect(tmp_path, env_id="textgym/EmailToolUse-v1", episodes=4):
    out = tmp_path / "tools.jsonl"
    argv = ["collect", env_id, "--policy", "gold", "--episodes", str(episodes), "--output"]
    assert main([*argv, str(out), "--no-progress"]) == 0
    return out, [json.loads(line) for line in out.read_text().splitlines()]


def test_collect_writes_the_trl_tool_calling_form_and_sft_reads_it_back(tmp_path):
    from textgym.algos.sft_data import read_conversations

    path, records = collect(tmp_path)
    episodes = gold("textgym/EmailToolUse-v1", [r["seed"] for r in records])
    schemas = chat_tools(gym.make("textgym/EmailToolUse-v1").reset(seed=0)[1]["tools"])
    for record, traj in zip(records, episodes):
        assert json.loads(record["tools"]) == schemas
        assert record["messages"] == to_chat_messages(traj.messages[:-1])
    assert any(m.get("tool_calls") for r in records for m in r["messages"])
    # textgym sft learns the text form the env parses.
    assert read_conversations(path) == [t.messages[:-1] for t in episodes]
    plain = tmp_path / "plain.jsonl"
    assert main(["collect", "textgym/TicTacToe-v0", "--episodes", "2", "--output", str(plain)]) == 0
    assert all("tools" not in json.loads(line) for line in plain.read_text().splitlines())


# A chat template that renders tools and structured calls (the tiny model's own template shows
# content only), so the test can see that TRL passed both through.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | map(attribute='function.name') | join(', ') }}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}<call {{ c['function']['name'] }}>{% endfor %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_trl_sft_trainer_takes_one_step_on_collected_tool_episodes(tmp_path):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from textgym.models import load_model

    path, records = collect(tmp_path)
    dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    dataset = dataset.select_columns(["messages", "tools"])
    model, tokenizer = load_model("tiny")
    tokenizer.chat_template = TOOL_TEMPLATE
    config = trl.SFTConfig(
        output_dir=str(tmp_path / "trl"),
        max_steps=1,
        per_device_train_batch_size=2,
        learning_rate=1e-4,
        use_cpu=True,
        bf16=False,
        report_to=[],
        max_length=4096,
        save_strategy="no",
    )
    trainer = trl.SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    text = tokenizer.decode(trainer.train_dataset[0]["input_ids"])
    first_call = next(m for m in records[0]["messages"] if m.get("tool_calls"))["tool_calls"][0]
    tools_line = text.split("<|im_end|>")[0]
    assert tools_line.startswith("<|im_start|>system\nTools: ") and "email_send_email" in tools_line
    assert f"<call {first_call['function']['name']}>" in text and "<|im_start|>tool\n" in text
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0
