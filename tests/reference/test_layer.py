"""Whole tiny layers: every layer kind runs, and the layer is the composition of its parts."""
import pytest
import torch

from reference import make_inputs, make_weights, preset, run_stage
from reference.layer import sub

CFG = preset("tiny")        # Bk = 2: layers 0, 2, 4 write a block; 0-2 KDA, 3-4 MLA; 0 dense


def bits(t):
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("i", range(CFG.n_layers))
def test_layer_runs_and_composes(i):
    w = make_weights(CFG, "layer", 51, expert_format="mxfp4", layer_idx=i)
    x = make_inputs(CFG, "layer", 52, batch=4, layer_idx=i)
    r = run_stage("layer", CFG, w, x, "faithful")
    for k in ("delta", "x_attn", "attn_out", "x_mlp", "prefix"):
        assert torch.isfinite(r[k]).all(), k
    kind = CFG.layer_kind(i)
    assert ("kv_cache" in r) == (kind == "mla") and ("conv_state" in r) == (kind == "kda")
    # attention = the stage run on x_attn, MLP = the moe stage run on x_mlp (bitwise)
    att = run_stage(kind, CFG, sub(w, "attn"), {**x, "x": r["x_attn"]}, "faithful")
    assert torch.equal(att["out"], r["attn_out"])
    mlp = run_stage("moe", CFG, sub(w, "mlp"), {"x": r["x_mlp"]}, "faithful")
    assert torch.equal(mlp["out"], r["delta"])
    # prefix / blocks semantics (§2.3), bitwise
    added = x["prefix"] if i == 0 else (x["prefix"].float() + x["delta"].float()).bfloat16()
    if i % CFG.attn_res_block_size == 0:
        assert torch.equal(bits(r["blocks"][:, i // 2]), bits(added))        # finished block stored
        assert torch.equal(r["prefix"], r["attn_out"])                       # prefix restarts at a
    else:
        assert torch.equal(r["prefix"], (added.float() + r["attn_out"].float()).bfloat16())
    nb = -(-i // 2)
    if i == 0:   # n = 0: x_attn = RMSNorm(embedding) exactly, no softmax
        e = run_stage("layer", CFG, w, x, "exact")
        p = x["prefix"].double()
        want = p / torch.sqrt((p * p).mean(-1, keepdim=True) + 1e-5) * w["input_norm"].double()
        torch.testing.assert_close(e["x_attn"], want, rtol=1e-14, atol=0)
    untouched = [j for j in range(CFG.n_blocks) if j != (i // 2 if i % 2 == 0 else -1)]
    assert torch.equal(bits(r["blocks"][:, untouched]), bits(x["blocks"][:, untouched]))
    assert torch.isnan(x["blocks"][:, nb:]).all()                            # unread slots were NaN
