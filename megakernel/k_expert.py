"""Launches 4 and 5: the routed experts in latent space, one CTA per (row tile, active expert).

Grid y walks the compacted active-expert list from the schedule, so each chosen expert's weights
are streamed once per launch whatever the number of tokens that chose it: a warp holds one row
(up: a gate row and its up row) and runs its K chunks over every pair of that expert, TT tokens
per pass. Formats: bf16 rows, or MXFP4 (E2M1 nibbles + E8M0 scale per 32 K elements), decoded in
registers with mxfp4.mxfp4_word_to_f32x8 (one 16-byte load = 32 elements = one scale group).

  up:   ACT[p, i] = bf16(SiTU(hl_t . W13[e, i], hl_t . W13[e, I + i]))        (act rounding, 5.6)
  down: Y[p, n]   = bf16(ACT[p] . W2[e, n])                                     (y_j rounding, 5.6)
"""
from megakernel.device import (THREADS, WARPS, cute, cutlass, BFloat16, Float32, Int32, Uint8,
                               Uint32, copy_atom_128, load8_bf16_f32, warp_sum, row_ptr)
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import situ
from megakernel.mxfp4 import MX_POST, mxfp4_word_to_f32x8, mx_scale2


@cute.jit
def _pair_rows(PR, off, cnt, b0, k, tix, pix, TT: cutlass.Constexpr):
    for j in cutlass.range_constexpr(TT):
        p = PR[off + cutlass.min(b0 + j, cnt - 1)]   # clamp: padded slots are not stored
        pix[j] = p
        tix[j] = p // k


@declare
class ExpertLaunch:
    """The launch shared by the expert kernels (here and k_expert_mma.py): grid (row tile,
    active-expert slot), `threads` per CTA; subclasses give `tiles`, `wdt` (the weights' dtype:
    bf16, or u8 for MXFP4) and the `body` of one CTA (k_persistent.py calls the same body as a
    task). xin / yout: hl -> act (up) or act -> y (down); maxU: the grid's y extent."""
    ARGS = (("w", "wdt"), ("ws", Uint8), ("xin", BFloat16), ("nact", Int32), ("act_e", Int32),
            ("act_off", Int32), ("act_cnt", Int32), ("pairs", Int32), ("yout", BFloat16),
            ("T", INT), ("maxU", INT))
    HOST_ONLY = ("maxU",)

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(
            grid=(self.tiles, A.maxU, 1), block=(self.threads, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS less maxU
        bx, u, _ = cute.arch.block_idx()
        self.body(*a, bx, u)


class _ExpertBase(ExpertLaunch):
    def __init__(self, dims, fmt: str, TT: int, up: bool):
        assert fmt in ("bf16", "mxfp4")
        self.dm, self.fmt, self.TT, self.up = dims, fmt, TT, up
        self.wdt = BFloat16 if fmt == "bf16" else Uint8
        d = dims
        # rows per expert, K, and the width of the activation each pair reads
        self.R = 2 * d.I if up else d.r
        self.K = d.r if up else d.I
        self.NOUT = d.I if up else d.r        # output rows per pair

    threads = THREADS

    @property
    def tiles(self):
        """Row tiles (CTAs) per expert."""
        return (self.NOUT + WARPS - 1) // WARPS

    @cute.jit
    def body(self, w, ws, xin, nact, act_e, act_off, act_cnt, pairs, yout, T, bx, u):
        """Row tile bx of active expert slot u (nothing when u >= nact)."""
        dm, TT, R, K, NOUT, UP = self.dm, self.TT, self.R, self.K, self.NOUT, self.up
        E, k = dm.E, dm.k
        P = T * k
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        row = bx * WARPS + tid // 32
        NA = cute.make_tensor(nact, cute.make_layout((1,), stride=(1,)))
        AE = cute.make_tensor(act_e, cute.make_layout((E,), stride=(1,)))
        AO = cute.make_tensor(act_off, cute.make_layout((E,), stride=(1,)))
        AC = cute.make_tensor(act_cnt, cute.make_layout((E,), stride=(1,)))
        PR = cute.make_tensor(pairs, cute.make_layout((P,), stride=(1,)))
        XR = T if cutlass.const_expr(UP) else P          # x rows: tokens (up) or pairs (down)
        X = cute.make_tensor(xin, cute.make_layout((XR, K // 8, 8), stride=(K, 8, 1)))
        Y = cute.make_tensor(yout, cute.make_layout((P, NOUT), stride=(NOUT, 1)))
        batom = copy_atom_128(BFloat16)
        if u < NA[0] and row < NOUT:
            cnt = AC[u]
            ra = AE[u] * R + row              # gate row (up) or the row (down)
            # passes of TT pairs; the last pass only as wide as the pairs left (1, 2 or TT), so
            # an expert chosen once (most of them at batch <= 64) costs the FMAs of one pair,
            # not TT. The bits do not change: each pair's sum runs the same chunks in the same
            # order whatever the pass width (T == 1 builds TT = 1 and gives the same bits).
            for b0 in cutlass.range(0, cnt, TT):
                left = cnt - b0
                if cutlass.const_expr(TT <= 2):
                    self.one_pass(w, ws, X, Y, PR, AO[u], cnt, b0, ra, row, lane, batom, TT)
                else:
                    if left >= 3:
                        self.one_pass(w, ws, X, Y, PR, AO[u], cnt, b0, ra, row, lane, batom, TT)
                    elif left == 2:
                        self.one_pass(w, ws, X, Y, PR, AO[u], cnt, b0, ra, row, lane, batom, 2)
                    else:
                        self.one_pass(w, ws, X, Y, PR, AO[u], cnt, b0, ra, row, lane, batom, 1)

    @cute.jit
    def one_pass(self, w, ws, X, Y, PR, off, cnt, b0, ra, row, lane, batom, TT: cutlass.Constexpr):
        """Pairs b0 .. b0 + TT - 1 of the expert (clamped to cnt) against weight row ra (up: and
        its up row ra + NOUT): each lane's chunks in order, then the warp sum."""
        dm, K, NOUT, UP = self.dm, self.K, self.NOUT, self.up
        k = dm.k
        rb = ra + NOUT                        # up row (up only)
        tix = cute.make_rmem_tensor((TT,), Int32)
        pix = cute.make_rmem_tensor((TT,), Int32)
        acca = cute.make_rmem_tensor((TT,), Float32)
        accb = cute.make_rmem_tensor((TT,), Float32)
        _pair_rows(PR, off, cnt, b0, k, tix, pix, TT)
        for j in cutlass.range_constexpr(TT):
            acca[j] = Float32(0.0)
            accb[j] = Float32(0.0)
            if cutlass.const_expr(not UP):
                tix[j] = pix[j]               # down reads ACT by pair
        if cutlass.const_expr(self.fmt == "bf16"):
            lay = cute.make_layout((K // 8, 8), stride=(8, 1))
            WA = cute.make_tensor(row_ptr(w, ra, K, 8), lay)
            WB = cute.make_tensor(row_ptr(w, rb, K, 8), lay)
            for c in cutlass.range(lane, K // 8, 32):
                wa = load8_bf16_f32(batom, WA[c, None])
                if cutlass.const_expr(UP):
                    wb = load8_bf16_f32(batom, WB[c, None])
                for j in cutlass.range_constexpr(TT):
                    xv = load8_bf16_f32(batom, X[tix[j], c, None])
                    a = acca[j]
                    for i in cutlass.range_constexpr(8):
                        a = a + wa[i] * xv[i]
                    acca[j] = a
                    if cutlass.const_expr(UP):
                        b = accb[j]
                        for i in cutlass.range_constexpr(8):
                            b = b + wb[i] * xv[i]
                        accb[j] = b
        else:
            G = K // 32
            lay = cute.make_layout((G, 16), stride=(16, 1))
            WA = cute.make_tensor(row_ptr(w, ra, K // 2, 16), lay)
            WB = cute.make_tensor(row_ptr(w, rb, K // 2, 16), lay)
            slay = cute.make_layout((G,), stride=(1,))
            SA = cute.make_tensor(row_ptr(ws, ra, G, 1), slay)
            SB = cute.make_tensor(row_ptr(ws, rb, G, 1), slay)
            uatom = copy_atom_128(Uint8)
            for c in cutlass.range(lane, G, 32):
                fa = cute.make_rmem_tensor((16,), Uint8)
                cute.copy(uatom, WA[c, None], fa)
                wa32 = cute.recast_tensor(fa, Uint32)
                sa = mx_scale2(SA[c])
                fb = cute.make_rmem_tensor((16,), Uint8)
                if cutlass.const_expr(UP):
                    cute.copy(uatom, WB[c, None], fb)
                wb32 = cute.recast_tensor(fb, Uint32)
                sb = sa
                if cutlass.const_expr(UP):
                    sb = mx_scale2(SB[c])
                for q in cutlass.range_constexpr(4):
                    va = mxfp4_word_to_f32x8(wa32[q], sa)
                    if cutlass.const_expr(UP):
                        vb = mxfp4_word_to_f32x8(wb32[q], sb)
                    for j in cutlass.range_constexpr(TT):
                        xv = load8_bf16_f32(batom, X[tix[j], 4 * c + q, None])
                        a = acca[j]
                        for i in cutlass.range_constexpr(8):
                            a = a + va[i] * xv[i]
                        acca[j] = a
                        if cutlass.const_expr(UP):
                            b = accb[j]
                            for i in cutlass.range_constexpr(8):
                                b = b + vb[i] * xv[i]
                            accb[j] = b
        for j in cutlass.range_constexpr(TT):
            ga = warp_sum(acca[j])
            gb = Float32(0.0)
            if cutlass.const_expr(UP):
                gb = warp_sum(accb[j])
            if cutlass.const_expr(self.fmt == "mxfp4"):
                ga = ga * Float32(MX_POST)
                gb = gb * Float32(MX_POST)
            if lane == 0 and b0 + j < cnt:
                if cutlass.const_expr(UP):
                    Y[pix[j], row] = situ(ga, gb, dm.beta, dm.beta_lin).to(BFloat16)
                else:
                    Y[pix[j], row] = ga.to(BFloat16)


class ExpertUp(_ExpertBase):
    def __init__(self, dims, fmt, TT):
        super().__init__(dims, fmt, TT, up=True)


class ExpertDown(_ExpertBase):
    def __init__(self, dims, fmt, TT):
        super().__init__(dims, fmt, TT, up=False)


# token tile of the CUDA-core expert kernels at batch T > 1 (1 at batch 1)
TT_EXPERT = 4


def tile(T):
    return 1 if T == 1 else TT_EXPERT
