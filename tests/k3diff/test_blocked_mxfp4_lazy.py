"""torch-blocked reads MXFP4 experts one at a time as a step uses them: the same bits as the bf16
copy of every expert it used to make in prepare(), without that copy (59 GB at K3's 896 experts)."""
import torch

from k3diff.backends.blocked_moe import prepare_moe, run_moe
from k3diff.backends.blocked_ops import mxfp4_dequant
from k3diff.case import Case
from k3diff.materialize import materialize


def _mxfp4_case():
    case = Case("moe", batch=5, expert_format="mxfp4", seed=3).validate()
    cfg, weights, inputs = materialize(case, "cpu")[:3]
    return cfg, weights, inputs


def test_each_expert_has_the_bits_of_the_whole_copy_and_prepare_copies_none():
    cfg, w, _ = _mxfp4_case()
    p = prepare_moe(cfg, w)
    for name in ("w13", "w2"):
        packed, scale = w[f"experts.{name}_packed"], w[f"experts.{name}_scale"]
        whole = torch.stack([mxfp4_dequant(packed[e], scale[e]) for e in range(packed.shape[0])]).to(torch.bfloat16)
        for e in range(packed.shape[0]):
            got = p[name][e]
            assert got.dtype == torch.bfloat16 and torch.equal(got, whole[e])
    # nothing of the expert size is held by the prepared object: only the given tensors
    held = [v for v in p.values() if isinstance(v, torch.Tensor)]
    assert all(t.data_ptr() in {x.data_ptr() for x in w.values() if isinstance(x, torch.Tensor)} for t in held)


def test_a_step_gives_the_bits_of_the_whole_copy():
    cfg, w, inputs = _mxfp4_case()
    p = prepare_moe(cfg, w)
    whole = dict(p)
    for name in ("w13", "w2"):
        packed, scale = w[f"experts.{name}_packed"], w[f"experts.{name}_scale"]
        whole[name] = torch.stack([mxfp4_dequant(packed[e], scale[e]) for e in range(packed.shape[0])]).to(torch.bfloat16)
    a, b = run_moe(cfg, p, inputs["x"]), run_moe(cfg, whole, inputs["x"])
    for k in a:
        assert torch.equal(a[k], b[k]), k
