"""Materialisation is deterministic and realistic; run_stage honours the k3diff contract."""
import pytest
import torch

from k3diff import stages as contract          # tests may read the contract; reference/ may not
from reference import make_inputs, make_weights, preset, run_stage, weight_shapes

CFG = preset("tiny")


def bits(t):
    return t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(bits(a[k]), bits(b[k])) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


STAGE_ARGS = [("moe", None, "bf16"), ("moe", None, "mxfp4"), ("moe", 0, "bf16"), ("mla", None, "bf16"),
              ("kda", None, "bf16"), ("layer", 2, "mxfp4"), ("layer", 3, "bf16")]


@pytest.mark.parametrize("stage,layer_idx,fmt", STAGE_ARGS)
def test_same_seed_same_bits_other_seed_other_values(stage, layer_idx, fmt):
    w1 = make_weights(CFG, stage, 7, expert_format=fmt, layer_idx=layer_idx)
    assert same(w1, make_weights(CFG, stage, 7, expert_format=fmt, layer_idx=layer_idx))
    w2 = make_weights(CFG, stage, 8, expert_format=fmt, layer_idx=layer_idx)
    assert all(not torch.equal(w1[k], w2[k]) for k in w1)
    shapes = weight_shapes(CFG, stage, fmt, layer_idx)
    assert {k: (tuple(v.shape), v.dtype) for k, v in w1.items()} == shapes
    kw = {"layer_idx": layer_idx} if stage == "layer" else {}
    i1 = make_inputs(CFG, stage, 9, batch=3, **kw)
    assert same(i1, make_inputs(CFG, stage, 9, batch=3, **kw))
    i2 = make_inputs(CFG, stage, 10, batch=3, **kw)
    assert any(not torch.equal(bits(i1[k]), bits(i2[k])) for k in i1 if isinstance(i1[k], torch.Tensor))


def test_layer_weights_reuse_stage_draws_and_mxfp4_matches_bf16_draw():
    lw = make_weights(CFG, "layer", 3, expert_format="mxfp4", layer_idx=3)
    mw = make_weights(CFG, "mla", 3)
    assert torch.equal(lw["attn.q_a.weight"], mw["q_a.weight"])
    from reference import mxfp4
    b = make_weights(CFG, "moe", 3, expert_format="bf16")["experts.w13"].float()
    q = mxfp4.dequantize(lw["mlp.experts.w13_packed"], lw["mlp.experts.w13_scale"])
    assert ((q - b).norm() / b.norm()) < 0.2
    codes = lw["mlp.experts.w13_scale"]
    assert 112 <= int(codes.min()) and int(codes.max()) <= 127


def test_input_conventions():
    mla = make_inputs(CFG, "mla", 1, batch=4, cache_lens=[0, 3, 9, 1])
    assert mla["kv_cache"].shape == (4, 16, CFG.mla_cache_dim)             # 9+1 rounded up to 8
    for b, L in enumerate([0, 3, 9, 1]):
        assert torch.isfinite(mla["kv_cache"][b, :L]).all() and torch.isnan(mla["kv_cache"][b, L:]).all()
    kda = make_inputs(CFG, "kda", 1, batch=5)
    idx = kda["state_idx"].tolist()
    assert kda["conv_state"].shape[0] == 6 and sorted(idx) == [1, 2, 3, 4, 5] and idx != sorted(idx)
    assert kda["conv_state"].dtype == torch.bfloat16 and kda["recurrent_state"].dtype == torch.float32
    l0 = make_inputs(CFG, "layer", 1, batch=2, layer_idx=0)
    assert "delta" not in l0 and torch.isnan(l0["blocks"]).all()
    l3 = make_inputs(CFG, "layer", 1, batch=2, layer_idx=3)                 # reads blocks 0, 1
    assert torch.isfinite(l3["blocks"][:, :2]).all() and torch.isnan(l3["blocks"][:, 2:]).all()
    rms = lambda t: float(t.float().pow(2).mean().sqrt())
    x = {v: make_inputs(CFG, "moe", 1, batch=64, value_dist=v)["x"] for v in ("plain", "large", "tiny", "outliers")}
    assert 0.9 < rms(x["plain"]) < 1.1 and 27 < rms(x["large"]) < 33 and 0.9e-3 < rms(x["tiny"]) < 1.1e-3
    col = x["outliers"].float().abs().mean(0)
    assert col.max() > 50 * col.median()


@pytest.mark.parametrize("stage,layer_idx,fmt", STAGE_ARGS)
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_contract_names_dtypes_shapes_and_no_mutation(stage, layer_idx, fmt, mode):
    w = make_weights(CFG, stage, 11, expert_format=fmt, layer_idx=layer_idx)
    kw = {"layer_idx": layer_idx} if stage == "layer" else {}
    inp = make_inputs(CFG, stage, 12, batch=3, **kw)
    w0, i0 = {k: v.clone() for k, v in w.items()}, {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    r = run_stage(stage, CFG, w, inp, mode)
    assert same(w, w0) and same(inp, i0)                                    # nothing mutated
    sizes = contract.dims(CFG, stage, inp)
    specs = contract.OUTPUTS[stage] if layer_idx != 0 or stage != "moe" else [s for s in contract.OUTPUTS["moe"] if s.final]
    for spec in specs:
        assert spec.name in r, spec.name
        assert tuple(r[spec.name].shape) == contract.resolve_shape(spec, sizes), spec.name
        want = spec.dtype if (mode == "faithful" or not spec.dtype.is_floating_point) else torch.float64
        assert r[spec.name].dtype == want, spec.name
    for s in contract.STATE[stage]:
        if s in inp:
            assert r[s].shape == inp[s].shape
            assert r[s].dtype == (inp[s].dtype if mode == "faithful" else torch.float64)
    if stage == "moe" and layer_idx is None:
        assert r["sel_gap"].dtype == torch.float64 and r["sel_gap"].shape == (3,)


@pytest.mark.parametrize("mode", ["exact", "faithful"])
@pytest.mark.parametrize("stage,layer_idx", [("moe", None), ("mla", None), ("kda", None), ("layer", 1),
                                             ("layer", 4)])
def test_run_stage_never_writes_its_inputs_or_weights(stage, layer_idx, mode):
    """k3diff's runner hands the reference the very tensors it hands the controls to clone for
    the candidate (k3diff.runner._with_state): the reference must not write a single input bit."""
    cfg = preset("tiny")
    w = make_weights(cfg, stage, 3, layer_idx=layer_idx)
    kw = {"layer_idx": layer_idx} if layer_idx is not None else {}
    inp = make_inputs(cfg, stage, 4, batch=5, **kw)
    bits = lambda t: t.contiguous().view(torch.uint8) if t.is_floating_point() else t      # noqa: E731
    before = {k: bits(v).clone() for k, v in {**inp, **w}.items() if torch.is_tensor(v)}
    run_stage(stage, cfg, w, inp, mode)
    for k, v in {**inp, **w}.items():
        if torch.is_tensor(v):
            assert torch.equal(bits(v), before[k]), k


@pytest.mark.parametrize("per_call", [1, 3, 64])
def test_mxfp4_experts_quantised_together_have_the_bits_of_each_quantised_alone(monkeypatch, per_call):
    """make_experts quantises a few experts per call: each must get the bits quantize() gives it
    alone (the draws expert by expert, as before), whatever the number per call and a last call
    of fewer."""
    from reference import materialize as mat
    from reference import mxfp4

    cfg = preset("tiny")
    shape = mat._stage_weights(cfg, "moe", None, "mxfp4")["experts.w13_packed"][0]
    one = 4 * shape[1] * 2 * shape[2]
    monkeypatch.setattr(mat, "_QUANTIZE_BYTES", per_call * one)
    got = mat.make_experts(cfg, "moe", 5, expert_format="mxfp4", n=7)
    for e in range(7):
        p, s = mxfp4.quantize(mat._expert_draw(5, "experts.w13", e, (shape[1], 2 * shape[2]), torch.device("cpu")))
        assert torch.equal(got["experts.w13_packed"][e], p) and torch.equal(got["experts.w13_scale"][e], s)
