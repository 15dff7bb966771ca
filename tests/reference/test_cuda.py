"""The reference runs on CUDA tensors and agrees with the CPU run (skipped without a GPU)."""
import pytest
import torch

from reference import make_inputs, make_weights, preset, run_stage

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CFG = preset("small")


@pytest.mark.parametrize("stage,layer_idx", [("moe", None), ("mla", None), ("kda", None), ("layer", 3), ("layer", 4)])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_cuda_matches_cpu(stage, layer_idx, mode):
    w = make_weights(CFG, stage, 61, expert_format="mxfp4", layer_idx=layer_idx)
    kw = {"layer_idx": layer_idx} if stage == "layer" else {}
    x = make_inputs(CFG, stage, 62, batch=5, **kw)
    wc = make_weights(CFG, stage, 61, expert_format="mxfp4", layer_idx=layer_idx, device="cuda")
    xc = make_inputs(CFG, stage, 62, batch=5, device="cuda", **kw)
    for k in x:                                   # drawn on the CPU: bit-identical on the GPU
        if isinstance(x[k], torch.Tensor):
            assert torch.equal(x[k].view(torch.uint8), xc[k].cpu().view(torch.uint8)) if x[k].dtype.is_floating_point else torch.equal(x[k], xc[k].cpu())
    r, rc = run_stage(stage, CFG, w, x, mode), run_stage(stage, CFG, wc, xc, mode)
    for k in r:
        assert rc[k].device.type == "cuda", k
        a, b = r[k], rc[k].cpu()
        if mode == "exact" or not a.is_floating_point():
            if k.endswith("topk_ids"):
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-11, equal_nan=True, msg=k)
        else:
            # f32 libm differences (exp, tanh, sigmoid) may move a bf16 rounding by one ulp, which
            # later GEMMs spread: compare like §11 does (cos, rel-L2), not elementwise
            a, b = a.double().flatten(), b.double().flatten()
            fin = torch.isfinite(a)
            assert torch.equal(fin, torch.isfinite(b)), k
            a, b = a[fin], b[fin]
            if a.norm() > 0:
                cos = float(a @ b / (a.norm() * b.norm()))
                rel = float((a - b).norm() / a.norm())
                assert cos > 0.99999 and rel < 5e-3, f"{k}: cos {cos} rel {rel}"


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_weights_for_a_gpu_are_the_cpu_draws_bit_for_bit(fmt):
    """Drawn on the CPU, MXFP4-quantised where they live (quantize is exact arithmetic)."""
    a = make_weights(CFG, "moe", 17, expert_format=fmt)
    b = make_weights(CFG, "moe", 17, expert_format=fmt, device="cuda")
    for k in a:
        assert b[k].device.type == "cuda", k
        assert torch.equal(a[k].view(torch.uint8), b[k].cpu().view(torch.uint8)), k
