"""The reference decoder of :class:`~textgym.policies.hf.HFPolicy` (``decoder="transformers"``): a
micro-batch through ``model.generate``, the prefill of repeated prompts run once, stop strings
checked on the decoded text.

It is the reference the decode engine's tests compare against (the same greedy tokens, the same
log-probabilities up to float rounding) and the baseline of ``benchmarks/llm_decode.py``; the
policy samples with :mod:`textgym.policies.decoding` by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textgym.errors import MissingExtraError
from textgym.policies.kv_slots import cache_kwarg
from textgym.policies.stop_strings import cut_at_stop

try:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList
except ImportError as error:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        f'HFPolicy needs torch and transformers ({error}); pip install "textgym[llm]"'
    ) from error

__all__ = ["StopOnText", "generate_batch", "shared_prefill"]


class StopOnText(StoppingCriteria):
    """Stop a row once its decoded completion contains a stop string.

    Decodes every row's whole completion at each step (O(T^2) decoding, negligible beside the
    forward pass for T <= a few thousand) so that stop strings split across tokens are found.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_length: int) -> None:
        self.tokenizer = tokenizer
        self.stop = list(stop)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(
            input_ids[:, self.prompt_length :], skip_special_tokens=True
        )
        hits = [cut_at_stop(text, self.stop)[1] for text in texts]
        return torch.tensor(hits, dtype=torch.bool, device=input_ids.device)


def generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    seed: int | None,
    *,
    options: Mapping[str, Any],
    stop: Sequence[str] = (),
    share_prefill: bool = False,
) -> tuple[list[list[int]], list[list[float]]]:
    """One ``model.generate`` call over a micro-batch.

    Args:
        model: A ``transformers`` causal LM.
        tokenizer: Its tokenizer (decodes the rows to look for stop strings).
        prompts: ``B`` lists of token ids (no padding; left-padded here with
            ``options["pad_token_id"]``).
        seed: Seed of torch's RNG for this call, forked so that the global state is untouched;
            ``None`` samples from (and advances) the global RNG.
        options: Keyword arguments of ``generate`` (``max_new_tokens``, ``do_sample``,
            ``pad_token_id``, the sampling settings, ...); scores and a dict are always asked.
        stop: Stop strings: a row stops once its decoded text holds one (:class:`StopOnText`).
        share_prefill: Run the prefill of repeated prompts once (:func:`shared_prefill`).

    Returns:
        ``(ids, logprobs)``: per row, the ``S`` generated ids (``S`` = steps run; the caller
        trims each row at its end) and their log-probabilities under the scores ``generate``
        returns (the processed logits).
    """
    device, pad = model.device, options["pad_token_id"]
    width = max(len(ids) for ids in prompts)
    input_ids = torch.tensor(
        [[pad] * (width - len(ids)) + ids for ids in prompts], dtype=torch.long, device=device
    )  # [B, P] left-padded
    attention_mask = torch.tensor(
        [[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts],
        dtype=torch.long,
        device=device,
    )  # [B, P]
    kwargs = {**options, "output_scores": True, "return_dict_in_generate": True}
    if stop:
        kwargs["stopping_criteria"] = StoppingCriteriaList([StopOnText(tokenizer, stop, width)])
    if share_prefill:
        cache = shared_prefill(model, input_ids, attention_mask)
        if cache is not None:  # the keyword this transformers takes (no FutureWarning)
            kwargs[cache_kwarg(model)] = cache

    with torch.random.fork_rng(devices=_rng_devices(device), enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    generated = output.sequences[:, width:]  # [B, S], S = steps run
    logprobs = torch.stack(
        [
            torch.log_softmax(step.float(), dim=-1).gather(1, generated[:, t : t + 1]).squeeze(1)
            for t, step in enumerate(output.scores)
        ],
        dim=1,
    )  # [B, S] float32
    return generated.tolist(), logprobs.tolist()


@torch.no_grad()
def shared_prefill(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """A KV cache of all prompt tokens but the last, each distinct prompt run once.

    ``generate`` then feeds only the last prompt token, so every row samples from the same
    distribution as without the cache (up to float rounding). Returns ``None`` when no
    two rows are equal, a prompt has one token, or the model's cache cannot be gathered by
    row (then ``generate`` prefills as usual).

    Args:
        model: A ``transformers`` causal LM.
        input_ids: ``[B, P]`` long, left-padded prompts.
        attention_mask: ``[B, P]`` long.
    """
    width = input_ids.shape[1]
    if width < 2 or not hasattr(model, "get_decoder"):
        return None
    keyed = torch.cat([input_ids, attention_mask], dim=1)  # [B, 2P]: the mask tells pads apart
    unique, rows = torch.unique(keyed, dim=0, return_inverse=True)  # [U, 2P], [B]
    if unique.shape[0] == input_ids.shape[0]:
        return None
    ids, mask = unique[:, : width - 1], unique[:, width : 2 * width - 1]  # [U, P-1] each
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate derives them from the mask
    cache = (
        model.get_decoder()(
            input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True
        )
    ).past_key_values  # the decoder only: no [U, P-1, V] logits
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return None
    cache.batch_select_indices(rows)  # [U, ...] -> [B, ...]
    return cache


def _rng_devices(device: torch.device) -> list[int]:
    """CUDA devices whose RNG a seeded call forks (none on the CPU)."""
    if device.type == "cuda":
        return [device.index if device.index is not None else torch.cuda.current_device()]
    return []
