"""Vectorised (expert-grouped) LatentMoE against a per-token, per-slot loop written here."""
import math

import pytest
import torch

from reference import make_inputs, make_weights, preset, run_stage

CFG = preset("tiny")
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_loop(packed, scale):
    """Element-by-element MXFP4 decode of one [N, K/2] matrix (f64)."""
    N, K2 = packed.shape
    out = torch.empty(N, 2 * K2, dtype=torch.float64)
    for n in range(N):
        for j, byte in enumerate(packed[n].tolist()):
            for half, code in ((0, byte & 15), (1, byte >> 4)):
                k = 2 * j + half
                out[n, k] = E2M1[code] * math.ldexp(1.0, int(scale[n, k // 32]) - 127)
    return out


def expert_f64(w, e):
    if "experts.w13" in w:
        return w["experts.w13"][e].double(), w["experts.w2"][e].double()
    return (dequant_loop(w["experts.w13_packed"][e], w["experts.w13_scale"][e]),
            dequant_loop(w["experts.w2_packed"][e], w["experts.w2_scale"][e]))


def rms(x, w, eps=1e-5):
    return x / torch.sqrt((x * x).mean() + eps) * w.double()


def situ(g, u, b=4.0, bl=25.0):
    return b * torch.tanh(g / b) * torch.sigmoid(g) * bl * torch.tanh(u / bl)


def moe_loop(w, x, ids, weights):
    """Exact-mode MoE, one token and one route slot at a time, using the given ids/weights."""
    outs = []
    I = CFG.moe_intermediate
    for t in range(x.shape[0]):
        xt = x[t].double()
        hl = w["down.weight"].double() @ xt
        acc = torch.zeros(CFG.latent_dim, dtype=torch.float64)
        for j in range(CFG.top_k):
            e = int(ids[t, j])
            if e < 0:
                continue
            w13, w2 = expert_f64(w, e)
            gu = w13 @ hl
            acc += float(weights[t, j]) * (w2 @ situ(gu[:I], gu[I:]))
        yu = w["up.weight"].double() @ rms(acc, w["latent_norm.weight"])
        sgu = w["shared.gate_up"].double() @ xt
        Is = CFG.shared_intermediate
        ys = w["shared.down"].double() @ situ(sgu[:Is], sgu[Is:])
        outs.append(yu + ys)
    return torch.stack(outs)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_vectorised_moe_equals_per_token_loop(fmt):
    w = make_weights(CFG, "moe", 3, expert_format=fmt)
    x = make_inputs(CFG, "moe", 4, batch=5)
    r = run_stage("moe", CFG, w, x)
    want = moe_loop(w, x["x"], r["topk_ids"], r["topk_weights"])
    torch.testing.assert_close(r["out"], want, rtol=1e-11, atol=1e-12)
    # routing itself: loop over experts
    logits = x["x"].double() @ w["router.weight"].double().T
    sel = torch.sigmoid(logits) + w["router.bias"].double()
    for t in range(5):
        order = sorted(range(CFG.n_experts), key=lambda e: (-sel[t, e].item(), e))
        assert r["topk_ids"][t].tolist() == order[:CFG.top_k]


def test_forced_ids_with_dropped_routes_equal_loop():
    w = make_weights(CFG, "moe", 5, expert_format="mxfp4")
    x = make_inputs(CFG, "moe", 6, batch=3)
    x["forced_ids"] = torch.tensor([[0, 5, -1, 11], [2, 2, 3, -1], [-1, -1, -1, -1]], dtype=torch.int32)
    r = run_stage("moe", CFG, w, x)
    assert r["topk_weights"][0, 2] == 0 and torch.all(r["topk_weights"][2] == 0)
    want = moe_loop(w, x["x"], x["forced_ids"], r["topk_weights"])
    torch.testing.assert_close(r["out"], want, rtol=1e-11, atol=1e-12)
    assert torch.all(r["combined"][2] == 0)                      # all routes dropped


def test_faithful_moe_close_to_exact_loop_and_formats_agree():
    wq = make_weights(CFG, "moe", 7, expert_format="mxfp4")
    # bf16 experts holding exactly the dequantised MXFP4 values: both formats must agree bitwise
    from reference import mxfp4
    wb = {k: v for k, v in wq.items() if not k.startswith("experts.")}
    wb["experts.w13"] = mxfp4.dequantize(wq["experts.w13_packed"], wq["experts.w13_scale"]).bfloat16()
    wb["experts.w2"] = mxfp4.dequantize(wq["experts.w2_packed"], wq["experts.w2_scale"]).bfloat16()
    x = make_inputs(CFG, "moe", 8, batch=4)
    for mode in ("exact", "faithful"):
        a, b = run_stage("moe", CFG, wq, x, mode), run_stage("moe", CFG, wb, x, mode)
        for k in a:
            assert torch.equal(a[k], b[k]), (mode, k)


def test_dense_mlp_equals_loop():
    w = make_weights(CFG, "moe", 9, layer_idx=0)
    assert set(w) == {"dense.gate_up", "dense.down"}
    x = make_inputs(CFG, "moe", 10, batch=3)
    r = run_stage("moe", CFG, w, x)
    Id = CFG.dense_intermediate
    for t in range(3):
        gu = w["dense.gate_up"].double() @ x["x"][t].double()
        want = w["dense.down"].double() @ situ(gu[:Id], gu[Id:])
        torch.testing.assert_close(r["out"][t], want, rtol=1e-12, atol=1e-13)
