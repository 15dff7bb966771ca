"""MLA launch 5: the splits merged, then (value=True, the CUDA-core path) the value up-projection and
the output gate (docs/k3-decode.md §3.4-3.5); with value=False only lat (body_lat, below), the rest
being the tensor cores' (k_mla_heads.py, mla_uv). For a tile of TT tokens and one of VQ slices of a head's V output columns per CTA: M = max_s m_s,
w_s = exp(m_s - M) (0 for an empty split), lat = bf16(sum_s w_s acc_s / sum_s w_s l_s) in split
order; o[c] = bf16(sum_l lat[l] W_UV[h, c, l]) (W_UV[h] = rows NP..NP+V-1 of head h's block of
kv_b); gated = bf16(o sigmoid(gz)), gz the gate columns of the fused x-side projection. f32 math,
the spec's roundings.
The value projection: a warp per output column c (OC at a time, their sums independent), lane j
taking the 8-element chunks j, j + 32, ... of W_UV[h, c] (16-byte loads, coalesced over the row)
and of each tile token's lat, then a butterfly sum: a fixed order, the same for every TT and VQ,
so the bits depend on neither (nor on the batch).
Why slices: at batch 1 v2 (one CTA per (token, head), lab/mla/) ran 96 CTAs on 132 SMs, each a
chain of dependent loads (25 us at 1k); VQ slices make VQ times the CTAs, each merging the
splits again (they are small and in L2). Tiles of TT tokens read each W_UV row once per tile
(v2 re-read its 12.6 MB from L2 for every token), but merging the splits is the cost and a tile
merges its tokens' splits in one CTA: measured, TT > 1 never paid (variant, below).
The splits are merged with the split loop outside and the tokens and columns inside, so the
loads of independent sums overlap (v3's first run merged a tile's tokens one after another:
215 us at batch 8, 1k cache, where v2 took 35).
The lat-only merge (the step's on the tensor-core path) reads the partials and nothing else, so
it is a stream: a thread takes 4 consecutive columns of one head by 16-byte loads, UNROLL splits
in flight. The old one (a thread per column, 4-byte loads, 2 in flight) read 2.6 TB/s at 64 / 32k;
this one 3.9 (805 MB of partials in 313.5 vs 202.5-205.1 us; the same bits on 8 rows).
"""
from megakernel.device import (cute, cutlass, BFloat16, Float32, Int32, copy_atom_128,
                               load8_bf16_f32, row_ptr, warp_sum)
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import sigmoid

THREADS = 128
OC = 4          # output columns a warp sums at once
# the lat-only merge (body_lat): CTAs of VEC threads, UNROLL splits' 16-byte loads in flight.
# Against 64 and 128 threads (unroll 4, 8) and the old merge (`tune_attn --lat-merges`,
# the same bits): the fastest at batch 1 and 8, within 1.3% at 64; 1.2-1.9x the old
VEC = 32
UNROLL = 8


@declare
class MlaMerge:
    ARGS = (("pm", Float32), ("pl", Float32), ("pa", Float32), ("kv_b", BFloat16), ("z", BFloat16),
            ("lat", BFloat16), ("o", BFloat16), ("gated", BFloat16), ("T", INT), ("NS", INT))

    def __init__(self, md, TT: int = 1, VQ: int = 1, value: bool = True, vec: int = VEC,
                 unroll: int = UNROLL):
        """value=False: the splits merged into lat only (body_lat), by CTAs of `vec` threads,
        `unroll` splits' loads in flight; the value projection and the gate are then
        k_mla_heads.py's (mla_uv). TT, VQ: value=True's tiles (body)."""
        assert md.V % (VQ * OC) == 0 and md.R % 4 == 0, (md.V, md.R, VQ)
        assert vec >= 1 and unroll >= 1, (vec, unroll)
        self.md, self.TT, self.VQ, self.value, self.vec, self.unroll = md, TT, VQ, value, vec, unroll

    def ctas(self, T: int) -> int:
        """The launch's CTAs at batch T (the grid of __call__; experimental/layer_graph.py plans a
        task for each)."""
        if not self.value:
            return T * -(-self.md.H * self.md.R // 4 // self.vec)
        return -(-T // self.TT) * self.md.H * self.VQ

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        if cutlass.const_expr(not self.value):
            chunks = self.md.H * self.md.R // 4
            self.kernel(*A.kernel()).launch(grid=(A.T, (chunks + self.vec - 1) // self.vec, 1),
                                            block=(self.vec, 1, 1), stream=A.stream)
        else:
            self.kernel(*A.kernel()).launch(grid=((A.T + self.TT - 1) // self.TT, self.md.H * self.VQ, 1),
                                            block=(THREADS, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        bx, by, _ = cute.arch.block_idx()
        if cutlass.const_expr(not self.value):
            self.body_lat(*a, bx, by)
        else:
            self.body(*a, bx, by)

    @cute.jit
    def body_lat(self, pm, pl, pa, kv_b, z, lat, o, gated, T, NS, t, by):
        """lat only: thread i of CTA (t, by) merges chunk g = by vec + i of token t's H x R / 4
        chunks of 4 latent columns (head g // (R / 4)) by 16-byte loads, each column's sum the
        one of body(): M = max_s m_s from split 0, then l and acc over the splits in order."""
        md = self.md
        H, R = md.H, md.R
        RC = R // 4
        i, _, _ = cute.arch.thread_idx()
        g = by * self.vec + i
        if g < H * RC:
            h, c = g // RC, g % RC
            PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
            PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
            row0 = (t * H + h) * NS          # the partial rows of (t, h), R floats each
            LAT = cute.make_tensor(lat, cute.make_layout((T, H, RC, 4), stride=(H * R, R, 4, 1)))
            fatom = copy_atom_128(Float32)
            M = PM[t, h, 0]
            for s in cutlass.range(1, NS, unroll=2):
                M = cutlass.max(M, PM[t, h, s])
            L = Float32(0.0)
            acc = cute.make_rmem_tensor((4,), Float32)
            for k in cutlass.range_constexpr(4):
                acc[k] = Float32(0.0)
            for s in cutlass.range(NS, unroll=self.unroll):
                e = cute.math.exp(PM[t, h, s] - M)
                L = L + e * PL[t, h, s]
                v = cute.make_rmem_tensor((4,), Float32)
                PA = cute.make_tensor(row_ptr(pa, row0 + s, R, 4),
                                      cute.make_layout((RC, 4), stride=(4, 1)))
                cute.copy(fatom, PA[c, None], v)
                for k in cutlass.range_constexpr(4):
                    acc[k] = acc[k] + e * v[k]
            for k in cutlass.range_constexpr(4):
                LAT[t, h, c, k] = (acc[k] / L).to(BFloat16)

    @cute.jit
    def body(self, pm, pl, pa, kv_b, z, lat, o, gated, T, NS, bx, by):
        md, TT, VQ = self.md, self.TT, self.VQ
        H, R = md.H, md.R
        h, q = by // VQ, by % VQ
        t0 = bx * TT
        i, _, _ = cute.arch.thread_idx()
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PA = cute.make_tensor(pa, cute.make_layout((T, H, NS, R), stride=(H * NS * R, NS * R, R, 1)))
        LAT = cute.make_tensor(lat, cute.make_layout((T, H, R), stride=(H * R, R, 1)))
        smem = cutlass.memory.SmemAllocator()
        sl = smem.allocate_tensor(Float32, cute.make_layout((TT, R), stride=(R, 1)), 16)
        # the splits merged for every tile token at once: the split loop outside, the tokens and
        # this thread's columns inside (independent chains, so their loads overlap); each sum
        # still runs over the splits in order
        NCC = (R + THREADS - 1) // THREADS   # columns per thread
        tix = cute.make_rmem_tensor((TT,), Int32)
        Mv = cute.make_rmem_tensor((TT,), Float32)
        Lv = cute.make_rmem_tensor((TT,), Float32)
        acc1 = cute.make_rmem_tensor((TT, NCC), Float32)
        for j in cutlass.range_constexpr(TT):
            tix[j] = cutlass.min(t0 + j, T - 1)   # clamp: padded tokens are merged, never stored
            Mv[j] = PM[tix[j], h, 0]             # split 0 always holds row 0: never empty
            Lv[j] = Float32(0.0)
            for cc in cutlass.range_constexpr(NCC):
                acc1[j, cc] = Float32(0.0)
        for s in cutlass.range(1, NS, unroll=2):
            for j in cutlass.range_constexpr(TT):
                Mv[j] = cutlass.max(Mv[j], PM[tix[j], h, s])
        for s in cutlass.range(NS, unroll=2):
            for j in cutlass.range_constexpr(TT):
                e = cute.math.exp(PM[tix[j], h, s] - Mv[j])
                Lv[j] = Lv[j] + e * PL[tix[j], h, s]
                for cc in cutlass.range_constexpr(NCC):
                    c = i + THREADS * cc
                    if c < R:
                        acc1[j, cc] = acc1[j, cc] + e * PA[tix[j], h, s, c]
        for j in cutlass.range_constexpr(TT):
            for cc in cutlass.range_constexpr(NCC):
                c = i + THREADS * cc
                if c < R:
                    v = (acc1[j, cc] / Lv[j]).to(BFloat16)
                    if q == 0 and t0 + j < T:     # the slices share lat: one writes it
                        LAT[tix[j], h, c] = v
                    sl[j, c] = v.to(Float32)
        self.value_part(kv_b, z, o, gated, sl, T, t0, h, q, i)

    @cute.jit
    def value_part(self, kv_b, z, o, gated, sl, T, t0, h, q, i):
        """o and gated from the merged lat of the tile's tokens (in `sl`), on the CUDA cores."""
        md, TT, VQ = self.md, self.TT, self.VQ
        H, R, NP, V, NA = md.H, md.R, md.NP, md.V, md.NA
        G0 = md.QL + md.C                    # first gate column of z
        Z = cute.make_tensor(z, cute.make_layout((T, NA), stride=(NA, 1)))
        O = cute.make_tensor(o, cute.make_layout((T, H, V), stride=(H * V, V, 1)))
        GT = cute.make_tensor(gated, cute.make_layout((T, H * V), stride=(H * V, 1)))
        cute.arch.sync_threads()
        NCH = R // 8                         # 8-element chunks of a W_UV row
        NC = (NCH + 31) // 32                # per lane (the last one guarded when R % 256)
        WV = cute.make_tensor(kv_b, cute.make_layout((H, NP + V, NCH, 8),
                                                     stride=((NP + V) * R, R, 8, 1)))
        batom = copy_atom_128(BFloat16)
        lane = i % 32
        W = THREADS // 32
        VS = V // VQ                         # this CTA's slice of the output columns
        for c0 in cutlass.range(q * VS + i // 32 * OC, (q + 1) * VS, W * OC):
            acc = cute.make_rmem_tensor((OC, TT), Float32)
            for u in cutlass.range_constexpr(OC):
                for j in cutlass.range_constexpr(TT):
                    acc[u, j] = Float32(0.0)
            for cc in cutlass.range_constexpr(NC):
                k = lane + 32 * cc
                if k < NCH:
                    for u in cutlass.range_constexpr(OC):
                        w = load8_bf16_f32(batom, WV[h, NP + c0 + u, k, None])
                        for j in cutlass.range_constexpr(TT):
                            a = acc[u, j]
                            for e in cutlass.range_constexpr(8):
                                a = a + sl[j, 8 * k + e] * w[e]
                            acc[u, j] = a
            for u in cutlass.range_constexpr(OC):
                for j in cutlass.range_constexpr(TT):
                    ob = warp_sum(acc[u, j]).to(BFloat16)
                    c, t = c0 + u, t0 + j
                    if lane == 0 and t < T:
                        O[t, h, c] = ob
                        GT[t, h * V + c] = (ob.to(Float32) * sigmoid(Z[t, G0 + h * V + c].to(Float32))).to(BFloat16)


def variant(T, md=None, value=True):
    """value=False (the splits only): body_lat's VEC and UNROLL at every batch (they decide no
    bit). value=True: the tile of tokens and slices of a
    head's output columns at batch T (the bits depend on neither): 1 x 4 at batch 1, 1 x 1 above (`python -m megakernel.tools.tune_attn`, H200;
    timings in lab/mla/). Merging the splits is the cost, and a token tile merges its
    tokens' splits in one CTA, so tiles never paid; slices pay only while the heads alone leave
    SMs idle."""
    if not value:
        # above batch 8, CTAs of 128 threads with 4 splits in flight: the same bits, faster in
        # (H100: 283.8 vs 329.8 us at 64 / 32k, 143.0 vs 145.5 at 64 / 8k;
        # 43.5 vs 42.9 at 8 / 32k, so not at 8)
        return dict(value=False) if T <= 8 else dict(value=False, vec=128, unroll=4)
    return dict(TT=1, VQ=4 if T == 1 else 1)
