"""KDA: T one-step decodes vs a naive full-sequence formulation; null-slot rows; conv-state shift."""
import torch
import torch.nn.functional as F

from reference import make_inputs, make_weights, preset, run_stage

CFG = preset("tiny")


def bits(t):
    return t.contiguous().view(torch.uint8)


def kda_full_sequence(w, X, conv0, S0):
    """One sequence, all N tokens at once (FLA 'naive_recurrent' style, state in [K, V] layout).

    X [N, d]; conv0 [3P, W-1] initial history; S0 [H, V, K] initial state (reference layout)."""
    c = CFG
    H, D, P, Wd = c.kda_heads, c.kda_head_dim, c.kda_proj, c.conv_width
    X = X.double()
    lin = lambda name: X @ w[name].double().T
    raw = torch.cat([lin("q_proj.weight"), lin("k_proj.weight"), lin("v_proj.weight")], -1)   # [N, 3P]
    seq = torch.cat([conv0.double(), raw.T], dim=1)                                            # [3P, W-1+N]
    y = F.silu(F.conv1d(seq.unsqueeze(0), w["conv.weight"].double().view(3 * P, 1, Wd), groups=3 * P))[0].T
    q, k, v = (t.reshape(-1, H, D) for t in y.split(P, dim=-1))
    graw = (X @ w["f_a.weight"].double().T) @ w["f_b.weight"].double().T
    A = torch.exp(w["A_log"].double()[:H]).view(H, 1)
    g = c.gate_lower_bound * torch.sigmoid(A * (graw.view(-1, H, D) + w["dt_bias"].double().view(H, D)))
    beta = torch.sigmoid(lin("b_proj.weight"))
    S = S0.double().transpose(-1, -2).clone()                                                  # [H, K, V]
    outs = []
    for t in range(X.shape[0]):
        qn = q[t] / torch.sqrt((q[t] ** 2).sum(-1, keepdim=True) + 1e-6) * D ** -0.5
        kn = k[t] / torch.sqrt((k[t] ** 2).sum(-1, keepdim=True) + 1e-6)
        S = S * torch.exp(g[t]).unsqueeze(-1)                     # decay the key rows
        pred = torch.einsum("hk,hkv->hv", kn, S)
        S = S + torch.einsum("hk,hv->hkv", kn, beta[t].unsqueeze(-1) * (v[t] - pred))
        o = torch.einsum("hk,hkv->hv", qn, S)
        gate = torch.sigmoid(lin("g_proj.weight")[t].view(H, D))
        n = o / torch.sqrt((o ** 2).mean(-1, keepdim=True) + 1e-5) * w["o_norm.weight"].double() * gate
        outs.append(n.reshape(-1) @ w["o_proj.weight"].double().T)
    return torch.stack(outs), S.transpose(-1, -2), raw.T[:, -(Wd - 1):]


def test_one_step_recurrence_T_times_equals_full_sequence():
    w = make_weights(CFG, "kda", 21)
    B, N = 3, 5
    inp = make_inputs(CFG, "kda", 22, batch=B, n_slots=6)
    xs = [make_inputs(CFG, "kda", 100 + t, batch=B)["x"] for t in range(N)]
    conv, rec = inp["conv_state"].double(), inp["recurrent_state"].double()
    outs = []
    for t in range(N):
        r = run_stage("kda", CFG, w, {**inp, "x": xs[t], "conv_state": conv, "recurrent_state": rec})
        conv, rec = r["conv_state"], r["recurrent_state"]
        outs.append(r["out"])
    for b, slot in enumerate(inp["state_idx"].tolist()):
        X = torch.stack([x[b] for x in xs])
        o, S, cs = kda_full_sequence(w, X, inp["conv_state"][slot], inp["recurrent_state"][slot])
        torch.testing.assert_close(torch.stack([o_[b] for o_ in outs]), o, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(rec[slot], S, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(conv[slot], cs, rtol=0, atol=0)


def test_null_slot_rows_are_exactly_zero_and_state_untouched():
    w = make_weights(CFG, "kda", 23)
    inp = make_inputs(CFG, "kda", 24, batch=4, state_idx=[2, 0, 1, -1], n_slots=5)
    for mode in ("exact", "faithful"):
        r = run_stage("kda", CFG, w, inp, mode)
        for name in ("out", "conv_out", "decay", "beta", "core", "normed"):
            assert torch.all(r[name][[1, 3]] == 0), name
            assert not torch.signbit(r[name][[1, 3]]).any(), name              # +0, bitwise zero
            assert torch.all(r[name][[0, 2]] != 0) if name == "out" else True
        for slot in (0, 3, 4):                                                  # null + unused slots
            for s in ("conv_state", "recurrent_state"):
                a = r[s][slot] if mode == "faithful" else r[s][slot].to(inp[s].dtype)
                assert torch.equal(bits(a), bits(inp[s][slot])), (mode, s, slot)


def test_faithful_conv_state_is_a_bit_exact_shift():
    w = make_weights(CFG, "kda", 25)
    inp = make_inputs(CFG, "kda", 26, batch=3)
    before = {k: v.clone() for k, v in inp.items()}
    r = run_stage("kda", CFG, w, inp, "faithful")
    for k in inp:
        assert torch.equal(inp[k], before[k])                                  # inputs not mutated
    idx = inp["state_idx"]
    new, old = r["conv_state"][idx], inp["conv_state"][idx]
    assert new.dtype == torch.bfloat16
    assert torch.equal(bits(new[..., :-1]), bits(old[..., 1:]))
    x = inp["x"].double()
    raw = torch.cat([(x @ w[f"{n}_proj.weight"].double().T).float() for n in "qkv"], -1).bfloat16()
    assert torch.equal(bits(new[..., -1]), bits(raw))
