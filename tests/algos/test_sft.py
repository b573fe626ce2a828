"""SFT data building and training, and the shared log-prob / batch helpers."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from textgym.algos.batches import (  # noqa: E402
    make_token_batch,
    sequence_log_probs,
)
from textgym.algos.decoder_passes import shared_prefix_hidden, shared_prefix_length  # noqa: E402
from textgym.algos.sft import train  # noqa: E402
from textgym.algos.sft_config import SFTConfig  # noqa: E402
from textgym.algos.sft_data import conversation_tokens  # noqa: E402
from textgym.models import load_model
from textgym.tiny_model import build_tiny_model  # noqa: E402
from textgym.tokens import ChatTokenizer  # noqa: E402

pytestmark = pytest.mark.llm

CONVERSATION = [
    {"role": "system", "content": "Play."},
    {"role": "user", "content": "012\n345\n678\nfree 0 1 2 3 4 5 6 7 8"},
    {"role": "assistant", "content": "<move>4</move>"},
    {"role": "user", "content": "opp 0\nO12\n3X5\n678\nfree 1 2 3 5 6 7 8"},
    {"role": "assistant", "content": "<move>8</move>"},
    {"role": "user", "content": "over win"},
]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


def test_conversation_tokens_mask_exactly_the_assistant_turns(tiny):
    _, tokenizer = tiny
    chat = ChatTokenizer(tokenizer)
    ids, mask = conversation_tokens(chat, CONVERSATION)
    # Equal to the template's rendering of the conversation up to the last assistant turn.
    text = chat.render(CONVERSATION[:5], add_generation_prompt=False)
    assert tokenizer.decode(ids) == text.rstrip("\n")
    learned = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert learned == "<move>4</move><|im_end|><move>8</move><|im_end|>"


def test_conversation_without_assistant_is_refused(tiny):
    with pytest.raises(ValueError, match="at least one assistant message"):
        conversation_tokens(ChatTokenizer(tiny[1]), CONVERSATION[:2])


def test_sequence_log_probs_equal_a_full_forward_on_loss_positions(tiny):
    model, tokenizer = tiny
    chat = ChatTokenizer(tokenizer)
    ids, mask = conversation_tokens(chat, CONVERSATION)
    short_ids, short_mask = conversation_tokens(chat, CONVERSATION[:3])
    batch = make_token_batch([ids, short_ids], [mask, short_mask], pad_token_id=258)
    logp, entropy = sequence_log_probs(model, batch, chunk_size=5, with_entropy=True)  # [2, L-1]
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    full = torch.log_softmax(logits, -1)  # [2, L-1, V]
    expected = full.gather(2, batch.targets[..., None]).squeeze(-1) * batch.loss_mask
    torch.testing.assert_close(logp, expected, atol=1e-5, rtol=1e-5)
    expected_entropy = -(full.exp() * full).sum(-1) * batch.loss_mask
    torch.testing.assert_close(entropy, expected_entropy, atol=1e-5, rtol=1e-5)
    assert (logp[batch.loss_mask == 0] == 0).all()
    (-logp.sum()).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad()


def test_sft_lowers_the_loss_and_saves_a_loadable_model(tmp_path, tiny):
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(8)))
    config = SFTConfig(
        data=str(data),
        model="tiny",
        output_dir=str(tmp_path / "sft"),
        epochs=6,
        batch_size=4,
        micro_batch_size=2,
        learning_rate=3e-3,
        device="cpu",
        tensorboard=False,
        log_every=1,
    )
    summary = train(config)
    rows = [
        json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()
    ]
    assert summary["steps"] == 12 and len(rows) == 12
    assert rows[-1]["loss"] < 0.5 * rows[0]["loss"]
    assert (tmp_path / "sft" / "plots" / "loss.png").stat().st_size > 0
    assert config.epochs == 6 and "steps_per_epoch" not in vars(config)  # nothing derived in place
    model, tokenizer = load_model(str(tmp_path / "sft"))
    assert tokenizer.chat_template and sum(p.numel() for p in model.parameters()) > 0


def test_sft_config_explains_missing_data(tmp_path):
    with pytest.raises(ValueError, match="^data: .*make one with `textgym collect`"):
        SFTConfig(data=str(tmp_path / "missing.jsonl"))


def test_sft_config_defaults_and_messages(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    assert SFTConfig(data=str(data)).model == "gemma-3-270m"  # as in every other command
    with pytest.raises(ValueError, match="^batch_size: expected an int >= 1, got 0$"):
        SFTConfig(data=str(data), batch_size=0)


def test_sft_passes_lora_alpha_and_prints_progress(tmp_path, capsys):
    """``lora_alpha`` reaches the adapter (it was silently dropped: the adapter had alpha 16
    whatever was asked), and each step prints one progress line."""
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    config = SFTConfig(
        data=str(data),
        model="tiny",
        output_dir=str(tmp_path / "sft"),
        batch_size=2,
        lora_rank=4,
        lora_alpha=64,
        device="cpu",
        tensorboard=False,
    )
    train(config)
    adapter = json.loads((tmp_path / "sft" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 64)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in lines] == ["step 1/2", "step 2/2"]
    assert all("loss " in line and "tokens/s" in line for line in lines)


def _grouped_batch(tokenizer):
    """Two groups of three rows: each group shares its prompt, then the rows differ."""
    chat = ChatTokenizer(tokenizer)
    rows, masks = [], []
    for board, moves in (("012\n345\n678", ("4", "0", "8")), ("X12\n345\n678", ("4", "5", "2"))):
        for move in moves:
            conversation = [
                {"role": "system", "content": "Play."},
                {"role": "user", "content": f"{board}\nfree ..."},
                {"role": "assistant", "content": f"<move>{move}</move>"},
            ]
            if move == "0":  # a longer, multi-turn row
                conversation += [
                    {"role": "user", "content": "opp 4\nnext?"},
                    {"role": "assistant", "content": "<move>8</move>"},
                ]
            ids, mask = conversation_tokens(chat, conversation)
            rows.append(ids)
            masks.append(mask)
    masks[-1] = [0] * len(masks[-1])  # a row without loss (masked truncation) must not matter
    return make_token_batch(rows, masks, pad_token_id=258)


def test_shared_prefix_forward_matches_the_plain_forward(tiny):
    model, tokenizer = tiny
    batch = _grouped_batch(tokenizer)
    assert shared_prefix_length(batch) > 10
    assert shared_prefix_hidden(model.get_decoder(), batch) is not None  # the shared path runs
    results = []
    for share in (False, True):
        model.zero_grad()
        logp, entropy = sequence_log_probs(model, batch, with_entropy=True, share_prefix=share)
        (-(logp * torch.arange(1, 7)[:, None]).sum()).backward()  # rows weighted differently
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((logp.detach(), entropy, grads))
    model.zero_grad()
    for plain, shared in zip(*results):
        torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)
    assert results[0][2].abs().sum() > 0


def test_shared_prefix_is_skipped_when_it_cannot_help(tiny):
    model, tokenizer = tiny
    chat = ChatTokenizer(tokenizer)
    ids, mask = conversation_tokens(chat, CONVERSATION)
    other, other_mask = conversation_tokens(
        chat, [{"role": "user", "content": "hi"}, *CONVERSATION[2:3]]
    )
    distinct = make_token_batch([ids, other], [mask, other_mask], pad_token_id=258)
    assert shared_prefix_hidden(model.get_decoder(), distinct) is None  # no row shares a prompt
    batch = _grouped_batch(tokenizer)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    try:  # checkpointed layers fill no cache: the plain pass must run instead
        assert shared_prefix_hidden(model.get_decoder(), batch) is None
    finally:
        model.gradient_checkpointing_disable()
        model.eval()


def test_sft_evaluates_in_an_env_as_train_does(tmp_path):
    """``eval_env``: a ``stage="eval"`` row every ``eval_every`` steps and after the last, and
    the summary's evaluation is what the saved model scores when evaluated afresh."""
    from textgym.algos.grpo_rollouts import evaluate
    from textgym.policies.hf import HFPolicy

    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(6)))
    config = SFTConfig(
        data=str(data),
        model="tiny",
        output_dir=str(tmp_path / "sft"),
        batch_size=2,
        device="cpu",
        tensorboard=False,
        eval_env="textgym/TicTacToe-v0",
        eval_episodes=2,
        eval_every=2,
        eval_max_new_tokens=6,
    )
    summary = train(config)
    rows = [
        json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows if r.get("stage") == "eval"] == [2, 3]
    assert set(summary["eval"]) >= {"random/return_mean", "optimal/invalid_rate"}
    model, tokenizer = load_model(str(tmp_path / "sft"))
    policy = HFPolicy(model, tokenizer, max_new_tokens=6, temperature=0.0, stop=["</move>"])
    again = evaluate(
        lambda: __import__("gymnasium").make("textgym/TicTacToe-v0"), policy, episodes=2
    )
    assert again == summary["eval"]


def test_sft_refuses_an_unknown_eval_env_before_training(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    with pytest.raises(ValueError, match="textgym/NoSuchEnv-v0"):
        SFTConfig(data=str(data), eval_env="textgym/NoSuchEnv-v0")


def _heldout_stub(values):
    """A held-out loss that returns ``values`` in turn (raising one that is an exception)."""
    values = iter(values)

    def heldout(run, sequences):
        value = next(values)
        if isinstance(value, BaseException):
            raise value
        return value

    return heldout


def _sft_rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_heldout_loss_is_the_training_loss_on_held_out_records(tmp_path):
    """``eval_data``: a held-out loss row after each epoch; on the training records themselves,
    after one whole-batch step it equals the next step's loss (taken before that step's update),
    the same weights and the same definition."""
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    out = tmp_path / "sft"
    summary = train(
        SFTConfig(
            data=str(data),
            eval_data=str(data),
            model="tiny",
            output_dir=str(out),
            epochs=3,
            batch_size=4,
            learning_rate=3e-3,
            device="cpu",
            tensorboard=False,
            log_every=10,
        )
    )
    rows = _sft_rows(out)
    heldout = [r for r in rows if r.get("stage") == "eval"]
    assert [r["step"] for r in heldout] == [1, 2, 3] and [r["epoch"] for r in heldout] == [0, 1, 2]
    assert summary["heldout_losses"] == [r["heldout/loss"] for r in heldout]
    train_losses = [r["loss"] for r in rows if r.get("stage") == "train"]
    assert len(train_losses) == 3  # the window is logged at each epoch's end
    assert heldout[0]["heldout/loss"] == pytest.approx(train_losses[1], rel=1e-4)
    assert heldout[1]["heldout/loss"] == pytest.approx(train_losses[2], rel=1e-4)
    assert summary["heldout_losses"][2] < summary["heldout_losses"][0]
    assert summary["stopped_early"] is False


def test_early_stopping_ends_after_patience_epochs_without_a_better_heldout_loss(
    tmp_path, monkeypatch
):
    import textgym.algos.sft as sft

    losses = iter([1.0, 0.5, 0.6, 0.7, 0.1, 0.1])
    monkeypatch.setattr(sft, "heldout_loss", lambda run, sequences: next(losses))
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    summary = train(
        SFTConfig(
            data=str(data),
            eval_data=str(data),
            early_stopping_patience=2,
            model="tiny",
            output_dir=str(tmp_path / "sft"),
            epochs=6,
            batch_size=2,
            device="cpu",
            tensorboard=False,
        )
    )
    assert summary["heldout_losses"] == [1.0, 0.5, 0.6, 0.7]
    assert summary["steps"] == 8 and summary["stopped_early"] is True
    assert (tmp_path / "sft" / "sft_summary.json").is_file()


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same_weights(a, b) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("best", [True, False])
def test_the_saved_model_is_the_best_heldout_epoch(tmp_path, monkeypatch, best):
    """load_best_model_at_end (the default): the model saved is the weights of the epoch with
    the lowest held-out loss (epoch 1, step 4), not the last one trained (epoch 3, step 8)."""
    import textgym.algos.sft as sft

    losses = iter([1.0, 0.5, 0.6, 0.7])
    monkeypatch.setattr(sft, "heldout_loss", lambda run, sequences: next(losses))
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    out = tmp_path / "sft"
    summary = train(
        SFTConfig(
            data=str(data),
            eval_data=str(data),
            early_stopping_patience=2,
            load_best_model_at_end=best,
            model="tiny",
            output_dir=str(out),
            epochs=6,
            batch_size=2,
            learning_rate=3e-3,
            save_every=2,
            save_total_limit=None,
            device="cpu",
            tensorboard=False,
        )
    )
    assert summary["saved_epoch"] == (1 if best else 3)
    saved = _weights(out)
    assert _same_weights(saved, _weights(out / ("checkpoint-4" if best else "checkpoint-8")))
    assert not _same_weights(saved, _weights(out / ("checkpoint-8" if best else "checkpoint-4")))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"early_stopping_patience": 1}, "^early_stopping_patience: .* without eval_data$"),
        ({"early_stopping_patience": -1}, "^early_stopping_patience: expected 0, or >= 1"),
        ({"eval_data": "nope.jsonl"}, "^eval_data: expected a JSONL file, got 'nope.jsonl'"),
    ],
)
def test_heldout_settings_are_refused_in_one_line(tmp_path, kwargs, match):
    from textgym.errors import SetupError

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    with pytest.raises(SetupError, match=match):
        SFTConfig(data=str(data), **kwargs)


def test_a_resumed_run_keeps_the_heldout_losses_it_had_and_stops_where_it_would_have(
    tmp_path, monkeypatch, capsys
):
    """Killed after epoch 3's checkpoint, before its held-out loss: the resume reads epochs 1-2's
    back from metrics.jsonl, measures epoch 3, and stops early at the same step as an
    uninterrupted run."""
    import textgym.algos.sft as sft

    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    settings = dict(data=str(data), eval_data=str(data), early_stopping_patience=2, epochs=6)
    settings |= dict(model="tiny", batch_size=2, save_every=2, device="cpu", tensorboard=False)
    out = tmp_path / "sft"
    monkeypatch.setattr(sft, "heldout_loss", _heldout_stub([1.0, 0.5, KeyboardInterrupt()]))
    with pytest.raises(KeyboardInterrupt):
        train(SFTConfig(**settings, output_dir=str(out)))
    assert (out / "checkpoint-6").is_dir() and not (out / "sft_summary.json").exists()
    monkeypatch.setattr(sft, "heldout_loss", _heldout_stub([0.6, 0.7]))
    summary = train(SFTConfig(**settings, output_dir=str(out), resume=True))
    assert summary["heldout_losses"] == [1.0, 0.5, 0.6, 0.7] and summary["steps"] == 8
    # The best epoch (1) ended before the resume, and save_total_limit 2 has since removed its
    # checkpoint-4: the last epoch's weights are saved, and said so.
    assert summary["saved_epoch"] == 3 and "no checkpoint of" in capsys.readouterr().err
    heldout = [(r["step"], r["heldout/loss"]) for r in _sft_rows(out) if r.get("stage") == "eval"]
    assert heldout == [(2, 1.0), (4, 0.5), (6, 0.6), (8, 0.7)]


def test_a_resumed_run_reads_the_best_epoch_back_from_its_checkpoint(tmp_path, monkeypatch):
    """Killed in epoch 2's held-out loss, after its checkpoint: the resume knows epoch 1 was
    the best (0.5) without holding its weights, and reads them from checkpoint-4."""
    import textgym.algos.sft as sft

    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))
    settings = dict(data=str(data), eval_data=str(data), model="tiny", batch_size=2, save_every=2)
    settings |= dict(epochs=4, learning_rate=3e-3, save_total_limit=None, device="cpu")
    settings |= dict(tensorboard=False, output_dir=str(tmp_path / "sft"))
    out = tmp_path / "sft"
    monkeypatch.setattr(sft, "heldout_loss", _heldout_stub([1.0, 0.5, KeyboardInterrupt()]))
    with pytest.raises(KeyboardInterrupt):
        train(SFTConfig(**settings))
    monkeypatch.setattr(sft, "heldout_loss", _heldout_stub([0.6, 0.7]))
    summary = train(SFTConfig(**settings, resume=True))
    assert summary["heldout_losses"] == [1.0, 0.5, 0.6, 0.7] and summary["saved_epoch"] == 1
    assert _same_weights(_weights(out), _weights(out / "checkpoint-4"))
    assert not _same_weights(_weights(out), _weights(out / "checkpoint-8"))


def test_lora_sft_is_reproducible_from_its_seed(tmp_path):
    """Two runs with the same settings save the same adapter; another seed another one (the
    LoRA initialisation was once left to torch's global state: same-setting email SFT runs
    scored 0.29, 0.47 and 0.55 on the same held-out tasks)."""
    from safetensors.torch import load_file

    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION}) + "\n" for _ in range(4)))

    def adapter(name: str, seed: int) -> dict:
        torch.manual_seed(1000 + len(name))  # whatever the global state was before the run
        settings = dict(data=str(data), model="tiny", lora_rank=4, batch_size=2, seed=seed)
        out = tmp_path / name
        train(SFTConfig(**settings, device="cpu", tensorboard=False, output_dir=str(out)))
        return load_file(out / "adapter_model.safetensors")

    first, again, other = adapter("a", 0), adapter("bb", 0), adapter("ccc", 1)
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)
