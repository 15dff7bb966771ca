"""The error rule's accumulation floor (k3diff.budgets, divergence): element-wise c·u·Σ|a||b|, the
accuracy class, one comparison path, and the routing near-tie δ derived from the same bound."""
import pytest
import torch

from k3diff.budgets import DEFAULT, U_ACCUM, Budget, budget_for
from k3diff.comparisons import compare_many
from k3diff.divergence import compare
from k3diff.routing import compare_routing, near_tie_delta

LOGITS = budget_for("moe", "router_logits")


def _gemv(K=7168, E=64, T=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g).bfloat16().double()
    w = (torch.randn(E, K, generator=g) * 0.02).bfloat16().double()
    return x, w, x @ w.T, x.abs() @ w.abs().T


def test_the_floor_follows_each_elements_own_contraction():
    ref = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    A = torch.tensor([1e3, 1e6, 1e3], dtype=torch.float64)
    b = Budget(0.0, 1.0, "t", accum=4.0, classed=True)
    slack = 4.0 * U_ACCUM * A                       # the floor of each element
    inside = ref + 0.9 * slack
    assert compare("s", "t", inside.float(), ref, ref, b, torch.float32, A).ok
    out = ref.clone()
    out[0] += 3 * slack[0]                          # allowed at element 1, not at element 0
    rep = compare("s", "t", out.float(), ref, ref, b, torch.float32, A)
    assert not rep.ok and rep.where == (0,) and rep.ratio > 1
    # the accuracy class is the error in units of u·A
    assert rep.accuracy == pytest.approx(float((out.float().double() - ref).abs()[0] / (U_ACCUM * A[0])), rel=1e-6)


def test_accuracy_only_where_it_measures_the_accumulation_and_in_to_dict():
    ref = torch.randn(16, dtype=torch.float64)
    A = ref.abs() * 3
    f32 = compare("s", "t", ref.float(), ref, ref, LOGITS, torch.float32, A)
    assert f32.accuracy is not None and "accuracy" in f32.to_dict()
    assert compare("s", "t", ref.float(), ref, ref, LOGITS, torch.float32).accuracy is None      # no Σ|a||b|
    assert compare("s", "t", ref.bfloat16(), ref, ref, LOGITS, torch.bfloat16, A).accuracy is None  # bf16-stored
    deeper = compare("s", "t", ref.float(), ref, ref, DEFAULT, torch.float32, A)          # rounded inputs
    assert deeper.accuracy is None and deeper.ok


def test_without_a_contraction_the_rule_is_unchanged():
    ref = torch.linspace(-1, 1, 51, dtype=torch.float64)
    base = ref + 1e-3
    cand = ref + 2.5e-3
    a = compare("s", "t", cand, ref, base, DEFAULT, torch.bfloat16)
    assert a.bound == pytest.approx(DEFAULT.rtol * 1e-3 + a.atol) and a.accuracy is None


def test_one_path_alone_and_together_give_the_same_numbers():
    x, w, ref, A = _gemv(K=512, E=8)
    cand = (x.float() @ w.float().T)
    rows = [("moe", "router_logits", cand, ref, ref.float(), LOGITS, torch.float32, A),
            ("moe", "latent", ref.bfloat16(), ref, ref.bfloat16(), DEFAULT, torch.bfloat16, A),
            ("moe", "plain", cand, ref, ref.float(), DEFAULT, torch.float32, None)]
    alone = [compare(*it) for it in rows]
    together = compare_many(rows, together=True)
    for a, t in zip(alone, together):
        da, dt = a.to_dict(), t.to_dict()
        for k in ("similarity", "frac_outside"):     # sums in another order: reported, never judged
            assert da.pop(k) == pytest.approx(dt.pop(k), rel=1e-9, abs=1e-15)
        assert da == dt


def _sequential16(x, w):
    acc = torch.zeros(x.shape[0], w.shape[0])
    for k0 in range(0, x.shape[1], 16):
        acc = acc + x[:, k0:k0 + 16].float() @ w[:, k0:k0 + 16].float().T
    return acc


def test_router_logits_at_k3_width_pass_correct_orders_and_fail_bugs_by_orders_of_magnitude():
    """K = 7168 (K3's hidden size): a sequential 16-wide f32 sum passes; a dropped 16-wide chunk
    of K, a wrong weight row and bf16-rounded logits fail by > 50x (k3diff.budgets: >= 72x at c = 32)."""
    x, w, ref, A = _gemv()
    base = (x.float() @ w.float().T)
    judge = lambda c: compare("moe", "router_logits", c, ref, base, LOGITS, torch.float32, A)  # noqa: E731
    good = judge(_sequential16(x, w))
    assert good.ok and good.accuracy < 4
    short = _sequential16(x[:, 16:], w[:, 16:])
    wrong_row = base.clone()
    wrong_row[:, 3] = (x.float() @ w[4].float())
    for bad in (short, wrong_row, base.bfloat16().float()):
        rep = judge(bad)
        assert not rep.ok and rep.ratio > 50, rep.line()


def test_near_tie_delta_follows_the_logits_bound():
    x, w, ref, A = _gemv(K=1024, E=16)
    base = (x.float() @ w.float().T)
    d = near_tie_delta(ref, base, A, torch.zeros(16), 1)
    no_abs = near_tie_delta(ref, base, None, torch.zeros(16), 1)
    assert d.shape == (4,) and bool((d > no_abs).all())
    # a per-token δ: a flip at a gap below its token's δ is allowed, above it fails
    cand = torch.tensor([[0, 1], [0, 2]])
    refi = torch.tensor([[0, 1], [0, 1]])
    delta = torch.tensor([1e-3, 1e-3])
    assert compare_routing(cand, refi, torch.tensor([0.5, 5e-4]), delta).ok
    assert not compare_routing(cand, refi, torch.tensor([0.5, 2e-3]), delta).ok


def test_layer_delta_follows_each_tokens_own_baseline_noise():
    ref = torch.zeros(2, 8, dtype=torch.float64)
    base = ref.clone()
    base[1, 3] = 1e-3                                     # x_mlp noise on token 1 only
    whole = near_tie_delta(ref, base, None, None)
    own = near_tie_delta(ref, base, None, None, per_token=True)
    assert float(whole[0]) == pytest.approx(float(whole[1])) and float(own[0]) < float(own[1]) / 100
    # σ'(0) = 1/4, rtol 4, two scores: the noisy token's δ is about 2 x its deviation
    assert float(own[1]) == pytest.approx(2 * 1e-3, rel=0.05)
