"""What ``llm_decode.py`` times textgym's engine against, and what every engine's timing shares.

The peers: ``transformers``' continuous batching (``generate_batch``, one call per turn) and
llama.cpp (``llama-cpp-python``, one episode after another). Shared: the token scripts of real
tic-tac-toe games (:func:`episode_scripts`), the rates of a timed run (:func:`rates`) and the
decode roofline on CUDA (:func:`roofline`). ``args`` is ``llm_decode.py``'s ``Config``.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import torch
from _roofline import copy_bandwidth, kv_bytes_per_row  # sibling module

from textgym.envs.tictactoe import MinimaxPolicy
from textgym.models import load_model
from textgym.policies import conversation_start
from textgym.tokens import ChatTokenizer


def episode_scripts(tokenizer: Any, episodes: int, turns: int, seed: int) -> list[dict[str, Any]]:
    """Per episode: the first prompt's ids and, for each later turn, the ids that follow the
    generated tokens (turn markers and the next observation), from real games."""
    chat = ChatTokenizer(tokenizer)
    agent = MinimaxPolicy(seed=seed)
    scripts = []
    for episode in range(episodes):
        env = gym.make("textgym/TicTacToe-v0")
        observation, info = env.reset(seed=seed + episode)
        messages = conversation_start(observation, info)
        script = {"prompt": chat.prompt(messages), "continuations": []}
        for _ in range(turns - 1):
            (move,) = agent.act([messages], [info])
            observation, _, terminated, truncated, info = env.step(move.text)
            if terminated or truncated:
                raise ValueError(f"episode {episode} ended before {turns} turns; use fewer turns")
            new = [{"role": "user", "content": observation}]
            script["continuations"].append(chat.continuation(messages, [], new))
            messages = [*messages, {"role": "assistant", "content": move.text}, *new]
        scripts.append(script)
    return scripts


def extend_turn(
    sequences: list[list[int]],
    scripts: list[dict[str, Any]],
    new_ids: list[list[int]],
    turn: int,
    turns: int,
) -> int:
    """Append each episode's generated ids ``new_ids[i]`` and, before a later turn, its script's
    continuation (turn markers and the next observation); returns the tokens generated."""
    for sequence, script, ids in zip(sequences, scripts, new_ids, strict=True):
        sequence.extend(ids)
        if turn + 1 < turns:
            sequence.extend(script["continuations"][turn])
    return sum(len(ids) for ids in new_ids)


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_continuous_batching(args: Any, batch: int) -> dict[str, Any]:
    """``transformers``' continuous batching, one ``generate_batch`` call per turn."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    device = "cuda" if torch.cuda.is_available() else None
    model, tokenizer = load_model(
        args.model, dtype=args.dtype, device=device, random_weights=args.random_weights
    )
    scripts = episode_scripts(tokenizer, batch, args.turns, args.seed)
    generation = GenerationConfig(
        max_new_tokens=args.new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        eos_token_id=-1,  # every turn generates exactly --new-tokens tokens
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    batching = ContinuousBatchingConfig(return_logprobs=True)
    sequences = [list(s["prompt"]) for s in scripts]
    model.generate_batch(  # warm-up (CUDA graphs are captured here)
        [sequences[0]], generation_config=generation, continuous_batching_config=batching
    )
    generated = 0
    synchronize()
    began = time.perf_counter()
    for turn in range(args.turns):
        outputs = model.generate_batch(
            sequences, generation_config=generation, continuous_batching_config=batching
        )
        ordered = [outputs[key] for key in sorted(outputs, key=lambda k: int(k.split("_")[-1]))]
        if any(len(o.logprobs or ()) != len(o.generated_tokens) for o in ordered):
            raise RuntimeError("generate_batch returned no log-prob per generated token")
        new_ids = [output.generated_tokens for output in ordered]
        generated += extend_turn(sequences, scripts, new_ids, turn, args.turns)
    synchronize()
    wall = time.perf_counter() - began
    result = rates(wall, 0.0, 0, generated, batch)
    result["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    result["note"] = "no prefill/decode split: decode_tokens_per_s = generated / wall"
    if device == "cuda":
        result.update(roofline(model, result, batch, sequences))
    return result


def run_llama_cpp(args: Any, batch: int) -> dict[str, Any]:
    """llama.cpp, one episode after another, each keeping its state across turns."""
    import llama_cpp

    _, tokenizer = load_model(args.model, dtype="float32")  # the same ids as textgym's engines
    scripts = episode_scripts(tokenizer, batch, args.turns, args.seed)
    del tokenizer
    context = max(len(s["prompt"]) + sum(map(len, s["continuations"])) for s in scripts)
    llm = llama_cpp.Llama(
        model_path=args.gguf,
        n_ctx=context + args.turns * args.new_tokens + 16,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_batch=512,
        seed=args.seed,
        logits_all=False,
        verbose=False,
    )
    llm.eval(scripts[0]["prompt"][:8])  # warm-up
    prefill_s, prefill_tokens, generated = 0.0, 0, 0
    began = time.perf_counter()
    for script in scripts:
        llm.reset()
        pending = list(script["prompt"])
        for turn in range(args.turns):
            start = time.perf_counter()
            llm.eval(pending)
            prefill_s += time.perf_counter() - start
            prefill_tokens += len(pending)
            for step in range(args.new_tokens):
                token = llm.sample(temp=1.0, top_k=0, top_p=1.0, min_p=0.0)
                generated += 1
                if step + 1 < args.new_tokens:
                    llm.eval([token])
            if turn + 1 < args.turns:
                pending = [token, *script["continuations"][turn]]
    wall = time.perf_counter() - began
    result = rates(wall, prefill_s, prefill_tokens, generated, batch)
    result["dtype"] = "Q4_K_M (GGUF, 4-bit weights)"
    return result


def rates(
    wall: float, prefill_s: float, prefill_tokens: int, generated: int, batch: int
) -> dict[str, Any]:
    """Prefill and decode seconds and tokens/s of one timed run of ``batch`` episodes."""
    return {
        "wall_s": wall,
        "wall_s_per_episode": wall / batch,
        "prefill_tokens": prefill_tokens,
        "prefill_s": prefill_s,
        "prefill_tokens_per_s": prefill_tokens / max(prefill_s, 1e-9),
        "generated_tokens": generated,
        "decode_s": wall - prefill_s,
        "decode_tokens_per_s": generated / max(wall - prefill_s, 1e-9),
    }


def roofline(
    model: Any, result: dict[str, Any], batch: int, sequences: list[list[int]]
) -> dict[str, Any]:
    """Decode tokens/s against ``batch * bandwidth / (weights + KV read per step)``."""
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dtype_bytes = next(model.parameters()).element_size()
    context = sum(len(s) for s in sequences) / len(sequences) / 2  # mean over the run
    step_bytes = weight_bytes + batch * kv_bytes_per_row(model.config, context, dtype_bytes)
    bandwidth = copy_bandwidth(model.device)
    ceiling = batch * bandwidth / step_bytes
    return {
        "device": torch.cuda.get_device_name(),
        "measured_bandwidth_bytes_per_s": bandwidth,
        "ceiling_tokens_per_s": ceiling,
        "fraction_of_ceiling": result["decode_tokens_per_s"] / ceiling,
    }
