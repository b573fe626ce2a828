"""Tests of textgym.algos.losses against plain-Python references: values, gradients, stats.

Every loss variant is checked against a reference written as loops over Python floats on a
hand-made batch with uneven masks, both signs of advantage, and ratios inside and outside the
clip range; gradients are checked against the hand-derived formulas. Further tests cover exact
gradient accumulation, advantage properties (hypothesis), k3 KL, and chunked log-probs.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from textgym.algos.advantages import group_advantages, zero_variance_groups  # noqa: E402
from textgym.algos.losses import LOSS_TYPES, k3_kl, loss_normalizer, policy_loss  # noqa: E402
from textgym.algos.token_log_probs import selected_log_probs  # noqa: E402

pytestmark = pytest.mark.llm

# ------------------------------------------------------------------------------------------
# The hand-made batch: B = 3 sequences, T = 4 positions, 3 + 2 + 4 = 9 loss tokens.
# ------------------------------------------------------------------------------------------

MASK = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
LOGP = [[-1.0, -0.5, -2.0, -0.01], [-0.3, -1.2, -0.7, -0.9], [-0.8, -1.5, -0.1, -2.2]]
# Ratios r = exp(logp - old_logp) on mask tokens; padding gets a huge ratio (e^40) that must
# be ignored. With eps 0.2/0.2 the clip is active on (0,0) r=1.5 A>0, (1,0) r=0.6 A<0 and
# (2,1) r=1.25 A>0; (0,1) r=0.7 A>0 and (1,1) r=1.4 A<0 are outside the range but unclipped.
RATIOS = [[1.5, 0.7, 1.1, None], [0.6, 1.4, None, None], [1.0, 1.25, 0.95, 1.19]]
ADV = [1.0, -0.5, 2.0]
REF = [[-1.2, -0.4, -1.0, -3.0], [-0.3, -2.0, -0.1, -0.2], [-0.5, -1.5, -0.6, -1.9]]
MAX_LEN = 5  # L, the generation limit for Dr. GRPO's constant normaliser B * L
HAND_NORMALIZER = {"grpo": 3.0, "gspo": 3.0, "dapo": 9.0, "cispo": 9.0, "dr_grpo": 15.0}


def _old_logp() -> list[list[float]]:
    """old_logp = logp - log(r) on mask tokens; logp - 40 on padding (ratio e^40, ignored)."""
    rows = zip(LOGP, RATIOS, strict=True)
    return [
        [lp - math.log(r) if r is not None else lp - 40.0 for lp, r in zip(lr, rr, strict=True)]
        for lr, rr in rows
    ]


def _tensors(dtype=torch.float64):
    """The hand-made batch as tensors; logp is a leaf that requires grad."""
    logp = torch.tensor(LOGP, dtype=dtype, requires_grad=True)  # [3, 4]
    old = torch.tensor(_old_logp(), dtype=dtype)  # [3, 4]
    adv = torch.tensor(ADV, dtype=dtype)  # [3]
    mask = torch.tensor(MASK, dtype=torch.bool)  # [3, 4]
    ref = torch.tensor(REF, dtype=dtype)  # [3, 4]
    return logp, old, adv, mask, ref


# ------------------------------------------------------------------------------------------
# The reference: plain loops over floats, written from the papers' formulas.
# ------------------------------------------------------------------------------------------


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def _token_term(loss_type, lp, old, adv, eps_low, eps_high, seq_ratio):
    """(term, d term / d logp, clip active) of one mask token."""
    if loss_type == "cispo":
        r = math.exp(lp - old)
        w = min(r, 1.0 + eps_high)
        return -w * adv * lp, -w * adv, r > 1.0 + eps_high
    r = seq_ratio if loss_type == "gspo" else math.exp(lp - old)
    unclipped = r * adv
    clipped = _clip(r, 1.0 - eps_low, 1.0 + eps_high) * adv
    if unclipped <= clipped:
        return -unclipped, -r * adv, False
    return -clipped, 0.0, True


def reference(loss_type, eps_low=0.2, eps_high=0.2, beta=0.0):
    """Loss, gradient w.r.t. logp ([B][T] floats) and stats of the hand-made batch."""
    old = _old_logp()
    batch, length = len(LOGP), len(LOGP[0])
    norm = HAND_NORMALIZER[loss_type]
    loss, grad = 0.0, [[0.0] * length for _ in range(batch)]
    stats = {"clipped_tokens": 0.0, "tokens": 0.0, "ratio_sum": 0.0, "kl_sum": 0.0}
    for i in range(batch):
        tokens = [t for t in range(length) if MASK[i][t]]
        n = len(tokens)
        seq_ratio = math.exp(sum(LOGP[i][t] - old[i][t] for t in tokens) / n)
        per_token = 1.0 / n if loss_type in ("grpo", "gspo") else 1.0
        for t in tokens:
            lp = LOGP[i][t]
            term, dterm, active = _token_term(
                loss_type, lp, old[i][t], ADV[i], eps_low, eps_high, seq_ratio
            )
            d = REF[i][t] - lp
            kl = math.exp(d) - d - 1.0
            term += beta * kl
            dterm += beta * (1.0 - math.exp(d))
            loss += term * per_token / norm
            grad[i][t] = dterm * per_token / norm
            stats["clipped_tokens"] += active
            stats["tokens"] += 1
            stats["ratio_sum"] += seq_ratio if loss_type == "gspo" else math.exp(lp - old[i][t])
            stats["kl_sum"] += kl
    return loss, grad, stats


# ------------------------------------------------------------------------------------------
# policy_loss against the reference
# ------------------------------------------------------------------------------------------

CASES = [  # (loss_type, eps_low, eps_high, expected clipped tokens, counted by hand above)
    ("grpo", 0.2, 0.2, 3),
    ("dapo", 0.2, 0.28, 2),  # clip-higher: r=1.25 is no longer clipped
    ("dr_grpo", 0.2, 0.2, 3),
    # sequence ratios 1.049, 0.917, 1.090: only row 2 (4 tokens, A>0) passes 1 + 0.06
    ("gspo", 0.1, 0.06, 4),
    ("cispo", 0.2, 0.2, 3),  # weights truncated where r > 1.2: 1.5, 1.4, 1.25
]


@pytest.mark.parametrize(("loss_type", "eps_low", "eps_high", "clipped"), CASES)
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_policy_loss_matches_reference(loss_type, eps_low, eps_high, clipped, beta):
    logp, old, adv, mask, ref = _tensors()
    loss, stats = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type=loss_type,
        normalizer=HAND_NORMALIZER[loss_type],
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        ref_logp=ref,
        beta=beta,
    )
    loss.backward()
    want_loss, want_grad, want_stats = reference(loss_type, eps_low, eps_high, beta)
    assert loss.item() == pytest.approx(want_loss, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor(want_grad, dtype=torch.float64))
    assert stats["clipped_tokens"] == clipped == want_stats["clipped_tokens"]
    assert stats["tokens"] == 9.0
    assert stats["ratio_sum"] == pytest.approx(want_stats["ratio_sum"], rel=1e-10)
    assert stats["kl_sum"] == pytest.approx(want_stats["kl_sum"], rel=1e-10)


def test_clipping_really_happens_in_the_reference():
    """Guard the fixture: some tokens get zero gradient, others not (grpo)."""
    _, grad, _ = reference("grpo")
    zero = [(i, t) for i in range(3) for t in range(4) if MASK[i][t] and grad[i][t] == 0.0]
    assert zero == [(0, 0), (1, 0), (2, 1)]


@pytest.mark.parametrize(("loss_type", "normalizer"), sorted(HAND_NORMALIZER.items()))
def test_loss_normalizer_by_hand(loss_type, normalizer):
    mask = torch.tensor(MASK, dtype=torch.bool)
    assert loss_normalizer(loss_type, mask, MAX_LEN) == normalizer
    assert loss_normalizer(loss_type, mask.float(), MAX_LEN) == normalizer
    assert loss_normalizer(loss_type, torch.zeros(0, 4), MAX_LEN) == 1.0  # guarded against 0


def test_stats_without_ref_have_zero_kl():
    logp, old, adv, mask, _ = _tensors()
    _, stats = policy_loss(logp, old, adv, mask, loss_type="grpo", normalizer=3.0)
    assert stats["kl_sum"] == 0.0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("with_ref", [False, True])
def test_stats_stay_on_the_device_as_detached_tensors(loss_type, with_ref):
    """The caller sums them on the device and reads them once per optimizer step, so none may
    be a Python float (a read back to the host per micro-batch) or carry a graph."""
    logp, old, adv, mask, ref = _tensors(torch.float32)
    _, stats = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type=loss_type,
        normalizer=3.0,
        ref_logp=ref if with_ref else None,
    )
    assert sorted(stats) == ["clipped_tokens", "kl_sum", "ratio_sum", "tokens"]
    for name, value in stats.items():
        assert isinstance(value, torch.Tensor) and value.ndim == 0, name
        assert value.dtype == torch.float32 and value.device == logp.device, name
        assert not value.requires_grad, name
    assert float(stats["tokens"]) == 9.0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_padding_with_nan_is_ignored(loss_type):
    logp, old, adv, mask, ref = _tensors()
    nan_logp = logp.detach().clone().masked_fill(~mask, float("nan")).requires_grad_()
    nan_old = old.masked_fill(~mask, float("inf"))
    loss, _ = policy_loss(
        nan_logp,
        nan_old,
        adv,
        mask,
        loss_type=loss_type,
        normalizer=3.0,
        ref_logp=ref.masked_fill(~mask, float("nan")),
        beta=0.1,
    )
    loss.backward()
    clean, _ = policy_loss(
        logp, old, adv, mask, loss_type=loss_type, normalizer=3.0, ref_logp=ref, beta=0.1
    )
    assert loss.item() == pytest.approx(clean.item(), rel=1e-12)
    assert torch.isfinite(nan_logp.grad).all()
    assert (nan_logp.grad[~mask] == 0).all()


@pytest.mark.parametrize("loss_type", ["grpo", "gspo"])
def test_empty_sequence_contributes_nothing(loss_type):
    logp, old, adv, mask, _ = _tensors()
    empty = torch.zeros(1, 4, dtype=torch.bool)  # [1, 4]
    padded_mask = torch.cat([mask, empty])  # [4, 4]
    padded_logp = torch.cat([logp.detach(), torch.full((1, 4), -1.0, dtype=torch.float64)])
    padded_old = torch.cat([old, torch.full((1, 4), -3.0, dtype=torch.float64)])
    padded_adv = torch.cat([adv, torch.tensor([5.0], dtype=torch.float64)])
    full, _ = policy_loss(
        padded_logp, padded_old, padded_adv, padded_mask, loss_type=loss_type, normalizer=3.0
    )
    part, _ = policy_loss(logp, old, adv, mask, loss_type=loss_type, normalizer=3.0)
    assert full.item() == pytest.approx(part.item(), rel=1e-12)


# ------------------------------------------------------------------------------------------
# Gradient accumulation is exact with the full-batch normaliser
# ------------------------------------------------------------------------------------------


def _random_batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(8, 6, generator=gen) * 3.0  # [8, 6] float32
    old = logp + 0.4 * torch.randn(8, 6, generator=gen)  # [8, 6] float32
    ref = logp + 0.3 * torch.randn(8, 6, generator=gen)  # [8, 6] float32
    mask = torch.rand(8, 6, generator=gen) < 0.7  # [8, 6] bool
    mask[3] = False  # one sequence with no loss tokens
    adv = torch.randn(8, generator=gen)  # [8] float32
    return logp, old, ref, mask, adv


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_gradient_accumulation_matches_full_batch(loss_type):
    logp0, old, ref, mask, adv = _random_batch()
    normalizer = loss_normalizer(loss_type, mask, max_completion_tokens=6)
    kwargs = {"loss_type": loss_type, "normalizer": normalizer, "epsilon_high": 0.28, "beta": 0.05}
    grads, totals = {}, {}
    for micro in (8, 4, 2, 1):
        logp = logp0.clone().requires_grad_()
        total, summed = 0.0, {}
        for start in range(0, 8, micro):
            rows = slice(start, start + micro)
            loss, stats = policy_loss(
                logp[rows], old[rows], adv[rows], mask[rows], ref_logp=ref[rows], **kwargs
            )
            loss.backward()
            total += loss.item()
            summed = {k: summed.get(k, 0.0) + float(v) for k, v in stats.items()}
        grads[micro], totals[micro] = logp.grad, (total, summed)
    assert grads[8].abs().sum() > 0
    for micro in (4, 2, 1):
        torch.testing.assert_close(grads[micro], grads[8], rtol=1e-5, atol=1e-7)
        assert totals[micro][0] == pytest.approx(totals[8][0], rel=1e-5, abs=1e-7)
        assert totals[micro][1] == pytest.approx(totals[8][1], rel=1e-5)


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


def _call(**overrides):
    logp, old, adv, mask, _ = _tensors()
    args = {
        "logp": logp,
        "old_logp": old,
        "advantages": adv,
        "mask": mask,
        "loss_type": "grpo",
        "normalizer": 3.0,
    }
    args.update(overrides)
    return policy_loss(**args)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"old_logp": torch.zeros(3, 5)}, r"old_logp of shape \[3, 4\], got \[3, 5\]"),
        ({"mask": torch.ones(2, 4)}, r"mask of shape \[3, 4\], got \[2, 4\]"),
        ({"advantages": torch.zeros(3, 1)}, r"advantages of shape \[3\], got \[3, 1\]"),
        ({"logp": torch.zeros(12)}, r"logp of shape \[B, T\], got \[12\]"),
        ({"ref_logp": torch.zeros(3), "beta": 0.1}, r"ref_logp of shape \[3, 4\], got \[3\]"),
        ({"beta": 0.1}, "ref_logp when beta > 0.*set beta=0"),
        ({"loss_type": "ppo"}, r"loss_type in \['grpo', 'dapo', 'dr_grpo', 'gspo', 'cispo'\]"),
        ({"epsilon_low": -0.1}, "epsilon_low >= 0, got -0.1"),
        ({"normalizer": 0.0}, "normalizer > 0"),
    ],
)
def test_policy_loss_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        _call(**overrides)


def test_loss_normalizer_errors():
    with pytest.raises(ValueError, match="loss_type in"):
        loss_normalizer("ppo", torch.ones(2, 3), 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_completion_tokens >= 1"):
        loss_normalizer("dr_grpo", torch.ones(2, 3), 0)


# ------------------------------------------------------------------------------------------
# Advantages
# ------------------------------------------------------------------------------------------

rewards_and_groups = st.tuples(st.integers(1, 5), st.integers(1, 4)).flatmap(
    lambda gn: st.tuples(
        st.lists(st.floats(-10, 10), min_size=gn[0] * gn[1], max_size=gn[0] * gn[1]),
        st.just(gn[0]),
    )
)


@given(rewards_and_groups, st.sampled_from(["group", "batch", "none"]))
def test_advantages_have_zero_mean_per_group(data, scale):
    values, group_size = data
    adv = group_advantages(torch.tensor(values, dtype=torch.float64), group_size, scale)
    assert adv.shape == (len(values),) and adv.dtype == torch.float64
    means = adv.view(-1, group_size).mean(dim=1)
    torch.testing.assert_close(means, torch.zeros_like(means), atol=1e-9, rtol=0)


@given(rewards_and_groups, st.sampled_from(["group", "batch", "none"]), st.floats(-100, 100))
def test_advantages_are_shift_invariant(data, scale, shift):
    values, group_size = data
    rewards = torch.tensor(values, dtype=torch.float64)
    adv = group_advantages(rewards, group_size, scale)
    shifted = group_advantages(rewards + shift, group_size, scale)
    torch.testing.assert_close(shifted, adv, atol=1e-7, rtol=1e-7)


@given(st.floats(-10, 10), st.integers(1, 6), st.sampled_from(["group", "batch", "none"]))
def test_equal_rewards_give_exactly_zero_advantage(value, group_size, scale):
    rewards = torch.tensor([value] * group_size + list(range(group_size)), dtype=torch.float64)
    adv = group_advantages(rewards, group_size, scale)
    assert (adv[:group_size] == 0).all()
    assert zero_variance_groups(rewards, group_size).tolist() == [True, group_size == 1]


def test_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 3.0, 1.0])  # [8], G = 4
    # group 0: mean 0.5, population std 0.5; group 1: mean 1.5, population std sqrt(0.75)
    group = group_advantages(rewards, 4, "group", eps=0.0)
    want = (
        [1.0, -1.0, -1.0, 1.0]
        + [-0.5 / math.sqrt(0.75)] * 2
        + [1.5 / math.sqrt(0.75)]
        + [-0.5 / math.sqrt(0.75)]
    )
    torch.testing.assert_close(group, torch.tensor(want))
    none = group_advantages(rewards, 4, "none")
    torch.testing.assert_close(none, torch.tensor([0.5, -0.5, -0.5, 0.5, -0.5, -0.5, 1.5, -0.5]))
    batch = group_advantages(rewards, 4, "batch", eps=0.0)
    torch.testing.assert_close(batch, none / math.sqrt(0.75))  # batch mean 1, E[r^2] = 1.75
    flat = group_advantages(torch.tensor([2.0, 2.0, 0.0, 1.0]), 2, "group", eps=0.0)
    assert flat.tolist() == [0.0, 0.0, -1.0, 1.0]  # no 0 / 0 = nan in the flat group
    ints = group_advantages(torch.tensor([0, 1, 1, 1]), 2)
    assert ints.dtype == torch.float32 and ints[2:].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("rewards", "group_size", "message"),
    [
        (torch.zeros(6), 4, "multiple of group_size=4, got 6"),
        (torch.zeros(6), 0, "group_size to be an int >= 1, got 0"),
        (torch.zeros(6), 2.0, "group_size to be an int >= 1"),
        (torch.zeros(2, 3), 3, r"rewards of shape \[B\].*got \[2, 3\]"),
    ],
)
def test_advantage_errors(rewards, group_size, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, group_size)
    with pytest.raises(ValueError, match=message):
        zero_variance_groups(rewards, group_size)


def test_advantage_option_errors():
    with pytest.raises(ValueError, match=r"scale in \['group', 'batch', 'none'\], got 'std'"):
        group_advantages(torch.zeros(4), 2, "std")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eps >= 0"):
        group_advantages(torch.zeros(4), 2, eps=-1.0)


# ------------------------------------------------------------------------------------------
# k3 KL
# ------------------------------------------------------------------------------------------

log_probs = st.floats(-20, 0)


@given(
    st.lists(st.tuples(log_probs, log_probs), min_size=1, max_size=16),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_k3_kl_is_nonnegative_and_zero_on_equal_inputs(pairs, dtype):
    logp = torch.tensor([[p for p, _ in pairs]], dtype=dtype)  # [1, n]
    ref = torch.tensor([[q for _, q in pairs]], dtype=dtype)  # [1, n]
    assert (k3_kl(logp, ref) >= 0).all()
    assert (k3_kl(logp, logp) == 0).all()
    want = [math.exp(q - p) - (q - p) - 1.0 for p, q in pairs]
    got = k3_kl(logp, ref)[0].double()  # [n] float64
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-4, atol=1e-5)


def test_k3_kl_shape_error():
    with pytest.raises(ValueError, match=r"ref_logp of the same shape as logp \[2, 3\]"):
        k3_kl(torch.zeros(2, 3), torch.zeros(3, 2))


# ------------------------------------------------------------------------------------------
# selected_log_probs
# ------------------------------------------------------------------------------------------


def _head_and_inputs(seed: int = 0):
    torch.manual_seed(seed)
    head = torch.nn.Linear(8, 50)  # H = 8, V = 50
    hidden = torch.randn(2, 5, 8, requires_grad=True)  # [B, T, H]
    targets = torch.randint(0, 50, (2, 5))  # [B, T] long
    return head, hidden, targets


def _direct(head, hidden, targets, temperature=1.0, softcap=None):
    logits = head(hidden).float()  # [B, T, V]
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    log_probs = torch.log_softmax(logits / temperature, dim=-1)  # [B, T, V]
    return log_probs.gather(-1, targets[..., None]).squeeze(-1), log_probs  # [B, T]


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000])
@pytest.mark.parametrize(("temperature", "softcap"), [(1.0, None), (0.7, None), (0.7, 2.0)])
def test_selected_log_probs_match_unchunked(chunk_size, temperature, softcap):
    head, hidden, targets = _head_and_inputs()
    logp, entropy = selected_log_probs(
        hidden,
        head,
        targets,
        temperature=temperature,
        chunk_size=chunk_size,
        softcap=softcap,
        with_entropy=True,
    )
    weights = torch.randn(2, 5)  # [B, T], an arbitrary downstream use
    (logp * weights).sum().backward()
    got = (hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone())
    hidden.grad, head.weight.grad, head.bias.grad = None, None, None
    want, log_probs = _direct(head, hidden, targets, temperature, softcap)
    (want * weights).sum().backward()
    assert logp.dtype == torch.float32 and logp.shape == (2, 5)
    torch.testing.assert_close(logp, want)
    for g, w in zip(got, (hidden.grad, head.weight.grad, head.bias.grad), strict=True):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1).detach())
    assert not entropy.requires_grad


def test_softcap_and_temperature_by_hand():
    head = torch.nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[3.0], [0.0]]))  # logits [3, 0] for hidden 1
    hidden, targets = torch.ones(1, 1, 1), torch.zeros(1, 1, dtype=torch.long)
    logp, entropy = selected_log_probs(hidden, head, targets, temperature=0.5, softcap=2.0)
    capped = 2.0 * math.tanh(3.0 / 2.0) / 0.5
    assert logp.item() == pytest.approx(capped - math.log(math.exp(capped) + 1.0), rel=1e-6)
    assert entropy is None


def test_selected_log_probs_recomputes_chunks_in_backward():
    """Checkpointing: the head runs once per chunk forward and again per chunk backward."""
    head, hidden, targets = _head_and_inputs()
    calls = []
    head.register_forward_hook(lambda module, args, output: calls.append(args[0].shape[0]))
    logp, _ = selected_log_probs(hidden, head, targets, chunk_size=4)
    assert calls == [4, 4, 2]
    logp.sum().backward()
    assert sorted(calls) == [2, 2, 4, 4, 4, 4]
    with torch.no_grad():
        calls.clear()
        selected_log_probs(hidden, head, targets, chunk_size=4)
    assert calls == [4, 4, 2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"targets": torch.zeros(2, 4, dtype=torch.long)}, r"targets of shape \[2, 5\]"),
        ({"targets": torch.full((2, 5), -100)}, "ids >= 0 in targets, got -100"),
        ({"hidden": torch.zeros(10, 8)}, r"hidden of shape \[B, T, H\], got \[10, 8\]"),
        ({"temperature": 0.0}, "temperature > 0"),
        ({"chunk_size": 0}, "chunk_size to be an int >= 1"),
        ({"softcap": -1.0}, "softcap > 0"),
    ],
)
def test_selected_log_probs_errors(kwargs, message):
    head, hidden, targets = _head_and_inputs()
    args = {"hidden": hidden, "lm_head": head, "targets": targets}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        selected_log_probs(**args)
