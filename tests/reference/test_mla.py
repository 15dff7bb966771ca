"""Absorbed MLA decode against un-absorbed attention over decompressed K and V (written here)."""
import torch

from reference import make_inputs, make_weights, preset, run_stage

CFG = preset("tiny")


def rms(x, w, eps=1e-5):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def mla_unabsorbed(w, inp):
    """Textbook MLA: decompress every cached latent into per-head k_nope and v, then attend."""
    c = CFG
    H, R, nope, rope, vd = c.mla_heads, c.kv_lora_rank, c.qk_nope_dim, c.qk_rope_dim, c.v_head_dim
    x = inp["x"].double()
    q_c = rms(x @ w["q_a.weight"].double().T, w["q_a_norm.weight"])
    kva = x @ w["kv_a.weight"].double().T
    kv_c, k_pe = rms(kva[:, :R], w["kv_a_norm.weight"]), kva[:, R:]
    q = (q_c @ w["q_b.weight"].double().T).view(-1, H, nope + rope)
    kvb = w["kv_b.weight"].double().view(H, nope + vd, R)
    outs = []
    for b, L in enumerate(inp["cache_lens"].tolist()):
        C = torch.cat([inp["kv_cache"][b, :L, :R].double(), kv_c[b:b + 1]])          # [L+1, R]
        Kpe = torch.cat([inp["kv_cache"][b, :L, R:].double(), k_pe[b:b + 1]])        # [L+1, rope]
        heads = []
        for h in range(H):
            k_nope = C @ kvb[h, :nope].T                                              # [L+1, nope]
            v = C @ kvb[h, nope:].T                                                   # [L+1, v]
            s = (k_nope @ q[b, h, :nope] + Kpe @ q[b, h, nope:]) / (nope + rope) ** 0.5
            heads.append(torch.softmax(s, 0) @ v)
        outs.append(torch.cat(heads))
    o = torch.stack(outs)
    gated = o * torch.sigmoid(x @ w["g.weight"].double().T)
    return o.view(-1, H, vd), gated @ w["o.weight"].double().T


def test_absorbed_equals_unabsorbed():
    w = make_weights(CFG, "mla", 11)
    inp = make_inputs(CFG, "mla", 12, batch=6, cache_lens=[0, 1, 7, 31, 32, 5])
    r = run_stage("mla", CFG, w, inp)
    o, out = mla_unabsorbed(w, inp)
    torch.testing.assert_close(r["attn_out"], o, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(r["out"], out, rtol=1e-10, atol=1e-12)


def test_cache_len_zero_attends_only_to_new_token_and_never_reads_free_rows():
    w = make_weights(CFG, "mla", 13)
    inp = make_inputs(CFG, "mla", 14, batch=3, cache_lens=[0, 0, 4], cache_capacity=16)
    assert torch.isnan(inp["kv_cache"][0]).all() and torch.isnan(inp["kv_cache"][2, 4:]).all()
    before = {k: v.clone() for k, v in inp.items()}
    r = run_stage("mla", CFG, w, inp)
    R = CFG.kv_lora_rank
    for b in (0, 1):                        # softmax over one entry: lat = C_new, every head
        assert torch.equal(r["attn_latent"][b], r["kv_c"][b].expand(CFG.mla_heads, R))
    assert all(torch.isfinite(r[k]).all() for k in r if k != "kv_cache")
    # new cache: row L_b written with (kv_c | k_pe), all other rows (NaN included) untouched
    cache = r["kv_cache"]
    for b, L in enumerate([0, 0, 4]):
        assert torch.equal(cache[b, L], torch.cat([r["kv_c"][b], r["k_pe"][b]]))
        keep = [t for t in range(16) if t != L]
        torch.testing.assert_close(cache[b, keep], before["kv_cache"][b, keep].double(), equal_nan=True, rtol=0, atol=0)
    for k, v in inp.items():                 # inputs unchanged
        assert torch.equal(v, before[k]) or torch.equal(torch.isnan(v), torch.isnan(before[k]))
    # faithful mode writes the bf16 entry bit-exactly
    f = run_stage("mla", CFG, w, inp, "faithful")
    assert f["kv_cache"].dtype == torch.bfloat16
    assert torch.equal(f["kv_cache"][2, 4], torch.cat([f["kv_c"][2], f["k_pe"][2]]))
