"""Verify steps and the FP8 latent cache in the reference (docs/k3-decode.md §2.4, §3.4-3.5, §4.6)."""
from __future__ import annotations

import pytest
import torch

import reference
from reference import fp8_cache
from reference.config import preset
from reference.materialize import make_inputs, make_weights

CFG = preset("tiny")


def _same(a, b):
    if a.dtype == torch.uint8:
        return torch.equal(a, b)
    return a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def test_kda_verify_is_w_decode_steps_bit_for_bit():
    w = make_weights(CFG, "kda", 1)
    widths, acc = [3, 1, 2, 2], [2, 1, 1, 0]
    inp = make_inputs(CFG, "kda", 7, batch=4, widths=widths, accepted=acc, state_idx=[3, 1, 0, 4], n_slots=6)
    ver = reference.run_stage("kda", CFG, w, inp, "exact")
    conv, rec = inp["conv_state"], inp["recurrent_state"]
    first = [0, 3, 4, 6]
    carried = {}
    for j in range(3):
        seqs = [b for b in range(4) if widths[b] > j]
        toks = [first[b] + j for b in seqs]
        step = {"x": inp["x"][toks], "conv_state": conv, "recurrent_state": rec,
                "state_idx": inp["state_idx"][seqs]}
        dec = reference.run_stage("kda", CFG, w, step, "exact")
        for name in ("out", "core", "conv_out", "normed"):
            assert torch.equal(dec[name], ver[name][toks]), name
        conv, rec = dec["conv_state"], dec["recurrent_state"]
        for b in seqs:
            s = int(inp["state_idx"][b])
            if s > 0:
                assert torch.equal(ver["recurrent_states"][first[b] + j], rec[s])
                assert torch.equal(ver["conv_states"][first[b] + j].double(), conv[s].double())
                if j + 1 == acc[b]:
                    carried[s] = (conv[s].clone(), rec[s].clone())
    for s, (c, r) in carried.items():                 # the slot continues from the last accepted token
        assert torch.equal(ver["recurrent_state"][s], r) and torch.equal(ver["conv_state"][s].double(), c.double())
    assert torch.equal(ver["recurrent_state"][4], inp["recurrent_state"][4].double())   # none accepted
    # a null sequence's tokens output exactly 0 and leave their per-token buffer rows as they were
    assert not ver["out"][first[2]:first[2] + 2].any()
    assert torch.equal(ver["recurrent_states"][4:6], inp["recurrent_states"][4:6].double())


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_mla_token_j_is_a_decode_step_over_the_extended_cache(fmt):
    w = make_weights(CFG, "mla", 2)
    widths, lens = [3, 1, 2], [5, 0, 9]
    inp = make_inputs(CFG, "mla", 3, batch=3, widths=widths, cache_lens=lens, cache_format=fmt)
    ver = reference.run_stage("mla", CFG, w, inp, "exact")
    first = [0, 3, 4]
    for b in range(3):
        for j in range(widths[b]):
            t = first[b] + j
            step = {"x": inp["x"][[t]], "kv_cache": ver["kv_cache"][[b]],
                    "cache_lens": torch.tensor([lens[b] + j])}
            dec = reference.run_stage("mla", CFG, w, step, "exact")
            # float64 products over another row count (BLAS may block them otherwise): equal to the
            # last bits, the cache row bit for bit
            assert torch.equal(dec["kv_c"][0], ver["kv_c"][t])
            for name in ("attn_latent", "attn_out", "out"):
                torch.testing.assert_close(dec[name][0], ver[name][t], rtol=1e-12, atol=1e-14)
            assert _same(dec["kv_cache"][0], ver["kv_cache"][b])    # writes what the verify step wrote
    # rows past the written ones are the input's, bit for bit (faithful mode keeps the bf16 bits)
    base = reference.run_stage("mla", CFG, w, inp, "faithful")
    for b in range(3):
        end = lens[b] + widths[b]
        before, after = inp["kv_cache"][b, end:], base["kv_cache"][b, end:]
        assert torch.equal(after.view(torch.uint8), before.view(torch.uint8))


def test_decode_inputs_unchanged_without_verify_fields():
    a = make_inputs(CFG, "mla", 11, batch=2, cache_lens=[4, 1])
    b = make_inputs(CFG, "mla", 11, batch=2, cache_lens=[4, 1], cache_format="bf16")
    assert a.keys() == b.keys() and all(torch.equal(a[k].view(torch.uint8) if a[k].dtype == torch.bfloat16
                                                    else a[k], b[k].view(torch.uint8) if b[k].dtype == torch.bfloat16
                                                    else b[k]) for k in a)
    assert "query_lens" not in a


def test_fp8_layout_is_flashmla_at_k3_dims():
    full = preset("full")
    assert (fp8_cache.tile(full), fp8_cache.n_tiles(full), fp8_cache.row_bytes(full)) == (128, 4, 656)
    assert fp8_cache.n_tiles(CFG) == 2


def test_e4m3_rounding_matches_the_dtype_on_f32_values():
    g = torch.Generator().manual_seed(0)
    y = torch.cat([torch.randn(20000, generator=g) * s for s in (1e-3, 0.1, 1.0, 30.0, 200.0)])
    ours = fp8_cache.round_e4m3(y)
    # torch's own cast is the rounding's oracle inside e4m3's range; past 448 the cast's answer
    # depends on the torch version (NaN on torch 2.4's CPU, 448 later), so saturation is checked
    # on its own: the quantiser scales every tile into range, and a value past it saturates
    inside = y.abs() <= 448
    assert torch.equal(ours[inside], y[inside].to(torch.float8_e4m3fn).to(torch.float64))
    assert (~inside).sum() > 100 and torch.equal(ours[~inside], y[~inside].sign().double() * 448.0)


def test_fp8_quantise_round_trip_and_per_tile_scales():
    g = torch.Generator().manual_seed(1)
    kv = (torch.randn(5, CFG.kv_lora_rank, generator=g) * torch.tensor([1.0] * 16 + [50.0] * 16)).to(torch.bfloat16)
    pe = torch.randn(5, CFG.qk_rope_dim, generator=g).to(torch.bfloat16)
    rows = fp8_cache.quantise(kv, pe, CFG, exact=False)
    assert rows.dtype == torch.uint8 and rows.shape == (5, fp8_cache.row_bytes(CFG))
    q, s, pe2 = fp8_cache.fields(rows, CFG)
    assert torch.equal(pe2, pe)
    assert torch.equal(s[:, 0], (kv[:, :16].float().abs().amax(-1) / 448.0))      # one scale per tile
    assert q.abs().amax(-1).max() == 448.0
    back = fp8_cache.dequantise(rows, CFG, exact=True)[:, :CFG.kv_lora_rank]
    rel = ((back - kv.double()).abs() / kv.double().abs().clamp(min=1e-30))
    assert float(rel[kv.double().abs() > s.double().repeat_interleave(16, -1) * 2 ** -6].max()) <= 2 ** -4
