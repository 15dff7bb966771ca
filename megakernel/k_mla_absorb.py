"""MLA launch 3: the absorbed query (docs/k3-decode.md §3.2), ql[t, h, l] = bf16(sum_p q_nope[t, h, p]
W_UK[h, p, l]), W_UK[h] = rows 0..NP-1 of head h's block of kv_b [H (NP + V), R]. Grid (head,
128 latent columns, tile of TT tokens); a thread owns one column l and walks p in order (f32
fma; the weight loads coalesced over l, the query element the same for the whole CTA). v1 walked
the token tiles in one CTA: 190 us at batch 64 with 384 CTAs on 132 SMs (lab/mla/); the tiles
now re-read W_UK (12.6 MB at full dims) from L2. The order per (t, h, l) is fixed whatever the
batch or TT.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32
from megakernel.kernel_args import INT, Args, declare

THREADS = 128


@declare
class MlaAbsorb:
    ARGS = (("q", BFloat16), ("kv_b", BFloat16), ("ql", BFloat16), ("T", INT))

    def __init__(self, md, TT: int):
        self.md, self.TT = md, TT
        self.ctas = (md.R + THREADS - 1) // THREADS

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(self.md.H, self.ctas, (A.T + self.TT - 1) // self.TT),
                                        block=(THREADS, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        h, by, bz = cute.arch.block_idx()
        self.body(*a, h, by, bz)

    @cute.jit
    def body(self, q, kv_b, ql, T, h, by, bz):
        md, TT = self.md, self.TT
        H, R, NP, V = md.H, md.R, md.NP, md.V
        Q = md.NP + md.RP
        i, _, _ = cute.arch.thread_idx()
        col = by * THREADS + i
        QT = cute.make_tensor(q, cute.make_layout((T, H, Q), stride=(H * Q, Q, 1)))
        WB = cute.make_tensor(kv_b, cute.make_layout((H, NP + V, R), stride=((NP + V) * R, R, 1)))
        QLT = cute.make_tensor(ql, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        t0 = bz * TT
        if col < R:
            acc = cute.make_rmem_tensor((TT,), Float32)
            tix = cute.make_rmem_tensor((TT,), Int32)
            for j in cutlass.range_constexpr(TT):
                acc[j] = Float32(0.0)
                tix[j] = cutlass.min(t0 + j, T - 1)   # clamp: padded tokens are not stored
            for p in cutlass.range(NP):
                w = WB[h, p, col].to(Float32)
                for j in cutlass.range_constexpr(TT):
                    acc[j] = acc[j] + QT[tix[j], h, p].to(Float32) * w
            for j in cutlass.range_constexpr(TT):
                if t0 + j < T:
                    QLT[t0 + j, h, col] = acc[j].to(BFloat16)
