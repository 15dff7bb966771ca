"""Routing and the latent rounding, one CTA per token (+ NPW CTAs for hl).

- sel = sigmoid(logit) + bias (f32; NaN selects as 0), top-k by repeated block argmax, ties to the
  LOWER expert id (docs/k3-decode.md §5.2); or forced ids (-1 = dropped route).
- weights = sigmoid(logit[id]) / sum over the valid selected ids, x routed_scaling_factor.
- hl = bf16(latent columns of S1). (The shared experts' pointwise part is
  k_shared_act.SharedAct, on the other stream.)
"""
from megakernel.device import THREADS, WARPS, cute, cutlass, BFloat16, Float32, Int32
from megakernel.pointwise import sigmoid
from megakernel.kernel_args import INT, Args, declare


@cute.jit
def _better(v, i, ov, oi):
    """True if candidate (ov, oi) beats (v, i): larger score, then lower id."""
    return (ov > v) | ((ov == v) & (oi < i))

NPW = 4   # extra CTAs per token for the latent rounding, so it runs beside the top-k CTA


@declare
class Route:
    ARGS = (("s1", Float32), ("bias", Float32), ("fids", Int32), ("ids", Int32), ("wts", Float32),
            ("hl", BFloat16), ("T", INT))

    def __init__(self, dims, forced: bool):
        self.dm = dims
        self.forced = forced
        self.EPT = (dims.E + THREADS - 1) // THREADS   # experts per thread

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(
            grid=(A.T, 1 + NPW, 1), block=(THREADS, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, by, _ = cute.arch.block_idx()
        self.body(*a, t, by)

    @cute.jit
    def body(self, s1, bias, fids, ids, wts, hl, T, t, by):
        """Token t: top-k (by == 0) or a quarter of its latent rounding (by = 1..NPW)."""
        dm = self.dm
        E, k, r = dm.E, dm.k, dm.r
        N1 = E + r
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        warp = tid // 32
        S = cute.make_tensor(s1, cute.make_layout((T, N1), stride=(N1, 1)))
        B = cute.make_tensor(bias, cute.make_layout((E,), stride=(1,)))
        IDS = cute.make_tensor(ids, cute.make_layout((T, k), stride=(k, 1)))
        WTS = cute.make_tensor(wts, cute.make_layout((T, k), stride=(k, 1)))
        HL = cute.make_tensor(hl, cute.make_layout((T, r), stride=(r, 1)))

        smem = cutlass.memory.SmemAllocator()
        cv = smem.allocate_tensor(Float32, cute.make_layout((2, WARPS), stride=(WARPS, 1)), 16)
        ci = smem.allocate_tensor(Int32, cute.make_layout((2, WARPS), stride=(WARPS, 1)), 16)
        sel_ids = smem.allocate_tensor(Int32, cute.make_layout((k,), stride=(1,)), 16)

        if by == 0:
            if cutlass.const_expr(self.forced):
                F = cute.make_tensor(fids, cute.make_layout((T, k), stride=(k, 1)))
                if tid < k:
                    sel_ids[tid] = F[t, tid]
            else:
                vals = cute.make_rmem_tensor((self.EPT,), Float32)
                for j in cutlass.range_constexpr(self.EPT):
                    e = tid + j * THREADS
                    vals[j] = -Float32.inf
                    if e < E:
                        sv = sigmoid(S[t, e]) + B[e]
                        if sv != sv:          # NaN selects as 0 (docs/k3-decode.md §5.2)
                            sv = Float32(0.0)
                        vals[j] = sv
                for s in cutlass.range(k):
                    # thread-local best: increasing e with strict '>' keeps the lower id on ties
                    bv = vals[0]
                    bi = tid
                    for j in cutlass.range_constexpr(1, self.EPT):
                        if vals[j] > bv:
                            bv = vals[j]
                            bi = tid + j * THREADS
                    for o in cutlass.range_constexpr(5):
                        ov = cute.arch.shuffle_sync_bfly(bv, offset=1 << o)
                        oi = cute.arch.shuffle_sync_bfly(bi, offset=1 << o)
                        if _better(bv, bi, ov, oi):
                            bv = ov
                            bi = oi
                    par = s % 2           # double-buffered candidates: one barrier per round
                    if lane == 0:
                        cv[par, warp] = bv
                        ci[par, warp] = bi
                    cute.arch.sync_threads()
                    bv = cv[par, 0]
                    bi = ci[par, 0]
                    for w in cutlass.range_constexpr(1, WARPS):
                        if _better(bv, bi, cv[par, w], ci[par, w]):
                            bv = cv[par, w]
                            bi = ci[par, w]
                    for j in cutlass.range_constexpr(self.EPT):
                        if bi == tid + j * THREADS:
                            vals[j] = -Float32.inf
                    if tid == 0:
                        sel_ids[s] = bi
            cute.arch.sync_threads()
            # renormalise over the valid ids: lanes 0..k-1 of warp 0, butterfly sum (fixed order)
            if warp == 0:
                ew = Int32(-1)
                sc = Float32(0.0)
                if lane < k:
                    ew = sel_ids[lane]
                    if ew >= 0:
                        sc = sigmoid(S[t, ew])
                tot = cute.arch.warp_reduction(sc, lambda a, b: a + b)
                if lane < k:
                    wv = Float32(0.0)
                    if ew >= 0:
                        wv = sc
                        if cutlass.const_expr(dm.renorm):
                            # every selected score underflowed (sigmoid of a logit below about -88
                            # is 0 in f32): 0/0 gave a NaN row on the H200 (high_ids routing, large
                            # inputs); the reference's rule gives such a row zero weights
                            if tot > Float32(0.0):
                                wv = wv / tot
                            else:
                                wv = Float32(0.0)
                        wv = wv * Float32(dm.rsf)
                    IDS[t, lane] = ew
                    WTS[t, lane] = wv
        # latent: hl = bf16(x W_down^T), CTAs by = 1..NPW
        if by > 0:
            q = (by - 1) * THREADS + tid
            for i in cutlass.range(q, r, NPW * THREADS):
                HL[t, i] = S[t, E + i].to(BFloat16)
