"""MLA launch 4: attention over the latent cache, split over the cache (K3_SPEC 3.4). Grid
(token, group of HG heads, split): split s covers cache rows [s CH, (s+1) CH) below n = L_t + 1
(the row of this step, written by launch 1, included). A warp owns a head: lane j holds elements
j, j+32, ... of its query [ql | q_pe] and of each cache row (the CTA's warps read the same rows,
so all but the first hit L1); the score is a warp butterfly sum times s = (NP + RP)^-1/2, and
the warp keeps an online softmax (running max m, sum l, and its 32nd of the un-normalised latent
sum). Each split writes its (m, l, acc) partial; a split past n writes (-inf, 0, 0), which the
merge (k_mla_merge.py) weighs by exp(-inf) = 0, so an empty split cannot poison it. Rows in
order within a split and splits fixed by CH: deterministic, batch-invariant.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, row_ptr, warp_sum
from megakernel.kernel_args import INT, Args, declare

HG = 4          # heads (warps) per CTA
CH = 256        # cache rows per split


@declare
class MlaAttn:
    ARGS = (("q", BFloat16), ("ql", BFloat16), ("kv_cache", BFloat16), ("lens", Int32),
            ("pm", Float32), ("pl", Float32), ("pa", Float32), ("T", INT), ("Lcap", INT),
            ("NS", INT))

    def __init__(self, md):
        self.md = md
        self.groups = (md.H + HG - 1) // HG

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.groups, A.NS), block=(32 * HG, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, g, s = cute.arch.block_idx()
        self.body(*a, t, g, s)

    @cute.jit
    def body(self, q, ql, kv_cache, lens, pm, pl, pa, T, Lcap, NS, t, g, s):
        md = self.md
        H, R, RP, NP, C = md.H, md.R, md.RP, md.NP, md.C
        Q = NP + RP
        NR, NE = R // 32, RP // 32          # latent / rope elements per lane
        scale = Float32(float(Q) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        h = g * HG + i // 32
        QT = cute.make_tensor(q, cute.make_layout((T, H, Q), stride=(H * Q, Q, 1)))
        QLT = cute.make_tensor(ql, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PA = cute.make_tensor(pa, cute.make_layout((T, H, NS, R), stride=(H * NS * R, NS * R, R, 1)))
        if h < H:
            qr = cute.make_rmem_tensor((NR + NE,), Float32)
            for j in cutlass.range_constexpr(NR):
                qr[j] = QLT[t, h, lane + 32 * j].to(Float32)
            for j in cutlass.range_constexpr(NE):
                qr[NR + j] = QT[t, h, NP + lane + 32 * j].to(Float32)
            acc = cute.make_rmem_tensor((NR,), Float32)
            cr = cute.make_rmem_tensor((NR,), Float32)
            for j in cutlass.range_constexpr(NR):
                acc[j] = Float32(0.0)
            m = Float32(-float("inf"))
            l = Float32(0.0)
            n = LENS[t] + 1
            for pos in cutlass.range(s * CH, cutlass.min(s * CH + CH, n)):
                CR = cute.make_tensor(row_ptr(kv_cache, t * Lcap + pos, C, 1),
                                      cute.make_layout((C,), stride=(1,)))
                dot = Float32(0.0)
                for j in cutlass.range_constexpr(NR):
                    cr[j] = CR[lane + 32 * j].to(Float32)
                    dot = dot + qr[j] * cr[j]
                for j in cutlass.range_constexpr(NE):
                    dot = dot + qr[NR + j] * CR[R + lane + 32 * j].to(Float32)
                zs = warp_sum(dot) * scale
                mn = cutlass.max(m, zs)
                a = cute.math.exp(m - mn)
                p = cute.math.exp(zs - mn)
                l = l * a + p
                for j in cutlass.range_constexpr(NR):
                    acc[j] = acc[j] * a + p * cr[j]
                m = mn
            if lane == 0:
                PM[t, h, s] = m
                PL[t, h, s] = l
            for j in cutlass.range_constexpr(NR):
                PA[t, h, s, lane + 32 * j] = acc[j]
