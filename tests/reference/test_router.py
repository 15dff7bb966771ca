"""Router: grouped top-k vs plain top-k, ties, NaN, forced ids, sel_gap."""
import pytest
import torch

from reference import preset
from reference.numerics import Numerics
from reference.router import route

EX = Numerics("exact")


def cfg_with(**kw):
    return preset("tiny").replace(**kw)


def test_one_group_equals_plain_topk():
    cfg = preset("small")
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(33, cfg.n_experts, generator=g, dtype=torch.float64)
    bias = 0.05 * torch.randn(cfg.n_experts, generator=g, dtype=torch.float64)
    r = route(logits, bias, cfg, EX)
    sel = torch.sigmoid(logits) + bias
    vals, ids = torch.topk(sel, cfg.top_k)              # no ties in random data
    assert torch.equal(r["topk_ids"].long(), ids)
    sc = torch.sigmoid(logits).gather(1, ids)
    assert torch.allclose(r["topk_weights"], sc / sc.sum(-1, keepdim=True), rtol=1e-14, atol=0)
    nxt = torch.topk(sel, cfg.top_k + 1).values[:, -1]
    assert torch.allclose(r["sel_gap"], vals[:, -1] - nxt, rtol=1e-14, atol=0)


def test_all_groups_kept_equals_plain_and_grouping_by_brute_force():
    cfg = cfg_with(n_group=4, topk_group=4)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(20, 12, generator=g, dtype=torch.float64)
    bias = torch.zeros(12, dtype=torch.float64)
    assert torch.equal(route(logits, bias, cfg, EX)["topk_ids"].long(),
                       torch.topk(torch.sigmoid(logits), cfg.top_k).indices)
    # 2 of 4 groups kept: brute force over the 6 choices of kept groups, by group score
    cfg2 = cfg_with(n_group=4, topk_group=2)
    r = route(logits, bias, cfg2, EX)
    sel = torch.sigmoid(logits)
    for t in range(20):
        gscore = [sorted(sel[t, 3 * j:3 * j + 3].tolist())[-2:] for j in range(4)]
        best = sorted(range(4), key=lambda j: -sum(gscore[j]))[:2]
        allowed = [e for e in range(12) if e // 3 in best]
        want = sorted(allowed, key=lambda e: -sel[t, e].item())[:4]
        assert r["topk_ids"][t].tolist() == want


def test_exact_ties_go_to_the_lower_id_and_nan_selects_as_zero():
    cfg = preset("tiny")                                 # E=12, k=4
    logits = torch.zeros(2, 12, dtype=torch.float64)      # every sel equal
    bias = torch.zeros(12, dtype=torch.float64)
    r = route(logits, bias, cfg, EX)
    assert r["topk_ids"][0].tolist() == [0, 1, 2, 3]
    assert r["sel_gap"][0].item() == 0.0
    # experts 5 and 9 strictly best, then a tie among the rest -> lower ids
    logits[1, 9] = logits[1, 5] = 1.0
    logits[1, 0] = float("nan")                           # NaN -> sel 0, below sigmoid(0)=0.5
    r = route(logits, bias, cfg, EX)
    assert r["topk_ids"][1].tolist() == [5, 9, 1, 2]


def test_forced_ids_with_dropped_route():
    cfg = preset("tiny")
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 12, generator=g, dtype=torch.float64)
    forced = torch.tensor([[3, 7, -1, 1], [-1, -1, -1, -1], [0, 1, 2, 3]], dtype=torch.int32)
    r = route(logits, torch.zeros(12, dtype=torch.float64), cfg.replace(routed_scaling_factor=2.5), EX, forced)
    sc = torch.sigmoid(logits)
    w0 = sc[0, [3, 7, 1]] / sc[0, [3, 7, 1]].sum() * 2.5
    assert torch.allclose(r["topk_weights"][0], torch.stack([w0[0], w0[1], torch.tensor(0.0, dtype=torch.float64), w0[2]]))
    assert r["topk_weights"][1].tolist() == [0.0] * 4
    assert torch.equal(r["topk_ids"], forced)
    with pytest.raises(ValueError, match="forced_ids"):
        route(logits, torch.zeros(12, dtype=torch.float64), cfg, EX, forced + 20)
