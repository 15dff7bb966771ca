"""Weighted combine + latent RMSNorm, one CTA per token.

yc = bf16(sum_j w_j f32(y_j)) over the slots in order 0..k-1, dropped (-1) slots skipped: a fixed
order with no atomics (deterministic). yn = bf16(yc * rsqrt(mean(yc^2) + eps) * w_norm), f32 math,
one rounding (the RMSNorm choice documented in K3_SPEC 7).
"""
from megakernel.dev import (cute, cutlass, BFloat16, Float32, Int32, warp_sum)


THREADS = 512   # more threads than the row kernels: this launch is latency-bound (1 CTA/token)
WARPS = THREADS // 32


class Combine:
    def __init__(self, dims):
        self.dm = dims
        self.NPT = (dims.r + THREADS - 1) // THREADS

    @cute.jit
    def __call__(self, ids: cute.Pointer, wts: cute.Pointer, y: cute.Pointer, nw: cute.Pointer,
                 yc: cute.Pointer, yn: cute.Pointer, T: Int32, stream):
        self.kernel(ids, wts, y, nw, yc, yn, T).launch(grid=(T, 1, 1), block=(THREADS, 1, 1),
                                                       stream=stream)

    @cute.kernel
    def kernel(self, ids: cute.Pointer, wts: cute.Pointer, y: cute.Pointer, nw: cute.Pointer,
               yc: cute.Pointer, yn: cute.Pointer, T: Int32):
        dm = self.dm
        k, r = dm.k, dm.r
        tid, _, _ = cute.arch.thread_idx()
        t, _, _ = cute.arch.block_idx()
        lane = tid % 32
        warp = tid // 32
        IDS = cute.make_tensor(ids, cute.make_layout((T, k), stride=(k, 1)))
        WTS = cute.make_tensor(wts, cute.make_layout((T, k), stride=(k, 1)))
        Y = cute.make_tensor(y, cute.make_layout((T * k, r), stride=(r, 1)))
        NW = cute.make_tensor(nw, cute.make_layout((r,), stride=(1,)))
        YC = cute.make_tensor(yc, cute.make_layout((T, r), stride=(r, 1)))
        YN = cute.make_tensor(yn, cute.make_layout((T, r), stride=(r, 1)))
        smem = cutlass.memory.SmemAllocator()
        part = smem.allocate_tensor(Float32, cute.make_layout((WARPS,), stride=(1,)), 16)
        vals = cute.make_rmem_tensor((self.NPT,), Float32)
        idr = cute.make_rmem_tensor((k,), Int32)      # ids and weights hoisted: the Y loads
        wr = cute.make_rmem_tensor((k,), Float32)     # below are then independent of each other
        for j in cutlass.range_constexpr(k):
            idr[j] = IDS[t, j]
            wr[j] = WTS[t, j]
        ss = Float32(0.0)
        for q in cutlass.range_constexpr(self.NPT):
            n = tid + q * THREADS
            vals[q] = Float32(0.0)
            if n < r:
                acc = Float32(0.0)
                for j in cutlass.range_constexpr(k):
                    if idr[j] >= 0:
                        acc = acc + wr[j] * Y[t * k + j, n].to(Float32)
                cb = acc.to(BFloat16)
                YC[t, n] = cb
                v = cb.to(Float32)
                vals[q] = v
                ss = ss + v * v
        ss = warp_sum(ss)
        if lane == 0:
            part[warp] = ss
        cute.arch.sync_threads()
        tot = part[0]
        for w in cutlass.range_constexpr(1, WARPS):
            tot = tot + part[w]
        rinv = cute.math.rsqrt(tot / Float32(r) + Float32(dm.eps))
        for q in cutlass.range_constexpr(self.NPT):
            n = tid + q * THREADS
            if n < r:
                YN[t, n] = (vals[q] * rinv * NW[n].to(Float32)).to(BFloat16)
