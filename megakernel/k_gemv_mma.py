"""The dense GEMV on the tensor cores: Y[t, n] = sum_k W[n, k] X[t, k], W [N, K] bf16, X [T, K]
bf16, every weight row streamed once per pass of up to 8 * NTT tokens (k_gemv.Gemv re-reads it
for every 8 tokens; at batch 64 that is 8 reads of each row: lab/gemv/, KDA at batch > 1).

CTA layout: RT x KS warps. Warp (rt, s) owns MT tiles of 16 output rows (the mma.sync m16n8k16
A operand, loaded straight from global memory), NTT tiles of 8 tokens (the N = 8 columns of B)
and the K blocks s, s + KS, s + 2 KS, ... (split K: with 16 rows per warp a small N would leave
the SMs idle: gemv_x has 280 row tiles of 16). The KS partial sums of a row tile meet in shared
memory and are added in the order s = 0, 1, ..., KS-1 by warp s = 0. The RT row tiles of a CTA
walk the same K blocks together, so their activation loads hit L1. K blocks of BK = 64 (32 when
K % 64 != 0); in a block, lane (g = lane/4, t = lane%4) loads BK/4
consecutive elements of rows g and g+8 of each row tile (4 lanes cover a row's 2*BK bytes,
128 B at BK = 64) and the same elements of token g of each token tile. K permutation (the same
for A and B, so the dot is unchanged): mma j of the block takes the lane's u32 words 2j, 2j+1
as k-slots (2t, 2t+1) and (2t+8, 2t+9), i.e. A = (w_g[2j], w_g8[2j], w_g[2j+1], w_g8[2j+1]) and
B = (x[2j], x[2j+1]): no shuffles, no shared memory. Activations are read through L1 (a CTA's
warps walk the same x blocks at about the same time); weights bypass it.

Numerics: products of bf16 exact, f32 accumulation in the tensor core; per (row, token) the order
is fixed: each split's sequence of blocks and mma j, then the splits in order, whatever T, NTT,
the token tile a column lands in or the grid (columns of an mma are independent):
batch-invariant and deterministic. The bits differ
from k_gemv.Gemv's CUDA-core order (each instance uses one of the two for every batch, never
one per batch size: that would break batch invariance). Padded token columns repeat token T-1 and
are not stored; rows past N repeat row N-1 and are not stored; a token tile wholly past T is
skipped.

wgmma (WG = 1; faster at batch 64, lab/gemv/): a warpgroup's 4 warps hold the A
fragments of 64 rows in the same registers as above and multiply them by X from shared memory,
wgmma m64nNk16 (N = 8, 16, 32 or 8 NTT, the narrowest that covers the pass's tokens). The split's
warps stage each block's X tile first: lane t's u32 word w of a token goes to word t of that
token's 16-byte row in core matrix w (no swizzle; core matrices 8 tokens x 8 K), so wgmma step
j reads in each K slot the element mma j reads there: the same products in the same order, and
on the H200 the same bits (tools/tune_gemv: every shape and K split; held by
tests/megakernel/test_mk_gemv_gpu.py). Warp = ks RT + rt, so a warpgroup's warps share a split;
RT a multiple of 4; the split's warpgroups share the tiles. A group's wgmma are waited for before
the next group's loads overwrite their A registers and tiles (wgmma reads both asynchronously).
"""
from megakernel.config import dsl_arch
from megakernel.cute_env import DEFAULT_ARCH
from megakernel.device import cute, cutlass, BFloat16, Float32, Int64, Uint32
from megakernel.kernel_args import declare
from megakernel.k_gemv import GemvLaunch
from megakernel.ptx import (ld_v4_stream, ld_v4_cached, mma_bf16_16816, proxy_fence_shared,
                            st_shared_u32, wgmma_bf16_rs, wgmma_commit_wait, wgmma_fence)


def wgmma_arch() -> bool:
    """wgmma is Hopper's (sm_90a). Elsewhere (GB300, sm_103a) WG = 1 runs on mma.sync, which does
    the same products in the same order."""
    return (dsl_arch() or DEFAULT_ARCH) == "sm_90a"


@declare
class GemvMMA(GemvLaunch):

    def __init__(self, N: int, K: int, NTT: int, out_bf16: bool, U: int = 2, ldx: int = 0,
                 RT: int = 4, KS: int = 1, MT: int = 1, PF: int = 0, coherent: bool = False,
                 threads: int = 0, PIPE: int = 0, ldy: int = 0, WG: int = 0, lean: int = 0):
        """NTT: token tiles of 8 per pass (a compile-time width; any T runs, in passes); U: K
        blocks whose weight loads are issued together; RT x KS warps per CTA (row tiles x K
        splits; KS is lowered to a power of two dividing the block count: a function of the
        shape alone, as the bits are); MT: 16-row tiles per warp; PF: L2 prefetch bytes on the
        weight loads; ldx / ldy: X's / Y's row stride in elements (default K / N); `coherent`:
        read X with plain loads (X written by the same launch); threads: a fixed CTA size (a task of the persistent
        launch), RT then fills it; PIPE = 1: two register buffers, the next U blocks' weight
        loads issued before the current U blocks' mma (the same sums in the same order: the
        same bits; measured: faster at batch <= 8, slower at 64, lab/gemv/);
        WG = 1: wgmma instead of mma.sync (the module docstring, "wgmma"; RT a multiple of
        4, MT = 1, PIPE = 0); lean = 1: the mma.sync K loop kept rolled (`nounroll`), for
        the persistent launch's tasks under its register cap, where ptxas's own unrolling
        hoists later blocks' loads ahead and spills them (at 80 registers, and with U = 4
        even at 255: tools/persistent_regs.py --loops); the same sums."""
        assert K % 32 == 0 and (ldx or K) % 8 == 0 and (ldy or N) >= N
        self.N, self.K, self.NTT, self.out_bf16 = N, K, NTT, out_bf16
        self.MT, self.PF, self.coherent, self.PIPE, self.lean = MT, PF, coherent, PIPE, lean
        self.ldx, self.ldy = ldx or K, ldy or N
        self.ydt = BFloat16 if out_bf16 else Float32
        self.BK = 64 if K % 64 == 0 else 32
        NB = K // self.BK
        self.KS = max(v for v in (1, 2, 4, 8) if v <= KS and NB % v == 0)
        self.RT = threads // 32 // self.KS if threads else RT
        self.WPC = self.RT * self.KS
        self.threads = 32 * self.WPC
        self.NBW = NB // self.KS                              # blocks per warp
        self.U = min(U, self.NBW)
        self.RW = 16 * MT
        self.wtiles = (N + self.RW - 1) // self.RW          # row tiles of 16 MT
        self.tiles = (self.wtiles + self.RT - 1) // self.RT  # CTA tiles (the grid's unit)
        self.NACC = MT * NTT * 4
        self.WG = WG if wgmma_arch() else 0
        self.smem_bytes = self.RT * (self.KS - 1) * self.NACC * 32 * 4       # split-K partials
        assert self.smem_bytes <= 48 * 1024, "split-K partials > 48 KB"
        if self.WG:
            assert self.RT % 4 == 0 and MT == 1 and not PIPE, "wgmma: RT % 4 == 0, MT 1, PIPE 0"
            self.XT = 8 * NTT * self.BK * 2                 # one X tile: 8 NTT tokens x BK
            self.smem_bytes += self.KS * self.U * self.XT
            assert self.smem_bytes <= 200 * 1024, "wgmma GEMV: shared memory > 200 KB"

    @cute.jit
    def body(self, w, x, y, T, lo, hi, step):
        """CTA tiles lo, lo + step, ... below hi. Every warp of the CTA runs every pass (the
        split-K barriers): a row tile past N loads row N-1 and stores nothing."""
        tid, _, _ = cute.arch.thread_idx()
        warp = tid // 32
        Y = cute.make_tensor(y, cute.make_layout((T, self.N), stride=(self.ldy, 1)))
        if cutlass.const_expr(self.WG):
            # warp = ks RT + rt: a warpgroup's 4 warps share their split
            part, xs = self.wg_smem()
            for tile in cutlass.range(lo, cutlass.min(hi, self.tiles), step):
                rt = warp % self.RT
                self.wg_tile(w.toint(), x.toint(), Y, part, xs, T,
                             (tile * self.RT + rt) * self.RW, rt, warp // self.RT, tid % (32 * self.RT))
        else:
            part = self.partials()
            for tile in cutlass.range(lo, cutlass.min(hi, self.tiles), step):
                rt = warp // self.KS
                self.warp_tile(w.toint(), x.toint(), Y, part, T,
                               (tile * self.RT + rt) * self.RW, rt, warp % self.KS, tid % 32)

    @cute.jit
    def wg_smem(self):
        """The wgmma mode's shared memory from one allocator: the split-K partials (None at
        KS = 1) and the X tiles, [KS][U] of XT bytes (their Int32 shared address)."""
        smem = cutlass.memory.SmemAllocator()
        xs = smem.allocate(self.KS * self.U * self.XT, 128).toint()
        part = None
        if cutlass.const_expr(self.KS > 1):
            part = smem.allocate_tensor(
                Float32, cute.make_layout((self.RT, self.KS - 1, self.NACC, 32),
                                          stride=((self.KS - 1) * self.NACC * 32,
                                                  self.NACC * 32, 32, 1)), 16)
        return part, xs

    @cute.jit
    def wg_tile(self, wb, xb, Y, part, xs, T, r0, rt, ks, sl):
        """warp_tile on wgmma: the split's RT warps (sl: this thread among them) stage each
        block's X tile in shared memory, K-permuted, and its warpgroups multiply their 64 rows
        (A: the same registers as mma.sync's) by it."""
        K, BK, NTT, KS, U, NBW = self.K, self.BK, self.NTT, self.KS, self.U, self.NBW
        CW = BK // 8
        lane = sl % 32
        g = lane // 4
        tg = lane % 4
        lane_off = Int64(tg * (BK // 4) * 2) + Int64(ks * BK * 2)
        wad = []
        for hh in cutlass.range_constexpr(2):
            row = cutlass.min(r0 + 8 * hh + g, self.N - 1)
            wad.append(wb + Int64(row) * Int64(2 * K) + lane_off)
        NTOK = 8 * NTT
        SPT = (4 * NTOK + 32 * self.RT - 1) // (32 * self.RT)   # X units per thread (widest pass)
        xt = xs + ks * (U * self.XT)
        Ar = cute.make_rmem_tensor((U * 2 * CW,), Uint32)
        Xr = cute.make_rmem_tensor((U * SPT * CW,), Uint32)
        acc = cute.make_rmem_tensor((self.NACC,), Float32)
        for t0 in cutlass.range(0, T, NTOK):
            for i in cutlass.range_constexpr(self.NACC):
                acc[i] = Float32(0.0)
            # the pass's wgmma as wide as its tokens need (N = 8, 16, 32 or 8 NTT: columns are
            # independent, so the width changes no bit of a token)
            rem = T - t0
            if cutlass.const_expr(NTT >= 4):
                if rem > 32:
                    self.wg_blocks(Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, NTT)
                elif rem > 16:
                    self.wg_blocks(Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, 4)
                elif rem > 8:
                    self.wg_blocks(Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, 2)
                else:
                    self.wg_blocks(Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, 1)
            else:
                self.wg_blocks(Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, NTT)
            self.finish(Y, part, acc, T, t0, r0, rt, ks, lane)

    @cute.jit
    def wg_blocks(self, Ar, Xr, acc, wad, xb, xt, t0, T, ks, sl, nt: cutlass.Constexpr):
        """Every block of this split for tokens t0 .. t0 + 8 nt - 1, U blocks at a time."""
        U, NBW = self.U, self.NBW
        SPT = (32 * nt + 32 * self.RT - 1) // (32 * self.RT)   # X units per thread
        for it in cutlass.range(NBW // U):
            self.wg_group(Ar, Xr, acc, wad, xb, xt, it * U, U, t0, T, ks, sl, SPT, nt)
        if cutlass.const_expr(NBW % U != 0):
            for b in cutlass.range(NBW - NBW % U, NBW):
                self.wg_group(Ar, Xr, acc, wad, xb, xt, b, 1, t0, T, ks, sl, SPT, nt)

    @cute.jit
    def wg_group(self, Ar, Xr, acc, wad, xb, xt, j0, nu: cutlass.Constexpr, t0, T, ks, sl,
                 SPT: cutlass.Constexpr, nt: cutlass.Constexpr):
        """Blocks j0 .. j0 + nu - 1 of this split for 8 nt tokens: weights to registers, X to
        the tiles, then 4 nu wgmma in the order mma.sync takes them; waits for them before
        returning (the A registers and the tiles are reused)."""
        BK, KS, RT = self.BK, self.KS, self.RT
        CW = BK // 8
        NTOK = 8 * nt
        self.load(Ar, 0, wad, j0, nu)
        for uu in cutlass.range_constexpr(nu):
            boff = Int64(((j0 + uu) * KS + ks) * BK * 2)
            for i in cutlass.range_constexpr(SPT):
                u = sl + 32 * RT * i
                if u < 4 * NTOK:
                    tok = cutlass.min(t0 + u // 4, T - 1)
                    a = xb + Int64(tok) * Int64(2 * self.ldx) + boff + Int64((u % 4) * (BK // 4) * 2)
                    for v in cutlass.range_constexpr(CW // 4):
                        q = ld_v4_cached(a + Int64(16 * v), self.coherent)
                        for e in cutlass.range_constexpr(4):
                            Xr[(uu * SPT + i) * CW + 4 * v + e] = q[e]
        if cutlass.const_expr(RT > 4):
            cute.arch.barrier(barrier_id=1 + ks, number_of_threads=32 * RT)   # tiles read
        # word w of lane t's chunk of a token -> word t of the token's 16-byte row in core
        # matrix w: wgmma step j then meets mma j's K slots (the module docstring)
        for uu in cutlass.range_constexpr(nu):
            for i in cutlass.range_constexpr(SPT):
                u = sl + 32 * RT * i
                if u < 4 * NTOK:
                    tl = u // 4
                    at = xt + uu * self.XT + (tl // 8) * (128 * CW) + (tl % 8) * 16 + (u % 4) * 4
                    for w in cutlass.range_constexpr(CW):
                        st_shared_u32(at + 128 * w, Xr[(uu * SPT + i) * CW + w])
        proxy_fence_shared()
        cute.arch.barrier(barrier_id=1 + ks, number_of_threads=32 * RT)
        wgmma_fence()
        # descriptor: no swizzle; LBO 128 (next 8 K), SBO 128 CW (next 8 tokens)
        dhi = Int64((128 >> 4) << 16) + Int64(((128 * CW) >> 4) << 32)
        for uu in cutlass.range_constexpr(nu):
            a_lo = uu * 2 * CW
            a_hi = a_lo + CW
            for j in cutlass.range_constexpr(BK // 16):
                d = dhi + Int64(((xt + uu * self.XT + 256 * j) >> 4) & 0x3FFF)
                r = wgmma_bf16_rs([acc[e] for e in range(4 * nt)],
                                  Ar[a_lo + 2 * j], Ar[a_hi + 2 * j],
                                  Ar[a_lo + 2 * j + 1], Ar[a_hi + 2 * j + 1], d)
                for e in cutlass.range_constexpr(4 * nt):
                    acc[e] = r[e]
        wgmma_commit_wait()

    @cute.jit
    def partials(self):
        """The K splits' partial sums in shared memory ([RT][KS - 1][NACC][lane]; None at KS = 1)."""
        part = None
        if cutlass.const_expr(self.KS > 1):
            smem = cutlass.memory.SmemAllocator()
            part = smem.allocate_tensor(
                Float32, cute.make_layout((self.RT, self.KS - 1, self.NACC, 32),
                                          stride=((self.KS - 1) * self.NACC * 32,
                                                  self.NACC * 32, 32, 1)), 16)
        return part

    @cute.jit
    def warp_tile(self, wb, xb, Y, part, T, r0, rt, ks, lane):
        N, K, BK, MT, NTT, KS = self.N, self.K, self.BK, self.MT, self.NTT, self.KS
        U, NBW = self.U, self.NBW
        CW = BK // 8                  # u32 words per lane per row per block (4 or 8)
        g = lane // 4
        tg = lane % 4
        lane_off = Int64(tg * (BK // 4) * 2) + Int64(ks * BK * 2)   # + this split's first block
        wad = []                      # [row tile m][half hh]: this lane's row g + 8 hh
        for m in cutlass.range_constexpr(MT):
            for hh in cutlass.range_constexpr(2):
                row = cutlass.min(r0 + 16 * m + 8 * hh + g, N - 1)
                wad.append(wb + Int64(row) * Int64(2 * K) + lane_off)
        SZ = U * MT * 2 * CW          # one register buffer: U blocks of this warp's rows
        NG = NBW // U                 # groups of U blocks
        Ar = cute.make_rmem_tensor(((2 if self.PIPE else 1) * SZ,), Uint32)
        acc = cute.make_rmem_tensor((self.NACC,), Float32)
        for t0 in cutlass.range(0, T, 8 * NTT):
            xad = []
            for n in cutlass.range_constexpr(NTT):
                tok = cutlass.min(t0 + 8 * n + g, T - 1)
                xad.append(xb + Int64(tok) * Int64(2 * self.ldx) + lane_off)
            for i in cutlass.range_constexpr(self.NACC):
                acc[i] = Float32(0.0)
            if cutlass.const_expr(self.PIPE):
                # buffer 0 holds the even groups, buffer 1 the odd ones; each group's loads are
                # issued while the group before it is multiplied
                self.load(Ar, 0, wad, 0, U)
                for it2 in cutlass.range(NG // 2, unroll=self.lean):
                    g0 = 2 * it2
                    self.load(Ar, SZ, wad, (g0 + 1) * U, U)
                    self.mma(Ar, 0, acc, xad, g0 * U, U, t0, T)
                    if g0 + 2 < NG:
                        self.load(Ar, 0, wad, (g0 + 2) * U, U)
                    self.mma(Ar, SZ, acc, xad, (g0 + 1) * U, U, t0, T)
                if cutlass.const_expr(NG % 2 == 1):
                    self.mma(Ar, 0, acc, xad, (NG - 1) * U, U, t0, T)
            else:
                for it in cutlass.range(NG, unroll=self.lean):
                    self.load(Ar, 0, wad, it * U, U)
                    self.mma(Ar, 0, acc, xad, it * U, U, t0, T)
            if cutlass.const_expr(NBW % U != 0):
                for b in cutlass.range(NBW - NBW % U, NBW):
                    self.load(Ar, 0, wad, b, 1)
                    self.mma(Ar, 0, acc, xad, b, 1, t0, T)
            self.finish(Y, part, acc, T, t0, r0, rt, ks, lane)

    @cute.jit
    def finish(self, Y, part, acc, T, t0, r0, rt, ks, lane):
        """The pass's outputs: the K splits' partial sums added in split order by split 0 (through
        shared memory), then stored."""
        g = lane // 4
        tg = lane % 4
        if cutlass.const_expr(self.KS > 1):
            if ks > 0:
                for i in cutlass.range_constexpr(self.NACC):
                    part[rt, ks - 1, i, lane] = acc[i]
            cute.arch.sync_threads()
            if ks == 0:
                for s in cutlass.range_constexpr(self.KS - 1):      # the fixed order of splits
                    for i in cutlass.range_constexpr(self.NACC):
                        acc[i] = acc[i] + part[rt, s, i, lane]
                self.store(Y, acc, T, t0, r0, g, tg)
            cute.arch.sync_threads()
        else:
            self.store(Y, acc, T, t0, r0, g, tg)

    @cute.jit
    def load(self, Ar, a0: cutlass.Constexpr, wad, j0, nu: cutlass.Constexpr):
        """The weight loads of this warp's blocks j0 .. j0 + nu - 1 (block j = split + KS j)
        into Ar[a0:]."""
        BK, MT, KS, PF = self.BK, self.MT, self.KS, self.PF
        CW = BK // 8
        for uu in cutlass.range_constexpr(nu):
            boff = Int64((j0 + uu) * KS * BK * 2)
            for th in cutlass.range_constexpr(MT * 2):
                for v in cutlass.range_constexpr(CW // 4):          # 128-bit loads per row
                    q = ld_v4_stream(wad[th] + boff + Int64(16 * v), PF)
                    for i in cutlass.range_constexpr(4):
                        Ar[a0 + (uu * MT * 2 + th) * CW + 4 * v + i] = q[i]

    @cute.jit
    def mma(self, Ar, a0: cutlass.Constexpr, acc, xad, j0, nu: cutlass.Constexpr, t0, T):
        """Blocks j0 .. j0 + nu - 1 from Ar[a0:]: per block the activations, then the mma."""
        BK, MT, NTT, KS = self.BK, self.MT, self.NTT, self.KS
        CW = BK // 8
        NV = CW // 4
        for uu in cutlass.range_constexpr(nu):
            boff = Int64((j0 + uu) * KS * BK * 2)
            for n in cutlass.range_constexpr(NTT):
                if t0 + 8 * n < T:
                    xw = []
                    for v in cutlass.range_constexpr(NV):
                        xw += ld_v4_cached(xad[n] + boff + Int64(16 * v), self.coherent)
                    for m in cutlass.range_constexpr(MT):
                        a_lo = a0 + (uu * MT * 2 + 2 * m) * CW
                        a_hi = a_lo + CW
                        c = 4 * (m * NTT + n)
                        for j in cutlass.range_constexpr(BK // 16):
                            r = mma_bf16_16816(Ar[a_lo + 2 * j], Ar[a_hi + 2 * j],
                                               Ar[a_lo + 2 * j + 1], Ar[a_hi + 2 * j + 1],
                                               xw[2 * j], xw[2 * j + 1],
                                               acc[c], acc[c + 1], acc[c + 2], acc[c + 3])
                            for i in cutlass.range_constexpr(4):
                                acc[c + i] = r[i]

    @cute.jit
    def store(self, Y, acc, T, t0, r0, g, tg):
        """The lane holds columns (tokens) 2t, 2t+1 of rows g, g+8 of each tile."""
        for n in cutlass.range_constexpr(self.NTT):
            for cc in cutlass.range_constexpr(2):
                tok = t0 + 8 * n + 2 * tg + cc
                if tok < T:
                    for m in cutlass.range_constexpr(self.MT):
                        for hh in cutlass.range_constexpr(2):
                            row = r0 + 16 * m + 8 * hh + g
                            if row < self.N:
                                self.put(Y, tok, row, acc[4 * (m * self.NTT + n) + 2 * hh + cc])

    @cute.jit
    def put(self, Y, tok, row, v):
        """One output (a subclass may write elsewhere: k_mla_heads.py)."""
        if cutlass.const_expr(self.out_bf16):
            Y[tok, row] = v.to(BFloat16)
        else:
            Y[tok, row] = v
