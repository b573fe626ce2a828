"""A policy that samples through llama.cpp's ``llama-server``, token-in/token-out.

:class:`LlamaServerPolicy` renders prompts with the Hugging Face tokenizer exactly as
:class:`~textgym.policies.hf.HFPolicy` does, sends the prompt *token ids* to the server's native
``POST /completion``, and gets back the sampled token ids (``"return_tokens": true``) and each
one's probability under the sampling chain (``"n_probs": 1, "post_sampling_probs": true``; the
log of it is the sampling log-probability a GRPO loss needs). The completion is then cut at the
end-of-turn token or stop string by the same rule as ``HFPolicy``, so a trajectory sampled by
the server is indistinguishable in form from one sampled in process, and nothing is ever
re-tokenized. The sampling chain sent is ``temperature``, then ``top_k``, then ``top_p`` (the
order of :func:`textgym.policies.sampling.process_logits`) with every other llama.cpp sampler
neutral (min-p 0, no repetition penalties, no DRY or XTC), so the server samples from the
distribution the learner scores, up to the server's weights (a quantized base, or a stale
adapter) and kernels; the trainer's ``sampler_logprob_gap`` metric measures that difference.

Requests of one call run concurrently (``batch_size`` at a time), so the server's continuous
batching decodes them together; give the server that many slots (``--parallel``).
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from textgym.policies.hf import HFPolicy
from textgym.types import Completion

__all__ = ["LlamaServerPolicy", "completion_request", "sampled_tokens"]


def completion_request(
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int | None,
) -> dict[str, Any]:
    """The JSON body of one ``POST /completion`` (llama.cpp ``tools/server/README.md``).

    Args:
        prompt_ids: ``[P]`` token ids of the rendered prompt (sent as is; the server adds no
            BOS to a prompt given as ids that already starts with one).
        max_new_tokens: ``n_predict``.
        temperature: 0 decodes greedily.
        top_k: 0 turns it off.
        top_p: 1 turns it off.
        seed: The request's sampling seed; ``None`` lets the server pick one.
    """
    body: dict[str, Any] = {
        "prompt": [int(t) for t in prompt_ids],
        "n_predict": int(max_new_tokens),
        "temperature": float(temperature),
        "top_k": int(top_k),
        "top_p": float(top_p),
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "samplers": ["temperature", "top_k", "top_p"],
        "return_tokens": True,
        "n_probs": 1,
        "post_sampling_probs": True,
        "cache_prompt": True,
        "stream": False,
    }
    if seed is not None:
        body["seed"] = int(seed)
    return body


class LlamaServerPolicy(HFPolicy):
    """:class:`HFPolicy`'s prompts and completion rules, with generation by a ``llama-server``.

    Args:
        url: The server's base URL (``http://127.0.0.1:PORT``), or a zero-argument callable
            returning it (a server restarted on a new port: :class:`textgym.serving.LlamaServer`).
        model: The Hugging Face model the server serves a GGUF of; read only for its end-of-turn
            token ids (no forward pass runs here).
        tokenizer: Its tokenizer; prompts are rendered with its chat template.
        timeout_s: Seconds one request may take.
        **kwargs: ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``, ``batch_size``
            (requests in flight), ``stop`` and ``seed``, as :class:`HFPolicy` takes them.

    Raises:
        ValueError: as :class:`HFPolicy` raises for its arguments.
    """

    name = "llama-server"

    def __init__(self, url: Any, model: Any, tokenizer: Any, *, timeout_s: float = 300.0, **kwargs):
        kwargs.setdefault("prefix_cache_tokens", 0)  # the server keeps its own prompt cache
        super().__init__(model, tokenizer, **kwargs)
        self._url = url
        self.timeout_s = float(timeout_s)

    @property
    def url(self) -> str:
        """The server's base URL now."""
        return str(self._url() if callable(self._url) else self._url).rstrip("/")

    def generate(self, prompts: Sequence[Sequence[int]]) -> list[Completion]:
        """Sample one completion per prompt of token ids on the server.

        Returns:
            ``N`` completions as :meth:`HFPolicy.act` describes them: ``completion_ids`` are the
            server's sampled ids and ``logprobs`` the natural log of their post-sampling-chain
            probabilities.

        Raises:
            ValueError: an empty prompt; a reply without ``tokens`` or with a probability per
                token that does not match them (a server that is not llama.cpp's, or too old).
            ConnectionError: the server does not answer, or answers with an HTTP error (its
                message is quoted).
        """
        prompts = [list(map(int, ids)) for ids in prompts]
        if any(not ids for ids in prompts):
            raise ValueError("Expected every prompt to hold at least one token, got an empty one")
        seeds = [self._seeds.getrandbits(31) if self._seeds else None for _ in prompts]
        temperature = self.temperature if self.do_sample else 0.0
        bodies = [
            completion_request(
                ids,
                max_new_tokens=self.max_new_tokens,
                temperature=temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                seed=seed,
            )
            for ids, seed in zip(prompts, seeds, strict=True)
        ]
        url = self.url + "/completion"
        workers = min(self.batch_size, len(bodies)) or 1
        with concurrent.futures.ThreadPoolExecutor(workers, "textgym-llama") as pool:
            replies = list(pool.map(lambda body: self._post(url, body), bodies))
        completions = [
            self._completion(ids, *sampled_tokens(reply, url))
            for ids, reply in zip(prompts, replies, strict=True)
        ]
        self.tokens_generated += sum(len(c.completion_ids or ()) for c in completions)
        return completions

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:500]
            raise ConnectionError(
                f"llama-server at {url} answered {error.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            raise ConnectionError(f"llama-server at {url} did not answer: {error}") from None

    def clear_cache(self) -> None:
        """Nothing to free in this process (the server's prompt cache is its own)."""

    def __repr__(self) -> str:
        return (
            f"LlamaServerPolicy(url={self.url!r}, max_new_tokens={self.max_new_tokens}, "
            f"temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, "
            f"batch_size={self.batch_size}, stop={self.stop!r})"
        )


def sampled_tokens(reply: dict[str, Any], url: str) -> tuple[list[int], list[float]]:
    """``(ids [T], logprobs [T])`` of one ``/completion`` reply."""
    ids = reply.get("tokens")
    probs = reply.get("completion_probabilities")
    if not isinstance(ids, list) or not isinstance(probs, list):
        raise ValueError(
            f"Expected llama-server's /completion at {url} to return 'tokens' and "
            f"'completion_probabilities' (return_tokens, n_probs); got keys {sorted(reply)}"
        )
    if len(probs) != len(ids) or any(p.get("id") != t for p, t in zip(probs, ids, strict=False)):
        raise ValueError(
            f"Expected one probability per sampled token from {url}, got {len(probs)} for "
            f"{len(ids)} tokens"
        )
    # A probability of exactly 0 cannot be sampled; float32 rounding can give one for a token
    # of tiny probability, so floor it at the smallest normal float32 instead of -inf.
    logprobs = [math.log(max(float(p["prob"]), 1.1754944e-38)) for p in probs]
    return [int(t) for t in ids], logprobs
