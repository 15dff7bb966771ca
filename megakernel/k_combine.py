"""Weighted combine + latent RMSNorm, one CTA per token.

yc = bf16(sum_j w_j f32(y_j)) over the slots in order 0..k-1, dropped (-1) slots skipped: a fixed
order with no atomics (deterministic). yn = bf16(yc * rsqrt(mean(yc^2) + eps) * w_norm), f32 math,
one rounding (the RMSNorm choice documented in docs/k3-decode.md §7).

Each (virtual) thread owns 8-column chunks c = v, v + VT, ... and reads them with 128-bit loads,
all k slots' loads independent of each other (the launch is latency-bound: 16 loads in flight
per thread instead of 16 x 7 scalar ones one column at a time). mean(yc^2): per virtual thread
over its chunks in order, butterfly per virtual warp, then the VT/32 warp partials in order.
"""
from megakernel.device import (cute, cutlass, BFloat16, Float32, Int32, copy_atom_128,
                               load8_bf16_f32, warp_sum)
from megakernel.kernel_args import INT, Args, declare

VT = 512   # "virtual" threads: the sum-of-squares order is that of 512 threads however many run


@declare
class Combine:
    ARGS = (("ids", Int32), ("wts", Float32), ("y", BFloat16), ("norm_w", BFloat16),
            ("yc", BFloat16), ("yn", BFloat16), ("T", INT))

    def __init__(self, dims, threads: int = VT):
        """512 threads alone, more than the row kernels: the launch is latency-bound (1 CTA per
        token). k_persistent.py runs the same body on CTAs of 256: each thread then plays
        VT / threads virtual threads, so the RMSNorm reduction (per virtual thread, per virtual
        warp, then the 16 warp partials in order) and hence every bit stay the same."""
        assert VT % threads == 0
        self.dm, self.threads = dims, threads
        self.H = VT // threads
        self.NPT = (dims.r // 8 + VT - 1) // VT     # 8-column chunks per virtual thread

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, 1, 1), block=(self.threads, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, _, _ = cute.arch.block_idx()
        self.body(*a, t)

    @cute.jit
    def body(self, ids, wts, y, nw, yc, yn, T, t):
        dm = self.dm
        k, r = dm.k, dm.r
        H, NPT = self.H, self.NPT
        RC = r // 8
        VW = VT // 32
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        warp = tid // 32
        IDS = cute.make_tensor(ids, cute.make_layout((T, k), stride=(k, 1)))
        WTS = cute.make_tensor(wts, cute.make_layout((T, k), stride=(k, 1)))
        Y = cute.make_tensor(y, cute.make_layout((T * k, RC, 8), stride=(r, 8, 1)))
        NW = cute.make_tensor(nw, cute.make_layout((RC, 8), stride=(8, 1)))
        YC = cute.make_tensor(yc, cute.make_layout((T, RC, 8), stride=(r, 8, 1)))
        YN = cute.make_tensor(yn, cute.make_layout((T, RC, 8), stride=(r, 8, 1)))
        atom = copy_atom_128(BFloat16)
        smem = cutlass.memory.SmemAllocator()
        part = smem.allocate_tensor(Float32, cute.make_layout((VW,), stride=(1,)), 16)
        vals = cute.make_rmem_tensor((H * NPT * 8,), Float32)
        idr = cute.make_rmem_tensor((k,), Int32)      # ids and weights hoisted: the Y loads
        wr = cute.make_rmem_tensor((k,), Float32)     # below are then independent of each other
        for j in cutlass.range_constexpr(k):
            idr[j] = IDS[t, j]
            wr[j] = WTS[t, j]
        for h in cutlass.range_constexpr(H):
            v_tid = tid + h * self.threads            # this thread's h-th virtual thread
            ss = Float32(0.0)
            for q in cutlass.range_constexpr(NPT):
                c = v_tid + q * VT
                for i in cutlass.range_constexpr(8):
                    vals[(h * NPT + q) * 8 + i] = Float32(0.0)
                if c < RC:
                    acc = cute.make_rmem_tensor((8,), Float32)
                    for i in cutlass.range_constexpr(8):
                        acc[i] = Float32(0.0)
                    for j in cutlass.range_constexpr(k):
                        if idr[j] >= 0:
                            yv = load8_bf16_f32(atom, Y[t * k + j, c, None])
                            for i in cutlass.range_constexpr(8):
                                acc[i] = acc[i] + wr[j] * yv[i]
                    cb = cute.make_rmem_tensor((8,), BFloat16)
                    for i in cutlass.range_constexpr(8):
                        cb[i] = acc[i].to(BFloat16)
                        v = cb[i].to(Float32)
                        vals[(h * NPT + q) * 8 + i] = v
                        ss = ss + v * v
                    cute.copy(atom, cb, YC[t, c, None])
            ss = warp_sum(ss)
            if lane == 0:
                part[warp + h * (self.threads // 32)] = ss
        cute.arch.sync_threads()
        tot = part[0]
        for w in cutlass.range_constexpr(1, VW):
            tot = tot + part[w]
        rinv = cute.math.rsqrt(tot / Float32(r) + Float32(dm.eps))
        for h in cutlass.range_constexpr(H):
            for q in cutlass.range_constexpr(NPT):
                c = tid + h * self.threads + q * VT
                if c < RC:
                    wn = load8_bf16_f32(atom, NW[c, None])
                    ob = cute.make_rmem_tensor((8,), BFloat16)
                    for i in cutlass.range_constexpr(8):
                        ob[i] = (vals[(h * NPT + q) * 8 + i] * rinv * wn[i]).to(BFloat16)
                    cute.copy(atom, ob, YN[t, c, None])
