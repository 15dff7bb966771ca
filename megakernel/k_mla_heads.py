"""MLA launches 3 and 6 on the tensor cores (docs/k3-decode.md §3.2, §3.5): the absorbed query and
the value up-projection with the output gate, each a GEMV per head, the heads an axis of the grid.

  mla_absorb_mma  ql[t, h, :] = bf16(W_UK[h]^T q_nope[t, h, :])        N = R, K = NP
  mla_uv          o[t, h, :]  = bf16(W_UV[h] lat[t, h, :])             N = V, K = R
                  gated[t, h V + c] = bf16(o sigmoid(gz))

Why: on the CUDA cores (k_mla_absorb.py, the value half of k_mla_merge.py) each is 0.4 G
multiply-adds at batch 64 and ran at ~6 TFLOP/s: 127 and ~160 us of an 816 us step at batch 64
with a 1k cache, while their weights are 12.6 MB each (3 us at read bandwidth;
lab/mla/). Here each head is k_gemv_mma.GemvMMA's problem (a
weight row streamed once per pass of up to 64 tokens, mma.sync m16n8k16 with the tokens as N),
so its warp tiles, K permutation and split-K order are reused as they are; only the bases move
with the head and the store (ql, or o and gated) is this file's.

W_UK[h] is [NP, R] in kv_b (the reduction runs down its columns), so the step keeps a transposed
copy made once with the weights (mla.MlaStep: wuk_t [H, R, NP], 12.6 MB at full dims), whose rows
are GemvMMA's; W_UV[h] is rows NP..NP+V-1 of head h's block of kv_b, already [V, R].

Numerics: per (t, h, output) the order is GemvMMA's (bf16 products exact, f32 accumulation: each
K split's blocks and mma in order, then the splits in order), the same whatever T, the token tile
or the grid: batch-invariant and deterministic. Other bits than the CUDA-core kernels', so the
step uses one pair for every batch (Settings.attn.mla_mma, and `fits`: dims these tiles do not
take use the CUDA-core pair; the merge then does the value projection itself).
"""
from megakernel.device import cute, BFloat16, Float32, Int64
from megakernel.kernel_args import INT, Args, declare
from megakernel.k_gemv_mma import GemvMMA
from megakernel.pointwise import sigmoid


def fits(md) -> bool:
    """Dims whose heads make GemvMMA problems: K (NP, R) in blocks of 32, 16-byte aligned rows."""
    return md.NP % 32 == 0 and md.R % 32 == 0 and md.RP % 8 == 0 and md.V % 8 == 0


# variant at batch <= 8 / > 8 (the bits depend on KS alone, which is the same for both): KS = 1 for
# the absorb (K = NP = 128 is two blocks of 64), 2 for the value projection (K = R = 512)
VARIANT = {"mla_absorb_mma": (dict(NTT=1, MT=1, KS=1, U=2, RT=4), dict(NTT=8, MT=1, KS=1, U=2, RT=4)),
           "mla_uv": (dict(NTT=1, MT=1, KS=2, U=2, RT=2), dict(NTT=8, MT=1, KS=2, U=2, RT=2))}


def variant(name, T):
    return dict(VARIANT[name][T > 8])


class _Heads(GemvMMA):
    """GemvMMA over the H heads: CTA (tile, h) runs row tile(s) `tile` of head h's GEMV, whose
    weight rows start at element w_off + h w_hs (row stride K), activations at x_off + h x_hs
    (token stride ldx); GemvMMA.store hands each output to `put` (the subclass's: ql, or o and
    gated), with `out` the tensors and h."""
    HOST_ONLY = ()

    def __init__(self, md, N, K, w_off, w_hs, x_off, x_hs, ldx, y_hs, ldy, **v):
        super().__init__(N, K, NTT=v.pop("NTT"), out_bf16=True, ldx=ldx, ldy=ldy, **v)
        self.md = md
        self.w_off, self.w_hs, self.x_off, self.x_hs, self.y_hs = w_off, w_hs, x_off, x_hs, y_hs

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(self.tiles, self.md.H, 1),
                                        block=(self.threads, 1, 1), stream=A.stream)

    @cute.jit
    def head_tile(self, w, x, out, T, tile, h):
        tid, _, _ = cute.arch.thread_idx()
        warp = tid // 32
        part = self.partials()
        rt = warp // self.KS
        wb = w.toint() + (Int64(self.w_off) + Int64(h) * Int64(self.w_hs)) * Int64(2)
        xb = x.toint() + (Int64(self.x_off) + Int64(h) * Int64(self.x_hs)) * Int64(2)
        self.warp_tile(wb, xb, out, part, T, (tile * self.RT + rt) * self.RW, rt, warp % self.KS,
                       tid % 32)


@declare
class MlaAbsorbMMA(_Heads):
    ARGS = (("wuk_t", BFloat16), ("q", BFloat16), ("ql", BFloat16), ("T", INT))

    def __init__(self, md, **v):
        Q = md.NP + md.RP
        super().__init__(md, md.R, md.NP, 0, md.R * md.NP, 0, Q, md.H * Q, md.R, md.H * md.R, **v)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        wuk_t, q, ql, T = a
        tile, h, _ = cute.arch.block_idx()
        md = self.md
        QL = cute.make_tensor(ql, cute.make_layout((T, md.H, md.R), stride=(md.H * md.R, md.R, 1)))
        self.head_tile(wuk_t, q, [QL, h], T, tile, h)

    @cute.jit
    def put(self, out, tok, row, v):
        out[0][tok, out[1], row] = v.to(BFloat16)


@declare
class MlaValueMMA(_Heads):
    ARGS = (("kv_b", BFloat16), ("lat", BFloat16), ("z", BFloat16), ("o", BFloat16),
            ("gated", BFloat16), ("T", INT))

    def __init__(self, md, **v):
        super().__init__(md, md.V, md.R, md.NP * md.R, (md.NP + md.V) * md.R, 0, md.R,
                         md.H * md.R, md.V, md.H * md.V, **v)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        kv_b, lat, z, o, gated, T = a
        tile, h, _ = cute.arch.block_idx()
        md = self.md
        HV = md.H * md.V
        O = cute.make_tensor(o, cute.make_layout((T, HV), stride=(HV, 1)))
        Z = cute.make_tensor(z, cute.make_layout((T, md.NA), stride=(md.NA, 1)))
        GT = cute.make_tensor(gated, cute.make_layout((T, HV), stride=(HV, 1)))
        self.head_tile(kv_b, lat, [O, Z, GT, h], T, tile, h)

    @cute.jit
    def put(self, out, tok, row, v):
        """o = bf16(v); gated = bf16(o sigmoid(gz)), the spec's roundings (as k_mla_merge.py)."""
        O, Z, GT, h = out
        c = h * self.md.V + row
        ob = v.to(BFloat16)
        O[tok, c] = ob
        GT[tok, c] = (ob.to(Float32) * sigmoid(Z[tok, self.md.G0 + c].to(Float32))).to(BFloat16)
