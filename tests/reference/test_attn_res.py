"""AttnRes: n = 0 is RMSNorm(prefix); the softmax mix against an explicit per-source loop."""
import torch

from reference.attn_res import attn_res
from reference.numerics import Numerics

EX, FA = Numerics("exact"), Numerics("faithful")
g = torch.Generator().manual_seed(31)
T, NB, d = 3, 4, 64
prefix = (2 * torch.randn(T, d, generator=g)).bfloat16()
delta = (0.5 * torch.randn(T, d, generator=g)).bfloat16()
blocks = (2 * torch.randn(T, NB, d, generator=g)).bfloat16()
w_norm = (1 + 0.1 * torch.randn(d, generator=g)).bfloat16()
w_proj = (torch.randn(d, generator=g) / 8).bfloat16()
w_out = (1 + 0.1 * torch.randn(d, generator=g)).bfloat16()


def test_n0_is_rmsnorm_of_prefix_plus_delta_and_block_write_is_bitwise():
    out, p, b = attn_res(FA.load(prefix), FA.load(delta), FA.load(blocks), w_norm, w_proj, w_out, 0, 2, FA)
    s = (prefix.float() + delta.float()).bfloat16()
    assert torch.equal(p.bfloat16(), s) and torch.equal(b[:, 2].bfloat16(), s)
    assert torch.equal(b[:, [0, 1, 3]], FA.load(blocks)[:, [0, 1, 3]])
    rmsnorm = lambda x: x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w_out.double()
    ex, _, _ = attn_res(EX.load(prefix), EX.load(delta), EX.load(blocks), w_norm, w_proj, w_out, 0, -1, EX)
    torch.testing.assert_close(ex, rmsnorm(prefix.double() + delta.double()), rtol=1e-14, atol=0)
    # one rounding of f32 math: within one bf16 ulp of the correctly rounded f64 result
    torch.testing.assert_close(out.double(), rmsnorm(s.double()), rtol=2 ** -8, atol=0)


def test_softmax_mix_equals_per_source_loop():
    n = 3
    out, _, _ = attn_res(EX.load(prefix), None, EX.load(blocks), w_norm, w_proj, None, n, -1, EX)
    for t in range(T):
        srcs = [blocks[t, j].double() for j in range(n)] + [prefix[t].double()]
        # key = RMSNorm(v) * w_norm (the textbook form), query = w_proj: same as u = w_norm*w_proj
        logits = [float((v / torch.sqrt((v * v).mean() + 1e-5) * w_norm.double()) @ w_proj.double()) for v in srcs]
        p = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
        want = sum(pj * v for pj, v in zip(p, srcs))                   # un-normalised values
        torch.testing.assert_close(out[t], want, rtol=1e-13, atol=1e-13)


def test_unread_block_slots_may_hold_nan():
    b = blocks.clone()
    b[:, 2:] = float("nan")
    out, _, _ = attn_res(FA.load(prefix), FA.load(delta), FA.load(b), w_norm, w_proj, w_out, 2, -1, FA)
    assert torch.isfinite(out).all()
