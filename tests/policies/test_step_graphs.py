"""The CUDA-graph path of the decode engine, run on the CPU with the capture replaced.

A fake ``torch.cuda`` graph API stands in for the real one: capturing runs the step once and
remembers it, replaying runs it again on the static inputs and copies the result into the
captured logits tensor (what a replayed graph does), and memory pools follow the rule of
PyTorch's caching allocator that broke the first GPU run (H200, torch 2.11): a pool whose graphs
are all gone keeps a use count of 0, and capturing into it again fails an internal assert. The
engine must decode exactly what its eager path decodes, keep graphs on across turns whose
caches grow, and capture few graphs.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.policies.hf import HFPolicy  # noqa: E402
from textgym.policies.kv_slots import WIDTH_QUANTUM, graph_width  # noqa: E402
from textgym.rollout import rollout  # noqa: E402

pytestmark = pytest.mark.llm


class _FakeCuda:
    """Graph capture and replay, streams and pools of ``torch.cuda``, emulated on the CPU."""

    def __init__(self) -> None:
        self.use_counts: dict[int, int] = {}
        self.pool_ids = itertools.count()
        self.capturing: _FakeGraph | None = None
        self.replays = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        class Stream:
            def wait_stream(self, other):
                pass

        class CUDAGraph(_FakeGraph):
            def __init__(self):
                super().__init__(fake)

        @contextlib.contextmanager
        def graph(g, pool=None):
            g.begin(pool)
            fake.capturing = g
            try:
                yield
            finally:
                fake.capturing = None

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(self.pool_ids))
        monkeypatch.setattr(torch.cuda, "CUDAGraph", CUDAGraph)
        monkeypatch.setattr(torch.cuda, "graph", graph)

    def wrap(self, step):
        """``step`` as the engine's graph step, recorded by the graph being captured."""

        def recorded(rows):
            logits = step(rows)
            if self.capturing is not None:
                self.capturing.body = (step, rows, logits)
            return logits

        return recorded


class _FakeGraph:
    def __init__(self, fake: _FakeCuda) -> None:
        self.fake = fake
        self.pool = None
        self.body = None

    def begin(self, pool) -> None:
        counts = self.fake.use_counts
        if pool in counts and counts[pool] <= 0:  # CUDACachingAllocator's beginAllocateToPool
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED (fake)")
        counts[pool] = counts.get(pool, 0) + 1
        self.pool = pool

    def replay(self) -> None:
        step, rows, logits = self.body
        logits.copy_(step(rows))
        self.fake.replays += 1

    def __del__(self) -> None:
        if self.pool is not None:
            self.fake.use_counts[self.pool] -= 1


def _episodes(model, tokenizer, options, fake=None):
    """Three rollouts of three tic-tac-toe episodes on one engine (its cache grows in the
    first, graphs are kept between them); the captures of each rollout."""
    policy = HFPolicy(
        model,
        tokenizer,
        max_new_tokens=8,
        temperature=0.0,
        batch_size=3,
        stop=["</move>"],
        engine_options=options,
    )
    if fake is not None:
        policy.engine.graphs.step = fake.wrap(policy.engine.graphs.step)
    make = lambda: gym.make("textgym/TicTacToe-v0", prompt_style="compact")  # noqa: E731
    trajectories, captures = [], []
    for first in (0, 3, 6):
        before = policy.engine.stats.graph_captures
        trajectories += rollout(make, policy, range(first, first + 3), batch_size=3)
        captures.append(policy.engine.stats.graph_captures - before)
    return trajectories, policy.engine, captures


def test_graph_path_decodes_what_the_eager_path_does_and_stays_on(sharp, monkeypatch):
    model, tokenizer = sharp
    eager, _, _ = _episodes(
        model, tokenizer, {"bucketed": True, "sync_every": 4, "cuda_graphs": False}
    )
    fake = _FakeCuda()
    fake.install(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "CUDA graphs turned off" fails
        graphed, engine, captures = _episodes(
            model, tokenizer, {"bucketed": True, "sync_every": 4, "cuda_graphs": True}, fake
        )
    assert engine.graphs.enabled, "a capture failed and graphs turned off"
    for ours, reference in zip(graphed, eager, strict=True):
        assert ours.token_ids == reference.token_ids
        assert ours.token_logprobs == pytest.approx(reference.token_logprobs, abs=1e-4, rel=1e-4)
    stats = engine.stats
    assert fake.replays == stats.decode_steps + stats.graph_captures  # + one check per capture
    assert stats.graph_captures == sum(captures) > 0 and stats.graph_capture_s > 0
    # Widths and the cache grow geometrically and graphs are kept between calls: once the
    # cache has grown, a rollout like the earlier ones captures nothing new.
    assert captures[-1] == 0, captures


def test_a_grown_cache_starts_a_fresh_pool(sharp, monkeypatch):
    """The H200 failure: after the cache grows (graphs dropped), the next capture must not go
    into the old pool, whose use count is 0."""
    model, tokenizer = sharp
    fake = _FakeCuda()
    fake.install(monkeypatch)
    policy = HFPolicy(
        model, tokenizer, max_new_tokens=4, temperature=0.0, engine_options={"cuda_graphs": True}
    )
    policy.engine.graphs.step = fake.wrap(policy.engine.graphs.step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "CUDA graphs turned off" fails
        policy.generate([[256, 40, 41, 257]])
        policy.generate([[256, *range(40, 40 + 2 * WIDTH_QUANTUM), 257]])  # a wider cache
    assert policy.engine.graphs.enabled
    assert policy.engine.stats.graph_captures == 2
    assert len(fake.use_counts) == 2  # two pools: the dropped one and the fresh one


@pytest.mark.parametrize(
    ("needed", "width"),
    [(1, 64), (64, 64), (65, 128), (129, 192), (193, 256), (257, 384), (385, 512), (700, 768)],
)
def test_graph_widths_grow_geometrically(needed, width):
    assert graph_width(needed) == width
    assert graph_width(needed) < 1.5 * max(needed, WIDTH_QUANTUM) + WIDTH_QUANTUM
