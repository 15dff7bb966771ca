"""MLA launch 1: the latent norms and the cache write (docs/k3-decode.md §3.1, 3.3), one CTA per token:
q_c = bf16(RMSNorm(z[:QL]) w_q), kv_c = bf16(RMSNorm(z[QL:QL+R]) w_kv) (f32 math, one rounding
each), k_pe = z[QL+R : QL+C] unchanged, and the token's cache row L_t = [kv_c | k_pe] written
before any attention reads it. Sums of squares: each thread's elements in order, then a warp
butterfly, then the warps' partials in order (fixed, whatever the batch).
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, row_ptr, warp_sum
from megakernel.kernel_args import INT, TokenLaunch, declare

THREADS = 256


@declare
class MlaNorm(TokenLaunch):
    ARGS = (("z", BFloat16), ("q_norm", BFloat16), ("kv_norm", BFloat16), ("lens", Int32),
            ("qc", BFloat16), ("kvc", BFloat16), ("kpe", BFloat16), ("kv_cache", BFloat16),
            ("T", INT), ("Lcap", INT))

    CTAS, threads = 1, THREADS        # grid (T, 1): one CTA per token (TokenLaunch)

    @cute.jit
    def body(self, z, q_norm, kv_norm, lens, qc, kvc, kpe, kv_cache, T, Lcap, t, by):
        md = self.dm
        QL, R, RP, C, NA = md.QL, md.R, md.RP, md.C, md.NA
        NW = THREADS // 32
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        warp = i // 32
        Z = cute.make_tensor(z, cute.make_layout((T, NA), stride=(NA, 1)))
        WQ = cute.make_tensor(q_norm, cute.make_layout((QL,), stride=(1,)))
        WK = cute.make_tensor(kv_norm, cute.make_layout((R,), stride=(1,)))
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        QC = cute.make_tensor(qc, cute.make_layout((T, QL), stride=(QL, 1)))
        KVC = cute.make_tensor(kvc, cute.make_layout((T, R), stride=(R, 1)))
        KPE = cute.make_tensor(kpe, cute.make_layout((T, RP), stride=(RP, 1)))
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout((2, NW), stride=(NW, 1)), 16)
        sq = Float32(0.0)
        for c in cutlass.range(i, QL, THREADS):
            v = Z[t, c].to(Float32)
            sq = sq + v * v
        sk = Float32(0.0)
        for c in cutlass.range(i, R, THREADS):
            v = Z[t, QL + c].to(Float32)
            sk = sk + v * v
        sq = warp_sum(sq)
        sk = warp_sum(sk)
        if lane == 0:
            red[0, warp] = sq
            red[1, warp] = sk
        cute.arch.sync_threads()
        tq = red[0, 0]
        tk = red[1, 0]
        for w in cutlass.range_constexpr(1, NW):
            tq = tq + red[0, w]
            tk = tk + red[1, w]
        iq = cute.math.rsqrt(tq / Float32(QL) + Float32(md.eps))
        ik = cute.math.rsqrt(tk / Float32(R) + Float32(md.eps))
        # the cache row of this token's sequence: row L_t of [T, Lcap, C], 64-bit offset
        CR = cute.make_tensor(row_ptr(kv_cache, t * Lcap + LENS[t], C, 1),
                              cute.make_layout((C,), stride=(1,)))
        for c in cutlass.range(i, QL, THREADS):
            QC[t, c] = (Z[t, c].to(Float32) * iq * WQ[c].to(Float32)).to(BFloat16)
        for c in cutlass.range(i, R, THREADS):
            v = (Z[t, QL + c].to(Float32) * ik * WK[c].to(Float32)).to(BFloat16)
            KVC[t, c] = v
            CR[c] = v
        for c in cutlass.range(i, RP, THREADS):
            v = Z[t, QL + R + c]
            KPE[t, c] = v
            CR[R + c] = v
