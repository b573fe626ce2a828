"""The update at its floor: no host read inside a micro-batch, no attention mask on a
right-padded batch, and the same losses and gradients as a plain reference computation.

The reference here is what a reader would write first: the full-vocabulary logits of
``model(input_ids, attention_mask)`` (the mask passed), ``log_softmax``, a gather of the targets
and the boolean loss mask. The update's path (flat indices found on the host, the decoder run
without a mask, the LM head only at loss positions, chunked) must give the same per-token
log-probs, policy loss and parameter gradients to float32 rounding (atol 2e-5, rtol 1e-4).
"""

from __future__ import annotations

import copy
import os
import traceback

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import textgym  # noqa: E402,F401
from textgym.algos import batches, decoder_passes, grpo_update  # noqa: E402
from textgym.algos.losses import loss_normalizer, policy_loss  # noqa: E402

from .test_grpo import batch_of_trajectories, learner_for, small  # noqa: E402,F401
from .test_packing import _model, random_batch  # noqa: E402

pytestmark = pytest.mark.llm

MODELS = ["tiny", "gemma3-sdpa", "gemma3-eager"]  # Gemma 3: soft-capping, a window of 4


def reference_log_probs(model, batch: batches.TokenBatch) -> torch.Tensor:
    """``[B, L-1]`` float32 log-probs of the targets from full logits, the mask passed."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits.float(), dim=-1)  # [B, L-1, V]
    picked = logp.gather(-1, batch.targets[..., None]).squeeze(-1)  # [B, L-1]
    return torch.where(batch.loss_mask > 0, picked, torch.zeros_like(picked))


def loss_and_grads(model, batch, logp_fn):
    """The DAPO loss of the batch (advantages of both signs, ratios away from 1) and the
    parameter gradients, from the log-probs that ``logp_fn(model, batch)`` gives."""
    model.zero_grad(set_to_none=True)
    logp = logp_fn(model, batch)  # [B, L-1]
    old = logp.detach() - 0.05 * torch.arange(logp.shape[1]).remainder(3)[None]  # r != 1
    advantages = torch.linspace(-1.0, 1.0, len(batch))  # [B]
    normalizer = loss_normalizer("dapo", batch.loss_mask, 40)
    loss, _ = policy_loss(
        logp, old, advantages, batch.loss_mask, loss_type="dapo", normalizer=normalizer
    )
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), loss.detach(), grads


def grouped_batch(seed: int, lengths=(30, 17, 25, 30, 21, 12)) -> batches.TokenBatch:
    """Two GRPO-like groups of three: each group's rows share a 10-token prompt (no loss),
    then completions of varied lengths with loss on most tokens."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 256, (10,), generator=gen).tolist() for _ in range(2)]
    ids, masks = [], []
    for i, n in enumerate(lengths):
        tail = torch.randint(0, 256, (n - 10,), generator=gen).tolist()
        ids.append(prompts[i // 3] + tail)
        masks.append([0] * 10 + (torch.rand(n - 10, generator=gen) < 0.8).long().tolist())
    return batches.make_token_batch(ids, masks, pad_token_id=258)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("layout", ["padded", "share_prefix"])
def test_update_path_equals_full_logit_reference(name, layout):
    model = _model(name)
    batch = random_batch(3) if layout == "padded" else grouped_batch(3)
    assert batch.positions.right_padded  # so the update's pass runs without a mask
    assert (batch.attention_mask == 0).any()  # and there is padding it could have attended to
    if layout == "share_prefix":  # the shared pass really runs (it is not the plain one)
        assert decoder_passes.shared_prefix_hidden(model.get_decoder(), batch) is not None
    options = {"chunk_size": 7, "share_prefix": layout == "share_prefix"}
    ours = loss_and_grads(model, batch, lambda m, b: batches.sequence_log_probs(m, b, **options)[0])
    plain = loss_and_grads(model, batch, reference_log_probs)
    for got, want in zip(ours, plain):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert plain[2].abs().sum() > 0 and plain[1] != 0


@pytest.mark.parametrize("name", ["tiny", "gemma3-sdpa"])
def test_padded_pass_without_mask_needs_right_padding(name):
    """Real positions of the maskless pass equal the masked one's; a pad placed before real
    tokens (left padding) would be attended to without the mask: there the mask is kept."""
    model = _model(name)
    batch = random_batch(4)
    decoder = model.get_decoder()
    real = batch.attention_mask.bool()
    with torch.no_grad():
        masked = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        ours = decoder_passes.padded_hidden(decoder, batch)  # [B, L-1, H]
        left = _left_padded(batch)
        left_ours = decoder_passes.padded_hidden(decoder, left)
        left_masked = decoder(input_ids=left.input_ids, attention_mask=left.attention_mask)
        left_unmasked = decoder(input_ids=left.input_ids)
    torch.testing.assert_close(ours[real], masked.last_hidden_state[real], atol=2e-5, rtol=1e-4)
    left_real = left.attention_mask.bool()
    assert not left.positions.right_padded
    torch.testing.assert_close(left_ours, left_masked.last_hidden_state, atol=0, rtol=0)
    gap = (left_unmasked.last_hidden_state - left_masked.last_hidden_state)[left_real]
    assert gap.abs().max() > 1e-3  # the mask matters there: the check above is not vacuous


def _left_padded(batch: batches.TokenBatch) -> batches.TokenBatch:
    """The batch with each row's padding moved before its tokens."""
    lengths = batch.attention_mask.sum(dim=1)
    width = batch.input_ids.shape[1]
    index = (torch.arange(width)[None] - (width - lengths)[:, None]) % width  # [B, L-1]
    parts = [t.gather(1, index) for t in batch._tensors()]
    return batches.TokenBatch(*parts)


@pytest.mark.parametrize(
    ("mask", "right_padded"),
    [
        ([[1, 1, 1], [1, 1, 0], [1, 0, 0]], True),
        ([[1, 1, 1], [0, 1, 1]], False),  # left padding
        ([[1, 0, 1]], False),  # a hole
        ([[0, 0, 0], [1, 1, 1]], True),  # an empty row attends to nothing
        ([[1, 1, 1]], True),  # no padding at all
    ],
)
def test_batch_positions(mask, right_padded):
    attention = torch.tensor(mask)
    loss = attention.float() * torch.tensor([0.0, 1.0, 1.0])  # the first column is a prompt
    where = batches.batch_positions(attention, loss)
    assert where.right_padded is right_padded
    flat = attention.flatten()
    assert where.real.tolist() == flat.nonzero().flatten().tolist()
    assert where.scored.tolist() == (loss.flatten() > 0).nonzero().flatten().tolist()
    assert where.real[where.scored_in_real].tolist() == where.scored.tolist()


def test_batch_positions_refuse_loss_on_padding():
    with pytest.raises(ValueError, match=r"padding position \(0, 2\).*set loss_mask"):
        batches.batch_positions(torch.tensor([[1, 1, 0]]), torch.tensor([[0.0, 1.0, 1.0]]))


def test_a_moved_batch_carries_positions_found_before_the_move(monkeypatch):
    batch = random_batch(0)
    calls = []
    real = batches.batch_positions
    monkeypatch.setattr(batches, "batch_positions", lambda *a: calls.append(a) or real(*a))
    moved = batch.to(torch.device("cpu"))
    assert len(calls) == 1 and moved.positions.scored.tolist() == batch.positions.scored.tolist()
    moved.positions  # noqa: B018  (cached: not found again)
    assert len(calls) == 1


@pytest.mark.parametrize("bad", [-100, -1])
def test_make_token_batch_refuses_negative_ids_on_the_host(bad):
    with pytest.raises(ValueError, match=f"got {bad}; replace ignore-index"):
        batches.make_token_batch([[1, 2, bad]], [[0, 1, 1]])


# ------------------------------------------------------------------------------------------
# Host syncs inside a micro-batch
# ------------------------------------------------------------------------------------------

_aten = torch.ops.aten
#: Ops that read a tensor's values back to the host (on an accelerator: wait for it).
_SYNC_OPS = {
    _aten._local_scalar_dense.default,  # .item(), float(), int(), bool()
    _aten.is_nonzero.default,
    _aten.equal.default,
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten._unique2.default,
    _aten.unique_dim.default,
    _aten.unique_consecutive.default,
}


#: Where transformers reads back, once per forward, whatever its inputs: `.all()` on the
#: position ids in find_packed_sequence_indices (an attention mask would cost another).
_TRANSFORMERS_MASKS = os.path.join("transformers", "masking_utils.py")


class HostReads(TorchDispatchMode):
    """Records every op that reads tensor values back to the host, boolean-mask indexing
    included (``aten.index`` with a bool index finds its count on the host); in ``masks``
    those made inside transformers' mask building, in ``seen`` all others."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.masks: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        bool_index = func in (_aten.index.Tensor, _aten.index_put.default) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]
        )
        if func in _SYNC_OPS or bool_index:
            files = [frame.filename for frame in traceback.extract_stack()]
            inside = any(f.endswith(_TRANSFORMERS_MASKS) for f in files)
            (self.masks if inside else self.seen).append(str(func))
        return func(*args, **(kwargs or {}))


def test_host_reads_counts_the_reads_it_must():
    x = torch.randn(5, requires_grad=True)
    with HostReads() as reads:
        y = x * 2
        y[y > 0].sum().backward()
        float(y.detach().sum())
    # the forward's mask, its backward's (so backward passes are watched too), the float
    assert reads.seen == [
        "aten.index.Tensor",
        "aten.index_put.default",
        "aten._local_scalar_dense.default",
    ]


CASES = {
    "padded": {"share_prefix": False},  # the CUDA path (share_prefix is CPU-only)
    "padded_kl_two_iterations": {"share_prefix": False, "beta": 0.05, "num_iterations": 2},
    "packed": {"micro_batch_tokens": 64},
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_host_read_inside_a_micro_batch(
    tmp_path,
    monkeypatch,
    batch_of_trajectories,  # noqa: F811
    case,
):
    """The forward, the loss and the backward of every micro-batch read nothing back; the
    metrics are read once per optimizer step, after the loop. What is left is transformers'
    own read, one per forward: ``find_packed_sequence_indices`` checks the position ids it
    builds (padded) or is given (packed) whenever no attention mask is passed; passing one
    would cost a read too (``fast_all`` of the mask), so no call of the public API has none.
    On CUDA it waits once per micro-batch, at the start of its forward, for the queue."""
    model, trajs = batch_of_trajectories
    config = small(tmp_path, micro_batch_size=3, **CASES[case])
    learner = learner_for(copy.deepcopy(model).train(), config)
    learner.reference = copy.deepcopy(model).eval() if config.beta else None
    reads, passes = HostReads(), []
    backward, tolist = grpo_update.backward, torch.Tensor.tolist

    def no_tolist(self):  # tolist reads without going through the dispatcher
        reads.seen.append("tolist")
        return tolist(self)

    def watched(*args, **kwargs):
        passes.append(1)
        with reads, monkeypatch.context() as patch:
            patch.setattr(torch.Tensor, "tolist", no_tolist)
            return backward(*args, **kwargs)

    monkeypatch.setattr(grpo_update, "backward", watched)
    metrics = grpo_update.update(learner, trajs)
    assert metrics["skipped_update"] == 0.0 and metrics["loss_tokens"] > 0
    assert len(passes) >= 2 * config.num_iterations  # several micro-batches per step
    assert reads.seen == []
    assert set(reads.masks) <= {"aten._local_scalar_dense.default", "aten.is_nonzero.default"}
    assert len(reads.masks) <= len(passes), reads.masks  # one per forward at most
