"""MLA launch 5: the splits merged, the value up-projection and the output gate (K3_SPEC 3.4-3.5),
one CTA per (token, head): M = max_s m_s, w_s = exp(m_s - M) (0 for an empty split), lat =
bf16(sum_s w_s acc_s / sum_s w_s l_s) in split order; o[c] = bf16(sum_l lat[l] W_UV[h, c, l])
(W_UV[h] = rows NP..NP+V-1 of head h's block of kv_b); gated = bf16(o sigmoid(gz)), gz the gate
columns of the fused x-side projection. f32 math, the spec's roundings.
The value projection: a warp per output column c (4 at a time, their sums independent), lane j
taking the 8-element chunks j, j + 32, ... of W_UV[h, c] (16-byte loads, coalesced over the
row) and of lat, then a butterfly sum: a fixed order. v1 gave each thread a column and walked
its row alone (uncoalesced, the rows thrashing L1): 13.5 us at batch 1, 253 at 64 (NOTES.md).
"""
from megakernel.device import (cute, cutlass, BFloat16, Float32, copy_atom_128, load8_bf16_f32,
                               warp_sum)
from megakernel.kernel_args import INT, TokenLaunch, declare
from megakernel.pointwise import sigmoid

THREADS = 128
OC = 4          # output columns a warp sums at once


@declare
class MlaMerge(TokenLaunch):
    ARGS = (("pm", Float32), ("pl", Float32), ("pa", Float32), ("kv_b", BFloat16), ("z", BFloat16),
            ("lat", BFloat16), ("o", BFloat16), ("gated", BFloat16), ("T", INT), ("NS", INT))

    threads = THREADS

    def __init__(self, md):
        super().__init__(md)
        self.CTAS = md.H              # grid (T, H): one CTA per (token, head) (TokenLaunch)

    @cute.jit
    def body(self, pm, pl, pa, kv_b, z, lat, o, gated, T, NS, t, h):
        md = self.dm
        H, R, NP, V, NA = md.H, md.R, md.NP, md.V, md.NA
        G0 = md.QL + md.C                    # first gate column of z
        i, _, _ = cute.arch.thread_idx()
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PA = cute.make_tensor(pa, cute.make_layout((T, H, NS, R), stride=(H * NS * R, NS * R, R, 1)))
        Z = cute.make_tensor(z, cute.make_layout((T, NA), stride=(NA, 1)))
        LAT = cute.make_tensor(lat, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        O = cute.make_tensor(o, cute.make_layout((T, H, V), stride=(H * V, V, 1)))
        GT = cute.make_tensor(gated, cute.make_layout((T, H * V), stride=(H * V, 1)))
        smem = cutlass.memory.SmemAllocator()
        sl = smem.allocate_tensor(Float32, cute.make_layout((R,), stride=(1,)), 16)
        M = PM[t, h, 0]                      # split 0 always holds row 0: never empty
        # the split loops unrolled: their loads are independent, only the sums are in order
        for s in cutlass.range(1, NS, unroll=4):
            M = cutlass.max(M, PM[t, h, s])
        L = Float32(0.0)
        for s in cutlass.range(NS, unroll=4):
            L = L + cute.math.exp(PM[t, h, s] - M) * PL[t, h, s]
        for c in cutlass.range(i, R, THREADS):
            acc = Float32(0.0)
            for s in cutlass.range(NS, unroll=4):
                acc = acc + cute.math.exp(PM[t, h, s] - M) * PA[t, h, s, c]
            v = (acc / L).to(BFloat16)
            LAT[t, h, c] = v
            sl[c] = v.to(Float32)
        cute.arch.sync_threads()
        NCH = R // 8                         # 8-element chunks of a W_UV row
        NC = (NCH + 31) // 32                # per lane (the last one guarded when R % 256)
        WV = cute.make_tensor(kv_b, cute.make_layout((H, NP + V, NCH, 8),
                                                     stride=((NP + V) * R, R, 8, 1)))
        batom = copy_atom_128(BFloat16)
        lane = i % 32
        W = THREADS // 32
        for c0 in cutlass.range(i // 32 * OC, V, W * OC):
            acc = cute.make_rmem_tensor((OC,), Float32)
            for u in cutlass.range_constexpr(OC):
                acc[u] = Float32(0.0)
            for cc in cutlass.range_constexpr(NC):
                k = lane + 32 * cc
                if k < NCH:
                    for u in cutlass.range_constexpr(OC):
                        w = load8_bf16_f32(batom, WV[h, NP + cutlass.min(c0 + u, V - 1), k, None])
                        a = acc[u]
                        for e in cutlass.range_constexpr(8):
                            a = a + sl[8 * k + e] * w[e]
                        acc[u] = a
            for u in cutlass.range_constexpr(OC):
                ob = warp_sum(acc[u]).to(BFloat16)
                c = c0 + u
                if lane == 0 and c < V:
                    O[t, h, c] = ob
                    GT[t, h * V + c] = (ob.to(Float32) * sigmoid(Z[t, G0 + h * V + c].to(Float32))).to(BFloat16)
