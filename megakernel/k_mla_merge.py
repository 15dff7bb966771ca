"""MLA launch 5: the splits merged, the value up-projection and the output gate (K3_SPEC 3.4-3.5),
one CTA per (token, head): M = max_s m_s, w_s = exp(m_s - M) (0 for an empty split), lat =
bf16(sum_s w_s acc_s / sum_s w_s l_s) in split order; o[c] = bf16(sum_l lat[l] W_UV[h, c, l])
(W_UV[h] = rows NP..NP+V-1 of head h's block of kv_b, l in order); gated = bf16(o sigmoid(gz)),
gz the gate columns of the fused x-side projection. f32 math, the spec's roundings.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32
from megakernel.kernel_args import INT, TokenLaunch, declare
from megakernel.pointwise import sigmoid

THREADS = 128


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
        WB = cute.make_tensor(kv_b, cute.make_layout((H, NP + V, R), stride=((NP + V) * R, R, 1)))
        Z = cute.make_tensor(z, cute.make_layout((T, NA), stride=(NA, 1)))
        LAT = cute.make_tensor(lat, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        O = cute.make_tensor(o, cute.make_layout((T, H, V), stride=(H * V, V, 1)))
        GT = cute.make_tensor(gated, cute.make_layout((T, H * V), stride=(H * V, 1)))
        smem = cutlass.memory.SmemAllocator()
        sl = smem.allocate_tensor(Float32, cute.make_layout((R,), stride=(1,)), 16)
        M = PM[t, h, 0]                      # split 0 always holds row 0: never empty
        for s in cutlass.range(1, NS):
            M = cutlass.max(M, PM[t, h, s])
        L = Float32(0.0)
        for s in cutlass.range(NS):
            L = L + cute.math.exp(PM[t, h, s] - M) * PL[t, h, s]
        for c in cutlass.range(i, R, THREADS):
            acc = Float32(0.0)
            for s in cutlass.range(NS):
                acc = acc + cute.math.exp(PM[t, h, s] - M) * PA[t, h, s, c]
            v = (acc / L).to(BFloat16)
            LAT[t, h, c] = v
            sl[c] = v.to(Float32)
        cute.arch.sync_threads()
        for c in cutlass.range(i, V, THREADS):
            acc = Float32(0.0)
            for k in cutlass.range(R):
                acc = acc + sl[k] * WB[h, NP + c, k].to(Float32)
            ob = acc.to(BFloat16)
            O[t, h, c] = ob
            GT[t, h * V + c] = (ob.to(Float32) * sigmoid(Z[t, G0 + h * V + c].to(Float32))).to(BFloat16)
