"""A local Hugging Face ``transformers`` causal LM as a policy, with batched sampling.

:class:`HFPolicy` renders each conversation with the tokenizer's chat template, samples a
micro-batch of prompts with :func:`textgym.policies.decoding.decode` (temperature / top-k /
top-p, each episode's KV cache kept between its turns) and returns, per conversation, the text,
the prompt and completion token ids, the sampling log-probabilities of the completion tokens and
why generation stopped. The token ids and log-probabilities are what a policy-gradient trainer
needs to score the rollout again. ``decoder="transformers"`` samples with ``model.generate``
instead: the reference the tests compare against, and the baseline of
``benchmarks/llm_decode.py``.
"""

from __future__ import annotations

import ctypes
import functools
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from textgym.chat_templates import ensure_chat_template, stop_token_ids
from textgym.checks import check_int, check_sampling
from textgym.errors import MissingExtraError
from textgym.models import load_model
from textgym.policies.decoding import decode
from textgym.policies.hf_generate import generate_batch
from textgym.policies.prefix_cache import PrefixCache
from textgym.policies.sampling import process_logits
from textgym.policies.slot_decoder import SlotDecoder
from textgym.policies.stop_strings import cut_at_stop, stop_string_list, stop_token_end
from textgym.tokens import ChatTokenizer
from textgym.types import Completion, Message

try:
    import torch
except ImportError as error:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        f'HFPolicy needs torch and transformers ({error}); pip install "textgym[llm]"'
    ) from error

__all__ = ["HFPolicy"]


def _return_free_heap() -> None:
    """Give freed heap memory back to the OS (glibc's ``malloc_trim``; a no-op elsewhere).

    Each call frees KV buffers of many sizes; glibc keeps freed heap pages and fragments them,
    so without this the peak resident memory of the README's 20-game Gemma evaluation was
    4.7 GB, with it 3.6 GB (2-core Xeon, bfloat16), at no measurable cost in time.
    """
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (e.g. musl)
        return None


_LIBC = _load_libc()


def _default_prefix_cache_tokens(model: Any) -> int:
    """The prefix cache's default size in tokens: 32,768 off CUDA; on CUDA what an eighth of the
    device's memory holds at the model's KV bytes per token, at least 32,768."""
    device = getattr(model, "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return 32768
    import torch

    from textgym.policies.kv_slots import slot_geometry

    geometry = slot_geometry(model)
    itemsize = next(model.parameters()).element_size()
    per_token = 2 * geometry["layers"] * geometry["heads"] * geometry["dim"] * itemsize
    total = torch.cuda.get_device_properties(device).total_memory
    return max(32768, total // 8 // per_token)


class HFPolicy:
    """Sample completions from a local ``transformers`` causal LM.

    Each call to :meth:`act` renders the conversations with the tokenizer's chat template
    (``add_generation_prompt=True``; :func:`textgym.chat_templates.ensure_chat_template` supplies
    one if missing; message content is tokenized as plain text, so a ``<|im_start|>`` written into
    an observation is characters, not a turn: :class:`textgym.tokens.ChatTokenizer`) and samples
    them in micro-batches of ``batch_size``. Generation of a row ends at the first EOS or
    end-of-turn token (:func:`textgym.chat_templates.stop_token_ids`), at the first stop string,
    or after ``max_new_tokens`` tokens.

    With the default ``decoder="textgym"`` the policy keeps the KV cache of every sequence it
    finished (up to ``prefix_cache_tokens`` tokens, least recently used dropped first) and, when a
    later prompt extends one of them (the next turn of the same episode), prefills only the new
    tokens: prefill work per episode grows linearly with its length instead of quadratically.
    Identical prompts of one micro-batch (a GRPO group's first turn) are prefilled once, and rows
    leave the batch as they finish. The cache is dropped automatically when the model's weights
    change and by :meth:`clear_cache`. See :mod:`textgym.policies.decoding`.

    ``Completion.logprobs`` are natural-log probabilities of each chosen token under the
    distribution it was sampled from: after temperature, top-k and top-p (tokens outside the
    nucleus have probability 0), in the order and with the rules of ``transformers``' warpers.
    For greedy decoding (``temperature=0`` or ``do_sample=False``) they are the model's
    untempered log-probabilities (temperature 1). They are gathered as each token is drawn; no
    ``[B, V]`` score tensor is kept per step.

    With ``seed`` set, the policy draws one seed per micro-batch from its own
    ``random.Random(seed)`` and samples from a ``torch.Generator`` seeded with it: two policies
    built with the same seed, model and calls return the same completions, and the global RNG is
    untouched. Without it, sampling uses (and advances) torch's global RNG. The two decoders
    sample the same distribution with different draws (``torch.multinomial`` in ``generate``, the
    exponential race here), so seeded samples differ between them; greedy outputs are identical.

    Attributes:
        name: ``"hf"``.
        tokens_generated: Completion tokens returned so far, over all calls (for tokens/s).
        eos_token_ids: Token ids that end a completion.
        pad_token_id: Id fed in padded positions (the tokenizer's pad token, else the first
            end token).
    """

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        do_sample: bool = True,
        batch_size: int = 8,
        stop: list[str] | None = None,
        seed: int | None = None,
        share_prefill: bool = True,
        prefix_cache_tokens: int | None = None,
        decoder: Literal["textgym", "transformers"] = "textgym",
        engine_options: Mapping[str, Any] | None = None,
    ) -> None:
        """Wrap a model and its tokenizer.

        Args:
            model: A ``transformers`` causal LM (anything with ``generate``).
            tokenizer: Its tokenizer; given a chat template if it has none.
            max_new_tokens: Most tokens generated per completion, >= 1.
            temperature: Softmax temperature, >= 0; 0 means greedy decoding.
            top_p: Nucleus sampling mass in (0, 1]; 1 turns it off.
            top_k: Keep only the k most likely tokens, >= 0; 0 turns it off.
            do_sample: Sample (True) or decode greedily (False).
            batch_size: Conversations per ``generate`` call, >= 1.
            stop: Stop strings; the text is cut right after the first one, which is kept.
            seed: Seed of the sampling RNG; ``None`` uses torch's global RNG.
            share_prefill: Run the prefill of a prompt that several rows of a micro-batch
                share (a GRPO group's first turn) once, and give every row a copy of its KV
                cache; the same distribution up to float rounding.
            prefix_cache_tokens: Most tokens whose KV cache is kept between calls, >= 0 (0 turns
                the cache off). ``None``: 32,768 on the CPU (Gemma 3 270M needs 36 KiB per
                token in float32, 18 KiB in bfloat16: at most 1.2 GB); on CUDA, as many as fit
                in an eighth of the device's memory (Gemma 3 270M in bfloat16 on an 80 GB
                GPU: about 550,000 tokens, a 256-episode GRPO batch of 600-token conversations
                twice over), at least 32,768.
            decoder: ``"textgym"`` (the decode loop of :mod:`textgym.policies.decoding`, with the
                prefix cache) or ``"transformers"`` (``model.generate``; no cache across calls,
                kept as the reference implementation and benchmark baseline).
            engine_options: Keyword arguments of the decode engine,
                :class:`~textgym.policies.slot_decoder.SlotDecoder` (``cuda_graphs``,
                ``sync_every``, ``sdpa_backends``, ``bucketed``); its defaults suit the device.

        Raises:
            ValueError: for an argument out of range.
        """
        check_int("max_new_tokens", max_new_tokens, low=1)
        check_sampling(temperature, top_p)
        check_int("top_k", top_k, low=0)  # 0 turns it off
        check_int("batch_size", batch_size, low=1)
        if prefix_cache_tokens is None:
            prefix_cache_tokens = _default_prefix_cache_tokens(model)
        check_int("prefix_cache_tokens", prefix_cache_tokens, low=0)
        if decoder not in ("textgym", "transformers"):
            raise ValueError(f"Expected decoder 'textgym' or 'transformers', got {decoder!r}")
        self.share_prefill = bool(share_prefill)
        self.decoder = decoder
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        stop = stop_string_list(stop)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"Expected seed to be an int or None, got {seed!r}")

        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = top_k
        self.do_sample = bool(do_sample) and temperature > 0
        self.batch_size = batch_size
        self.stop = stop
        self.seed = seed
        self.tokens_generated = 0
        self._engine: SlotDecoder | None = None
        self.engine_options = dict(engine_options or {})

        ensure_chat_template(tokenizer)
        self.chat_tokenizer = ChatTokenizer(tokenizer)
        self.eos_token_ids = stop_token_ids(tokenizer, model)
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.eos_token_ids or [0])[0]
        self._seeds = random.Random(seed) if seed is not None else None

    @classmethod
    def from_name(
        cls,
        model: str = "tiny",
        *,
        dtype: Any = None,
        device: Any = None,
        cache_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> HFPolicy:
        """Load a model with :func:`textgym.models.load_model` and wrap it.

        Args:
            model: ``"tiny"``, ``"gemma-3-270m"``, a Hugging Face id or a local directory.
            dtype: Optional torch dtype of the weights.
            device: Optional device for the model.
            cache_dir: Folder of converted models (see ``load_model``).
            **kwargs: Sampling arguments of :class:`HFPolicy` (``max_new_tokens``, ``seed``...).
        """
        loaded_model, tokenizer = load_model(model, dtype=dtype, device=device, cache_dir=cache_dir)
        return cls(loaded_model, tokenizer, **kwargs)

    def __repr__(self) -> str:
        return (
            f"HFPolicy(model={type(self.model).__name__}, max_new_tokens={self.max_new_tokens}, "
            f"temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, "
            f"do_sample={self.do_sample}, batch_size={self.batch_size}, stop={self.stop!r}, "
            f"seed={self.seed}, decoder={self.decoder!r})"
        )

    def act(
        self, conversations: Sequence[Sequence[Message]], infos: Sequence[Mapping[str, Any]]
    ) -> list[Completion]:
        """Generate one completion per conversation, in order.

        Args:
            conversations: ``N`` chat conversations (lists of ``{"role", "content"}`` messages).
            infos: ``N`` env infos; only ``info.get("tools")`` is read and passed to the chat
                template (templates without tool support ignore it).

        Returns:
            ``N`` completions with ``text``, ``prompt_ids`` ``[P_i]``, ``completion_ids``
            ``[T_i]`` (up to and including the EOS / end-of-turn token or the token that
            completed a stop string; no padding), ``logprobs`` ``[T_i]`` and ``finish_reason``.

        Raises:
            ValueError: ``conversations`` and ``infos`` differ in length.
        """
        if len(conversations) != len(infos):
            raise ValueError(
                f"Expected one info per conversation, got {len(conversations)} conversations "
                f"and {len(infos)} infos"
            )
        prompts = [
            self.prompt_ids(conversation, info)
            for conversation, info in zip(conversations, infos, strict=True)
        ]
        return self.generate(prompts)

    def clear_cache(self) -> None:
        """Free the KV caches kept between calls (e.g. before a training update needs memory)."""
        self.prefix_cache.clear()

    def sampling_state(self) -> object:
        """State of the policy's own sampling RNG (``None`` without ``seed``), for checkpoints."""
        return self._seeds.getstate() if self._seeds is not None else None

    def set_sampling_state(self, state: object) -> None:
        """Restore :meth:`sampling_state` (a resumed run then samples as the original would)."""
        if state is not None and self._seeds is not None:
            self._seeds.setstate(state)  # type: ignore[arg-type]

    def prompt_ids(self, messages: Sequence[Message], info: Mapping[str, Any]) -> list[int]:
        """Render a conversation with the chat template; return its prompt ids ``[P]``.

        ``info.get("tools")`` is passed to the template (templates without tools ignore it).
        """
        return self.chat_tokenizer.prompt(messages, tools=info.get("tools"))

    def continuation_ids(
        self,
        history: Sequence[Message],
        completion: Completion,
        new_messages: Sequence[Message],
        info: Mapping[str, Any],
    ) -> list[int]:
        """Ids ``[C]`` after ``completion``: end of its turn, ``new_messages``, next prompt.

        See :meth:`textgym.tokens.ChatTokenizer.continuation`.
        """
        return self.chat_tokenizer.continuation(
            history, completion.completion_ids or [], new_messages, tools=info.get("tools")
        )

    def generate(self, prompts: Sequence[Sequence[int]]) -> list[Completion]:
        """Sample one completion per prompt of token ids, ``batch_size`` prompts per call.

        Args:
            prompts: ``N`` lists of token ids ``[P_i]`` (no padding).

        Returns:
            ``N`` completions, as :meth:`act` describes.
        """
        prompts = [list(map(int, ids)) for ids in prompts]
        if any(not ids for ids in prompts):
            raise ValueError("Expected every prompt to hold at least one token, got an empty one")
        completions: list[Completion] = []
        was_training = getattr(self.model, "training", False)
        self.model.eval()
        sample = self._decode_batch if self.decoder == "textgym" else self._generate
        if self.decoder == "textgym":
            self.prefix_cache.validate(self.model)
        try:
            for start in range(0, len(prompts), self.batch_size):
                completions.extend(sample(prompts[start : start + self.batch_size]))
        finally:
            if was_training:
                self.model.train()
            _return_free_heap()
        self.tokens_generated += sum(len(c.completion_ids or ()) for c in completions)
        return completions

    def _decode_batch(self, prompts: list[list[int]]) -> list[Completion]:
        """One micro-batch through :func:`textgym.policies.decoding.decode`."""
        generator = None
        if self._seeds is not None:
            generator = torch.Generator(self.model.device)
            generator.manual_seed(self._seeds.getrandbits(63))
        process = None
        if self.do_sample:
            settings = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
            process = functools.partial(process_logits, **settings)
        rows = decode(
            self.model,
            prompts,
            max_new_tokens=self.max_new_tokens,
            end_ids=self.eos_token_ids,
            pad_id=self.pad_token_id,
            process=process,
            generator=generator,
            is_stopped=self._hits_stop if self.stop else None,
            prefix_cache=self.prefix_cache if self.prefix_cache.max_tokens else None,
            share_prefill=self.share_prefill,
            engine=self.engine,
        )
        return [
            self._completion(ids, row.ids, row.logprobs)
            for ids, row in zip(prompts, rows, strict=True)
        ]

    @property
    def engine(self) -> SlotDecoder:
        """The model's decode engine (slot buffers, CUDA graphs, counters in ``.stats``); built
        again when the model moved to another device or dtype."""
        engine = self._engine
        dtype = next(self.model.parameters()).dtype
        if engine is None or engine.device != self.model.device or engine.dtype != dtype:
            engine = self._engine = SlotDecoder(self.model, **self.engine_options)
        return engine

    def _hits_stop(self, ids: list[int]) -> bool:
        return cut_at_stop(self._decode(ids), self.stop)[1]

    def _generate(self, prompts: list[list[int]]) -> list[Completion]:
        """One ``model.generate`` call over a micro-batch (``decoder="transformers"``,
        :func:`textgym.policies.hf_generate.generate_batch`)."""
        seed = self._seeds.getrandbits(63) if self._seeds is not None else None
        options: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.do_sample,
            "eos_token_id": self.eos_token_ids or None,
            "pad_token_id": self.pad_token_id,
            "use_cache": True,
        }
        if self.do_sample:
            options.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        generated, logprobs = generate_batch(
            self.model,
            self.tokenizer,
            prompts,
            seed,
            options=options,
            stop=self.stop,
            share_prefill=self.share_prefill,
        )
        return [
            self._completion(ids, row_ids, row_logprobs)
            for ids, row_ids, row_logprobs in zip(prompts, generated, logprobs, strict=True)
        ]

    def _completion(
        self, prompt_ids: list[int], ids: list[int], logprobs: list[float]
    ) -> Completion:
        """Trim one row ``[S]`` of generated ids at its EOS or stop string and decode it."""
        end, finish = len(ids), "length"
        eos = set(self.eos_token_ids)
        for position, token in enumerate(ids):
            if token in eos:
                end, finish = position + 1, "stop"
                break
        cut = stop_token_end(ids, end, self._decode, self.stop) if self.stop else None
        if cut is not None:
            end, finish = cut, "stop"
        text = self._decode(ids[:end])
        if self.stop:
            text = cut_at_stop(text, self.stop)[0]
        return Completion(
            text=text,
            prompt_ids=prompt_ids,
            completion_ids=ids[:end],
            logprobs=logprobs[:end],
            finish_reason=finish,  # type: ignore[arg-type]
        )

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
