"""The "abs." contractions of exact mode with magnitudes (reference/numerics.py): every existing
output bit for bit as without them, and each magnitude a true upper bound of its output."""
import pytest
import torch

from reference import Numerics, make_inputs, make_weights, preset, run_stage

MAG = Numerics("exact", magnitudes=True)
CFG = preset("tiny")


def _inputs(stage, layer_idx=None):
    kw = {"moe": dict(batch=6), "mla": dict(batch=4, cache_lens=[0, 3, 64, 70]),
          "kda": dict(batch=4, state_idx=[3, 0, 1, 2], n_slots=5),
          "layer": dict(batch=3, layer_idx=layer_idx)}[stage]
    w = make_weights(CFG, stage, 11, expert_format="bf16", **({"layer_idx": layer_idx} if stage == "layer" else {}))
    return w, make_inputs(CFG, stage, 12, value_dist="outliers", **kw)


@pytest.mark.parametrize("stage,layer_idx", [("moe", None), ("mla", None), ("kda", None), ("layer", 3), ("layer", 4)])
def test_magnitudes_change_no_output_bit_and_bound_their_outputs(stage, layer_idx):
    w, x = _inputs(stage, layer_idx)
    plain, mag = run_stage(stage, CFG, w, x, "exact"), run_stage(stage, CFG, w, x, MAG)
    assert set(plain) == {k for k in mag if not k.startswith("abs.")}
    for k, v in plain.items():
        assert torch.equal(v, mag[k]) or (v.is_floating_point() and torch.equal(torch.isnan(v), torch.isnan(mag[k]))
                                          and torch.equal(v.nan_to_num(), mag[k].nan_to_num())), k
    abs_names = [k for k in mag if k.startswith("abs.")]
    assert abs_names, "no magnitudes returned"
    for k in abs_names:
        name = k[4:]
        a = mag[k]
        assert a.dtype == torch.float64 and bool((a >= 0).all()), k
        out = plain.get(name)
        if name == "recurrent_state":             # given at the live slots only (the rest is untouched)
            live = x["state_idx"][x["state_idx"] > 0].long()
            out, a = out[live], a[live]
        if name.endswith("topk_weights"):         # a sensitivity, not a contraction: tested below
            continue
        if out is not None and out.shape == a.shape:
            # Σ|a_k||b_k| >= |Σ a_k b_k|: each magnitude bounds its own output (up to its rounding)
            assert bool((out.abs() <= a * (1 + 1e-12) + 1e-300).all()), k


def test_magnitudes_only_in_exact_mode():
    with pytest.raises(ValueError):
        Numerics("faithful", magnitudes=True)


def test_topk_weights_magnitude_bounds_the_weights_moved_by_logit_errors():
    """abs.topk_weights carries the logits' Σ|x||w| through w_j = rsf·σ(l_j)/Σσ: logits moved by up to
    ε·A_i each move every weight by at most about ε·abs.topk_weights (first order)."""
    from reference.config import preset
    from reference.moe import _weights_magnitude

    cfg = preset("tiny").replace(routed_scaling_factor=2.5)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, cfg.n_experts, generator=g, dtype=torch.float64) * 3
    A = torch.rand(5, cfg.n_experts, generator=g, dtype=torch.float64) * 10
    ids = torch.topk(logits, cfg.top_k, dim=-1).indices
    mag = _weights_magnitude(logits, A, ids, cfg)

    def weights(lg):
        s = torch.gather(torch.sigmoid(lg), 1, ids)
        return cfg.routed_scaling_factor * s / s.sum(-1, keepdim=True)

    eps = 1e-7
    for sign in (torch.ones_like(A), -torch.ones_like(A), torch.sign(torch.randn(A.shape, generator=g))):
        moved = (weights(logits + eps * A * sign) - weights(logits)).abs()
        assert bool((moved <= eps * mag * (1 + 1e-3) + 1e-15).all())
    assert bool((mag > 0).all())
