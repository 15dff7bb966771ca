"""MLA launch 4: attention over the latent cache, split over the cache (docs/k3-decode.md §3.4). Grid
(token, group of HG heads, split): split s covers cache rows [s ch, (s+1) ch) below n = L_t + 1
(the row of this step, written by launch 1, included), ch = CH_SHORT for n <= SHORT, else CH. A warp owns a head and walks its split
RB rows at a time: lane j holds the 8-element chunks j, j + 32, ... of the latent part of its
query ql and of each row (16-byte loads; the CTA's warps read the same rows, so all but the first
hit L1) and elements j, j + 32, ... of the rope part. The RB scores of a step are RB independent
warp butterfly sums (times s = (NP + RP)^-1/2), so their latencies overlap; v1 took one row at a
time and its chain of shuffles and exps bound it: 116 us for a 1k cache at batch 1, lab/mla/.
The warp keeps an online softmax (running max m, sum l, its share of the un-normalised latent
sum) folded once per RB rows: m' = max(m, z_0 .. z_RB-1), rows past the split's end scored -inf
(weight exactly 0). Each split writes its (m, l, acc) partial; a split past n writes (-inf, 0,
0), which the merge (k_mla_merge.py) weighs by exp(-inf) = 0, so an empty split cannot poison
it. The order within a split (steps of RB rows, rows in order within a step) and the splits
(fixed by CH) depend only on the sequence's own length: deterministic, batch-invariant.
"""
from megakernel.device import (cute, cutlass, BFloat16, Float32, Int32, copy_atom_128,
                               load8_bf16_f32, row_ptr, warp_sum)
from megakernel.kernel_args import INT, Args, declare

HG = 4          # heads (warps) per CTA
CH = 256        # cache rows per split of a long sequence (n > SHORT rows)
CH_SHORT = 64   # ... and of a short one: 4x the CTAs where a batch-1 step would leave SMs idle
SHORT = 2048
RB = 8          # rows per online-softmax step


def max_splits(n_max: int, ch: int = CH) -> int:
    """The grid's split count for sequences of at most n_max rows (host side), splits of ch rows
    past SHORT (a kernel's own: k_mla_attn_wg.py's are longer). The split size is a function of
    the sequence's own length (the bits must not depend on the batch), so the count is not
    monotonic in n: 2048 rows make 32 splits of 64, 2049 make 9 of 256."""
    return max(-(-min(n_max, SHORT) // CH_SHORT), -(-n_max // ch))


@declare
class MlaAttn:
    ARGS = (("q", BFloat16), ("ql", BFloat16), ("kv_cache", BFloat16), ("lens", Int32),
            ("pm", Float32), ("pl", Float32), ("pa", Float32), ("T", INT), ("Lcap", INT),
            ("NS", INT))

    def __init__(self, md, hg: int = HG):
        """hg: heads (warps) per CTA; any value gives the same bits (a head's sums never
        depend on the CTA it runs in)."""
        self.md, self.hg = md, hg
        self.groups = (md.H + hg - 1) // hg

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.groups, A.NS), block=(32 * self.hg, 1, 1),
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
        NCH = R // 8                        # 8-element latent chunks per row
        NC = (NCH + 31) // 32               # chunks per lane (the last one guarded when R % 256)
        NE = RP // 32                       # rope elements per lane
        scale = Float32(float(Q) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        h = g * self.hg + i // 32
        QT = cute.make_tensor(q, cute.make_layout((T, H, Q), stride=(H * Q, Q, 1)))
        QLT = cute.make_tensor(ql, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PA = cute.make_tensor(pa, cute.make_layout((T, H, NS, R), stride=(H * NS * R, NS * R, R, 1)))
        batom = copy_atom_128(BFloat16)
        if h < H:
            qr = cute.make_rmem_tensor((NC * 8 + NE,), Float32)
            acc = cute.make_rmem_tensor((NC * 8,), Float32)
            for cc in cutlass.range_constexpr(NC):
                for e in cutlass.range_constexpr(8):
                    qr[8 * cc + e] = Float32(0.0)
                    acc[8 * cc + e] = Float32(0.0)
                    if lane + 32 * cc < NCH:
                        qr[8 * cc + e] = QLT[t, h, 8 * (lane + 32 * cc) + e].to(Float32)
            for j in cutlass.range_constexpr(NE):
                qr[NC * 8 + j] = QT[t, h, NP + lane + 32 * j].to(Float32)
            cr = cute.make_rmem_tensor((RB * NC * 8,), Float32)
            z = cute.make_rmem_tensor((RB,), Float32)
            m = Float32(-float("inf"))
            l = Float32(0.0)
            n = LENS[t] + 1
            ch = CH
            if n <= SHORT:
                ch = CH_SHORT
            end = cutlass.min(s * ch + ch, n)
            for p0 in cutlass.range(s * ch, end, RB):
                for r in cutlass.range_constexpr(RB):
                    row = t * Lcap + cutlass.min(p0 + r, end - 1)   # past the end: scored -inf
                    CV = cute.make_tensor(row_ptr(kv_cache, row, C, 8),
                                          cute.make_layout((C // 8, 8), stride=(8, 1)))
                    CR = cute.make_tensor(row_ptr(kv_cache, row, C, 1),
                                          cute.make_layout((C,), stride=(1,)))
                    dot = Float32(0.0)
                    for cc in cutlass.range_constexpr(NC):
                        for e in cutlass.range_constexpr(8):
                            cr[(r * NC + cc) * 8 + e] = Float32(0.0)
                        if lane + 32 * cc < NCH:
                            v = load8_bf16_f32(batom, CV[lane + 32 * cc, None])
                            for e in cutlass.range_constexpr(8):
                                cr[(r * NC + cc) * 8 + e] = v[e]
                        for e in cutlass.range_constexpr(8):
                            dot = dot + qr[8 * cc + e] * cr[(r * NC + cc) * 8 + e]
                    for j in cutlass.range_constexpr(NE):
                        dot = dot + qr[NC * 8 + j] * CR[R + lane + 32 * j].to(Float32)
                    z[r] = dot
                mn = m
                for r in cutlass.range_constexpr(RB):
                    zs = warp_sum(z[r]) * scale
                    if p0 + r >= end:
                        zs = Float32(-float("inf"))
                    z[r] = zs
                    mn = cutlass.max(mn, zs)
                a = cute.math.exp(m - mn)
                l = l * a
                for e in cutlass.range_constexpr(NC * 8):
                    acc[e] = acc[e] * a
                for r in cutlass.range_constexpr(RB):
                    p = cute.math.exp(z[r] - mn)
                    l = l + p
                    for e in cutlass.range_constexpr(NC * 8):
                        acc[e] = acc[e] + p * cr[r * NC * 8 + e]
                m = mn
            if lane == 0:
                PM[t, h, s] = m
                PL[t, h, s] = l
            for cc in cutlass.range_constexpr(NC):
                if lane + 32 * cc < NCH:
                    for e in cutlass.range_constexpr(8):
                        PA[t, h, s, 8 * (lane + 32 * cc) + e] = acc[8 * cc + e]
