"""Fast CPU smoke tests of the `torch-blocked` backend on the 'tiny' preset (docs/k3-decode.md §9).

Weights and inputs are built here (not by the framework) so the backend can be checked alone:
shapes/dtypes, no NaN, in-place state rules, bit-exact pieces (MXFP4 table, conv shift, top-k
ties). The numerical comparison against the float64 reference is the framework's job; a loose
cosine check runs here only when reference/api.py exists.
"""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from k3diff.backends.blocked import TorchBlockedBackend, attn_res
from k3diff.backends.blocked_ops import (bf16, canonical_sel, e2m1_decode, e8m0_decode, grouped_topk,
                                         mxfp4_dequant)
from k3diff.stages import OUTPUTS, dims, resolve_shape
from reference.config import preset

BF = torch.bfloat16
CFG = preset("tiny")


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _lin(g, out, inp, scale=1.0):
    return (torch.randn(out, inp, generator=g) * scale / math.sqrt(inp)).to(BF)


def _normw(g, n):
    return (1 + 0.1 * torch.randn(n, generator=g)).to(BF)


def moe_weights(cfg, g, mxfp4=False):
    E, d, r, I, Is = cfg.n_experts, cfg.hidden, cfg.latent_dim, cfg.moe_intermediate, cfg.shared_intermediate
    w = {"router.weight": _lin(g, E, d), "router.bias": 0.1 * torch.randn(E, generator=g),
         "down.weight": _lin(g, r, d), "latent_norm.weight": _normw(g, r), "up.weight": _lin(g, d, r),
         "shared.gate_up": _lin(g, 2 * Is, d), "shared.down": _lin(g, d, Is)}
    if mxfp4:
        for name, (n, k) in {"w13": (2 * I, r), "w2": (r, I)}.items():
            w[f"experts.{name}_packed"] = torch.randint(0, 256, (E, n, k // 2), generator=g, dtype=torch.uint8)
            w[f"experts.{name}_scale"] = torch.randint(118, 123, (E, n, k // 32), generator=g, dtype=torch.uint8)
    else:
        w["experts.w13"] = torch.stack([_lin(g, 2 * I, r) for _ in range(E)])
        w["experts.w2"] = torch.stack([_lin(g, r, I) for _ in range(E)])
    return w


def dense_weights(cfg, g):
    return {"dense.gate_up": _lin(g, 2 * cfg.dense_intermediate, cfg.hidden),
            "dense.down": _lin(g, cfg.hidden, cfg.dense_intermediate)}


def mla_weights(cfg, g):
    d, H, R, rope = cfg.hidden, cfg.mla_heads, cfg.kv_lora_rank, cfg.qk_rope_dim
    return {"q_a.weight": _lin(g, cfg.q_lora_rank, d), "kv_a.weight": _lin(g, R + rope, d),
            "q_a_norm.weight": _normw(g, cfg.q_lora_rank), "kv_a_norm.weight": _normw(g, R),
            "q_b.weight": _lin(g, H * cfg.qk_head_dim, cfg.q_lora_rank),
            "kv_b.weight": _lin(g, H * (cfg.qk_nope_dim + cfg.v_head_dim), R),
            "g.weight": _lin(g, H * cfg.v_head_dim, d), "o.weight": _lin(g, d, H * cfg.v_head_dim)}


def kda_weights(cfg, g):
    d, H, D, P = cfg.hidden, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    w = {f"{n}_proj.weight": _lin(g, P, d) for n in "qkvg"}
    w.update({"f_a.weight": _lin(g, D, d), "f_b.weight": _lin(g, P, D), "b_proj.weight": _lin(g, H, d),
              "o_proj.weight": _lin(g, d, P), "o_norm.weight": _normw(g, D),
              "conv.weight": 0.5 * torch.randn(3 * P, cfg.conv_width, generator=g),
              "A_log": 0.5 * torch.randn(H, generator=g), "dt_bias": 0.3 * torch.randn(P, generator=g)})
    return w


def layer_weights(cfg, i, g, mxfp4=False):
    w = {n: _normw(g, cfg.hidden) for n in ("attn_res.norm", "input_norm", "mlp_res.norm", "post_attn_norm")}
    w["attn_res.proj"] = _lin(g, 1, cfg.hidden, 4.0).reshape(-1)
    w["mlp_res.proj"] = _lin(g, 1, cfg.hidden, 4.0).reshape(-1)
    attn = kda_weights(cfg, g) if cfg.is_kda_layer(i) else mla_weights(cfg, g)
    mlp = moe_weights(cfg, g, mxfp4) if cfg.is_moe_layer(i) else dense_weights(cfg, g)
    w.update({f"attn.{k}": v for k, v in attn.items()})
    w.update({f"mlp.{k}": v for k, v in mlp.items()})
    return w


def mla_inputs(cfg, g, lens, cap=None):
    T, C = len(lens), cfg.mla_cache_dim
    cap = cap or max(lens) + 1
    cache = torch.full((T, cap, C), float("nan"), dtype=BF)        # rows >= L_b are poisoned
    for b, L in enumerate(lens):
        cache[b, :L] = torch.randn(L, C, generator=g).to(BF)
    return {"kv_cache": cache, "cache_lens": torch.tensor(lens, dtype=torch.int64)}


def kda_inputs(cfg, g, state_idx, n_slots):
    P, W, H, D = cfg.kda_proj, cfg.conv_width, cfg.kda_heads, cfg.kda_head_dim
    return {"conv_state": torch.randn(n_slots, 3 * P, W - 1, generator=g).to(BF),
            "recurrent_state": 0.1 * torch.randn(n_slots, H, D, D, generator=g),
            "state_idx": torch.tensor(state_idx, dtype=torch.int64)}


def out_buffers(cfg, stage, inputs):
    sizes = dims(cfg, stage, inputs)
    return {s.name: torch.full(resolve_shape(s, sizes), -7 if not s.dtype.is_floating_point else float("nan"),
                               dtype=s.dtype) for s in OUTPUTS[stage]}


def run(stage, weights, inputs, cfg=CFG):
    be = TorchBlockedBackend()
    prepared = be.prepare(cfg, stage, weights)
    out = out_buffers(cfg, stage, inputs)
    be.run(stage, cfg, prepared, inputs, out)
    return out


def check_outputs(stage, out, inputs):
    sizes = dims(CFG, stage, inputs)
    for s in OUTPUTS[stage]:
        t = out[s.name]
        assert t.dtype == s.dtype and tuple(t.shape) == resolve_shape(s, sizes), s.name
        if t.dtype.is_floating_point:
            assert torch.isfinite(t).all(), f"{stage}.{s.name} has NaN/Inf (unwritten?)"


def bits(t):
    return t.view(torch.int16) if t.dtype == BF else t.view(torch.int32)


def clone_all(d):
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in d.items()}


# ----------------------------------------------------------------------------- pure pieces
def test_mxfp4_table_all_codes():
    table = [0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    want = torch.tensor(table + [-v for v in table])
    got = e2m1_decode(torch.arange(16, dtype=torch.uint8))
    assert torch.equal(got, want)
    assert bits(got)[8] == bits(torch.tensor(-0.0))              # code 8 is -0
    codes = torch.tensor([0, 1, 100, 127, 150, 254, 255], dtype=torch.uint8)
    s = e8m0_decode(codes)
    assert torch.equal(s[:-1], torch.tensor([2.0 ** (int(c) - 127) for c in codes[:-1]], dtype=torch.float32))
    assert torch.isnan(s[-1])
    # packing: low nibble = even K element; one scale per 32 K elements
    packed = torch.tensor([[0x21] * 16 + [0x7F] * 16], dtype=torch.uint8)       # K = 64
    scale = torch.tensor([[127, 128]], dtype=torch.uint8)
    w = mxfp4_dequant(packed, scale)
    assert w.shape == (1, 64)
    assert w[0, 0] == 0.5 and w[0, 1] == 1.0 and w[0, 32] == -6.0 * 2 and w[0, 33] == 6.0 * 2


def test_grouped_topk_single_group_is_plain_topk():
    g = _g(1)
    sel = torch.randn(8, 24, generator=g)
    plain = torch.topk(sel, 5).indices
    assert torch.equal(grouped_topk(sel, 5, 1, 1), plain)
    assert torch.equal(grouped_topk(sel, 5, 4, 4), plain)        # all groups kept = plain top-k
    # grouped: only the best group (by top-2 sum) may supply experts
    sel = torch.zeros(1, 8)
    sel[0, 4:] = torch.tensor([0.5, 0.5, 0.1, 0.1])
    sel[0, 0] = 0.9
    assert sorted(grouped_topk(sel, 2, 2, 1)[0].tolist()) == [4, 5]


def test_lower_id_wins_tie_and_nan_selects_as_zero():
    sel = torch.tensor([[0.1, 0.7, 0.3, 0.7, 0.7, 0.2]])
    assert grouped_topk(sel, 2, 1, 1)[0].tolist() == [1, 3]
    sel = torch.tensor([[0.0, -0.0, 0.5]])                       # -0.0 ties with +0.0
    assert grouped_topk(canonical_sel(sel), 2, 1, 1)[0].tolist() == [2, 0]
    sel = canonical_sel(torch.tensor([[float("nan"), -0.5, 0.1, -0.1]]))
    assert grouped_topk(sel, 2, 1, 1)[0].tolist() == [2, 0]      # NaN -> 0 beats -0.1
    # end to end: identical router rows and bias for experts a < b competing for the last place
    w = moe_weights(CFG, _g(2))
    a, b = 3, 9
    w["router.weight"][b] = w["router.weight"][a]
    w["router.bias"] = torch.full((CFG.n_experts,), -1.0)
    w["router.bias"][[0, 1, 2]] = 5.0                             # k-1 = 3 sure winners
    w["router.bias"][[a, b]] = 2.0
    x = torch.randn(4, CFG.hidden, generator=_g(3)).to(BF)
    out = run("moe", w, {"x": x})
    for row in out["topk_ids"].tolist():
        assert sorted(row) == [0, 1, 2, a]


# ----------------------------------------------------------------------------- stages
@pytest.mark.parametrize("mxfp4", [False, True])
def test_moe_stage(mxfp4):
    w = moe_weights(CFG, _g(4), mxfp4)
    w0 = clone_all(w)
    x = torch.randn(5, CFG.hidden, generator=_g(5)).to(BF)
    x0 = x.clone()
    out = run("moe", w, {"x": x})
    check_outputs("moe", out, {"x": x})
    assert torch.equal(bits(x), bits(x0)) and all(torch.equal(w[k], w0[k]) for k in w)
    ids = out["topk_ids"]
    assert all(len(set(r)) == CFG.top_k for r in ids.tolist())
    assert torch.allclose(out["topk_weights"].sum(-1), torch.full((5,), CFG.routed_scaling_factor))
    # routed logits unrounded f32 and the plain top-k of sigmoid + bias
    logits = x.float() @ w["router.weight"].float().t()
    assert torch.allclose(out["router_logits"], logits, rtol=1e-5, atol=1e-6)
    ref_ids = torch.topk(torch.sigmoid(logits) + w["router.bias"], CFG.top_k).indices
    assert torch.equal(ids.sort(-1).values, ref_ids.int().sort(-1).values)


def test_moe_forced_ids_with_dropped_routes():
    w = moe_weights(CFG, _g(6))
    x = torch.randn(3, CFG.hidden, generator=_g(7)).to(BF)
    forced = torch.tensor([[0, 5, -1, 11], [2, -1, -1, 7], [1, 3, 4, 6]], dtype=torch.int32)
    out = run("moe", w, {"x": x, "forced_ids": forced})
    check_outputs("moe", out, {"x": x, "forced_ids": forced})
    assert torch.equal(out["topk_ids"], forced)
    wts = out["topk_weights"]
    assert (wts[forced < 0] == 0).all() and (wts[forced >= 0] > 0).all()
    # one normalisation over the routes that exist
    assert torch.allclose(wts.sum(-1), torch.ones(3))
    # a dropped route changes nothing: same as routing to the valid ids with their weights
    sc = torch.sigmoid(out["router_logits"])
    row = forced[1]
    assert torch.allclose(wts[1, row >= 0], sc[1, row[row >= 0].long()] / sc[1, row[row >= 0].long()].sum())


def test_mla_stage_cache_and_split_kv():
    lens = [0, 1, 63, 64, 65, 130]
    g = _g(8)
    w = mla_weights(CFG, g)
    x = torch.randn(len(lens), CFG.hidden, generator=g).to(BF)
    inputs = dict(mla_inputs(CFG, g, lens, cap=140), x=x)
    before = inputs["kv_cache"].clone()
    out = run("mla", w, inputs)
    check_outputs("mla", out, inputs)
    cache, R = inputs["kv_cache"], CFG.kv_lora_rank
    new = torch.cat([out["kv_c"], out["k_pe"]], -1)
    for b, L in enumerate(lens):
        assert torch.equal(bits(cache[b, L]), bits(new[b]))
        cache[b, L] = before[b, L]
    assert torch.equal(bits(cache), bits(before))                    # nothing else changed (NaN rows too)
    # L = 0: softmax over one entry -> the latent is exactly the new kv_c
    assert torch.equal(out["attn_latent"][0, 0], out["kv_c"][0]) and torch.equal(out["attn_latent"][0, 1], out["kv_c"][0])
    # split-KV + LSE merge == one plain softmax (f32), before the bf16 rounding
    s = CFG.qk_head_dim ** -0.5
    for b, L in enumerate(lens):
        rows = torch.cat([before[b, :L], new[b:b + 1]]).float()
        q = torch.cat([out["ql"][b].float(), _q_pe(w, out["q_c"][b])], -1)
        p = torch.softmax(s * q @ rows.t(), -1)
        torch.testing.assert_close(out["attn_latent"][b].float(), bf16(p @ rows[:, :R]).float(), atol=1e-2, rtol=1e-2)


def _q_pe(w, q_c):
    q = bf16(q_c.float() @ w["q_b.weight"].float().t()).view(CFG.mla_heads, CFG.qk_head_dim)
    return q[:, CFG.qk_nope_dim:].float()


def test_kda_stage_null_rows_and_conv_shift():
    g = _g(9)
    w = kda_weights(CFG, g)
    state_idx = [2, 0, 4, -1, 1]
    inputs = dict(kda_inputs(CFG, g, state_idx, n_slots=6), x=torch.randn(5, CFG.hidden, generator=g).to(BF))
    conv0, rec0 = inputs["conv_state"].clone(), inputs["recurrent_state"].clone()
    out = run("kda", w, inputs)
    check_outputs("kda", out, inputs)
    for name, t in out.items():                                      # null rows exactly 0 everywhere
        assert (t[[1, 3]] == 0).all() and not torch.signbit(t[[1, 3]]).any(), name
        assert (t[[0, 2, 4]] != 0).any(), name
    conv, rec = inputs["conv_state"], inputs["recurrent_state"]
    for s in (0, 3, 5):                                              # untouched slots, bitwise
        assert torch.equal(bits(conv[s]), bits(conv0[s])) and torch.equal(bits(rec[s]), bits(rec0[s]))
    P = CFG.kda_proj
    w_qkv = torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]]).float()
    for row, s in ((0, 2), (2, 4), (4, 1)):
        assert torch.equal(bits(conv[s, :, :-1]), bits(conv0[s, :, 1:]))   # shift, bit-exact
        raw = bf16(inputs["x"][row].float() @ w_qkv.t())
        torch.testing.assert_close(conv[s, :, -1], raw, atol=0, rtol=1e-2)  # appended raw input
        assert not torch.equal(rec[s], rec0[s])
    assert out["conv_out"].shape[1] == 3 * P


@pytest.mark.parametrize("i", range(CFG.n_layers))
def test_layer_stage(i):
    g = _g(10 + i)
    T = 3
    w = layer_weights(CFG, i, g, mxfp4=(i % 2 == 1))
    inputs = {"x": None, "layer_idx": i, "prefix": (2 * torch.randn(T, CFG.hidden, generator=g)).to(BF),
              "blocks": torch.randn(T, CFG.n_blocks, CFG.hidden, generator=g).to(BF)}
    inputs.pop("x")
    if i > 0:
        inputs["delta"] = (0.5 * torch.randn(T, CFG.hidden, generator=g)).to(BF)
    if CFG.is_kda_layer(i):
        inputs.update(kda_inputs(CFG, g, [1, 0, 2], n_slots=3))
    else:
        inputs.update(mla_inputs(CFG, g, [0, 5, 70]))
    before = clone_all(inputs)
    out = run("layer", w, inputs)
    check_outputs("layer", out, inputs)
    Bk = CFG.attn_res_block_size
    expect_prefix = bf16(before["prefix"].float() + before["delta"].float()) if i > 0 else before["prefix"]
    if i % Bk == 0:
        assert torch.equal(bits(inputs["blocks"][:, i // Bk]), bits(expect_prefix))   # block write
        assert torch.equal(bits(inputs["prefix"]), bits(out["attn_out"]))              # restarts at a
    else:
        assert torch.equal(bits(inputs["prefix"]), bits(bf16(expect_prefix.float() + out["attn_out"].float())))
    if i == 0:                                                        # n = 0: exactly RMSNorm(prefix)
        p = before["prefix"].float()
        want = bf16(p * torch.rsqrt((p * p).mean(-1, keepdim=True) + CFG.rms_eps) * w["input_norm"].float())
        assert torch.equal(bits(out["x_attn"]), bits(want))


def test_attn_res_softmax_matches_plain_softmax():
    g = _g(20)
    T, d, n = 4, CFG.hidden, 3
    prefix = torch.randn(T, d, generator=g).to(BF)
    blocks = torch.randn(T, 4, d, generator=g).to(BF)
    wn, wp = _normw(g, d), _lin(g, 1, d, 4.0).reshape(-1)
    got = attn_res(prefix.clone(), None, blocks.clone(), wn, wp, None, n, -1, 1e-5, 1e-5)
    v = torch.cat([blocks[:, :n], prefix[:, None]], 1).float()
    logit = (v * (wn.float() * wp.float())).sum(-1) * torch.rsqrt((v * v).mean(-1) + 1e-5)
    want = bf16((torch.softmax(logit, -1)[..., None] * v).sum(1))
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)


# ----------------------------------------------------------------------------- oracle (optional)
HAVE_REF_API = importlib.util.find_spec("reference.api") is not None


@pytest.mark.skipif(not HAVE_REF_API, reason="reference/api.py not written yet")
@pytest.mark.parametrize("stage", ["moe", "moe-dropped", "dense", "mla", "kda", "layer"])
def test_against_reference(stage):
    from reference.api import run_stage

    g = _g(30)
    if stage.startswith("moe"):
        w, inputs = moe_weights(CFG, g, mxfp4=True), {"x": torch.randn(4, CFG.hidden, generator=g).to(BF)}
        if stage == "moe-dropped":
            inputs["forced_ids"] = torch.tensor([[0, -1, 5, 11], [1, 2, 3, 4], [-1, -1, 7, 8], [9, 10, 6, -1]],
                                                dtype=torch.int32)
        stage = "moe"
    elif stage == "dense":                                           # layer 0's MLP through the moe stage
        w, inputs = dense_weights(CFG, g), {"x": torch.randn(4, CFG.hidden, generator=g).to(BF)}
        stage = "moe"
    elif stage == "mla":
        w = mla_weights(CFG, g)
        inputs = dict(mla_inputs(CFG, g, [0, 3, 70]), x=torch.randn(3, CFG.hidden, generator=g).to(BF))
    elif stage == "kda":
        w = kda_weights(CFG, g)
        inputs = dict(kda_inputs(CFG, g, [1, 0, 2], 3), x=torch.randn(3, CFG.hidden, generator=g).to(BF))
    else:
        i = 2
        w = layer_weights(CFG, i, g)
        inputs = {"layer_idx": i, "prefix": torch.randn(3, CFG.hidden, generator=g).to(BF),
                  "delta": torch.randn(3, CFG.hidden, generator=g).to(BF),
                  "blocks": torch.randn(3, CFG.n_blocks, CFG.hidden, generator=g).to(BF)}
        inputs.update(kda_inputs(CFG, g, [1, 0, 2], 3))
    ref = run_stage(stage, CFG, w, clone_all(inputs), mode="exact")
    mine = run(stage, w, clone_all(inputs))
    for name in mine:                                                # every output the reference has
        if name not in ref or name == "topk_ids":
            continue
        a, b = mine[name].double().flatten(), torch.as_tensor(ref[name]).double().flatten()
        cos = torch.nn.functional.cosine_similarity(a, b, dim=0)
        assert cos > 0.999, f"{stage}.{name}: cosine {cos:.6f}"
    if "topk_ids" in ref:                                            # same ids; forced ids passed through
        assert torch.equal(mine["topk_ids"].sort(-1).values, ref["topk_ids"].to(torch.int32).sort(-1).values)
