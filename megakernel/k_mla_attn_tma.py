"""MLA launch 4 on wgmma with the cache tiles brought by TMA and the scores split between the
warpgroups (Hopper, sm_90a): k_mla_attn_wg.py's products, its m and acc bit for bit, l summed in
another order.

Why TMA: k_mla_attn_wg.py brings each 64-row tile (72 KB) by 4608 cp.async of 16 bytes; every
thread issues 18 per tile, and ncu (lab/mla/) put a
fifth of the warps' time in that issue and each SM's fetch at ~11 GB/s, a third of its share of
HBM. Warp 0 issues a tile as one TMA copy (9 boxes of 64 rows x 128 bytes), completion counted
on the buffer's mbarrier; the other threads never touch the load: 1.26-1.58x.

Why the split: in k_mla_attn_wg.py both warpgroups score the whole tile (the same instructions,
so they agree on the softmax without an exchange): half of each one's tensor work and all of its
softmax repeat the other's. Here warpgroup w scores tile rows 32 w .. 32 w + 31 (m64n32), the
two trade their row maxima and then their halves of P through shared memory; P V is unchanged.
Measured against the unsplit TMA kernel (desync: no CTA barrier a tile, 1.04-1.09x the synced
one) 1.02-1.06x at every row of mla_ksplit. Tried and dropped in the same run: tile
j + 1's scores issued before tile j's P V is waited for (0.75-0.8x: its accumulators in flight
spill 588 bytes).

The tile's shared image is wgmma's 128-byte-swizzle K-major layout (TMA writes it so): 64-column
blocks of 8 KB, in each 8-row groups of 1 KB, row r's 16-byte chunk c at (c ^ r % 8) 16 of its
128-byte line. So the descriptors: S's operands K-major SW128 (SBO 1 KB; k-step j at block j / 4,
32 bytes per step in it; warpgroup w's rows 4 KB in); V the same image N-major (LBO 8 KB: the
next 64 columns; SBO 1 KB: the next 8 rows). The query is staged by cp.async into the same
layout (once per walk). The tile's last block (rope columns only, which the scores alone read)
takes warpgroup 1's P once both have scored (tests/megakernel/test_mk_mma_layout.py).

A tile that runs past the sequence (the walk's last, when the length is not a multiple of 64)
comes by cp.async as before, rows past the end repeating the last one (finite; the kv cache past
a sequence may hold anything, which a TMA box would read). Only a walk's last tile can be
partial, so buffer b's k-th TMA tile is its k-th mbarrier phase: tile j waits parity (j / 2) % 2.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, Int64, Uint32
from megakernel.kernel_args import Args, declare
from megakernel.k_mla_attn_wg import (HM, SMEM_MAX, SMS, TR, WAVES, MlaAttnWG, fits as wg_fits,
                                       quad_sums)
from megakernel.mla_softmax import hi_lo, masked_max
from megakernel.ptx import (ld_shared_f32, ld_shared_v4, proxy_fence_shared,
                            st_shared_f32, st_shared_v4_u32, wgmma_wait)

SW128 = 1 << 62          # a wgmma descriptor's layout type: 128-byte swizzle


def fits(md) -> bool:
    """k_mla_attn_wg.py's dims whose rows are whole 64-column blocks (C = R + RP), the rope block
    of a tile holding a warpgroup's P (HM x TR / 2, hi and lo: 8 KB), and shared memory the
    query, two tiles, the other warpgroup's P and the exchanged maxima and sums."""
    return (wg_fits(md) and md.C % 64 == 0 and md.R % 128 == 0 and md.C - md.R >= HM
            and 3 * HM * md.C * 2 + HM * TR * 2 + 3 * HM * 4 + 64 <= SMEM_MAX)


def desc_sw(addr, lbo: int, sbo: int):
    """A wgmma shared-memory descriptor, 128-byte swizzle (the atom 1024-byte aligned)."""
    return (Int64(SW128) + Int64((lbo >> 4) << 16) + Int64((sbo >> 4) << 32)
            + Int64((Int32(addr) >> 4) & 0x3FFF))


def tile_layout(rows: int, cols: int):
    """The (rows, cols) bf16 image, K-major SW128: the DSL's atom tiled rows first."""
    from cutlass.cute.nvgpu import warpgroup
    atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, BFloat16)
    return cute.tile_to_shape(atom, (rows, cols), (0, 1))


@declare
class MlaAttnTMA(MlaAttnWG):
    KERNEL_EXTRA = ("tma_atom", "tma_kv")

    def __init__(self, md, ch: int = 512, remat: bool = True):
        """remat (k_mla_attn_wg.py): on here, since it pays at every batch above 1 and keeps the
        bits (H100, `mla_ksplit --variants tma_held,tma`) 85.4 vs 87.5 us at batch 8 /
        8k, 597.8 vs 617.6 at 64 / 8k, 2312 vs 2422 at 64 / 32k, 13.2 vs 13.3 at 1 / 1k; the tile
        loop's spills 1 / 11 against 3 / 21."""
        assert fits(md), "mla_attn_tma: dims or arch it does not take (fits)"
        super().__init__(md, ch, remat)

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        from cutlass.cute.nvgpu import cpasync
        C = self.md.C
        # the cache as (row, column, token); a tile is (TR, C): one atom, nine TMA boxes
        kv = cute.make_tensor(A.kv_cache, cute.make_layout(
            (A.Lcap, C, A.T), stride=(C, 1, cute.assume(A.Lcap * C, divby=64))))
        atom, tkv = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), kv,
                                                tile_layout(TR, C), (TR, C))
        W = cutlass.max(1, (self.groups * A.T * A.NS) // (WAVES * SMS))
        self.kernel(*A.kernel(), atom, tkv).launch(
            grid=(self.groups, A.T, (A.NS + W - 1) // W), block=(256, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS, then KERNEL_EXTRA
        g, t, z = cute.arch.block_idx()
        self.body_tma(*a, t, g, z)

    @cute.jit
    def body_tma(self, q, ql, kv_cache, lens, pm, pl, pa, T, Lcap, NS, atom, tkv, t, g, z):
        """k_mla_attn_wg.py's body (one CTA barrier a tile), tiles by TMA where whole, the scores
        split: warpgroup w scores tile rows 32 w .. 32 w + 31 only (S = Q K^T, m64n32), the two
        exchange their row maxima through shared memory (max is exact: every P the one of the
        whole-tile softmax), then their halves of P (hi and lo, 8 KB each: warpgroup 0's in a
        buffer of its own, warpgroup 1's
        over the tile's rope columns, which only the scores read); each P V then runs over all
        64 rows as before. Half the score products and half the softmax per warpgroup; l (a
        lane's running sum over its rows) is summed per warpgroup and the two added at the
        split's end: the one sum whose order differs from k_mla_attn_wg.py's."""
        from cutlass.cute.nvgpu import cpasync
        TB = self.TB
        scale = Float32(float(self.md.NP + self.md.RP) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        _, _, gz = cute.arch.grid_dim()
        lane = i % 32
        wg = i // 128
        tq = lane % 4
        hl = (i // 32 % 4) * 16 + lane // 4               # this thread's head row (and + 8)
        hlo = g * HM + hl
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        smem = cutlass.memory.SmemAllocator()
        sq = smem.allocate(self.QB + 2 * TB, 1024).toint()
        st = sq + self.QB
        xp = smem.allocate(HM * TR * 2, 128).toint()      # warpgroup 0's P
        xm = smem.allocate(3 * HM * 4, 16).toint()        # the maxima (2 x HM), l (HM)
        mbar = smem.allocate_array(cutlass.Int64, 2)
        kvb = kv_cache.toint()
        rope = (self.md.C // 64 - 1) * 8192               # a tile's last 64-column block

        gkv = cute.flat_divide(tkv, (TR, self.md.C))
        sl = tile_layout(TR, self.md.C)
        s0 = cute.make_tensor(cute.make_ptr(BFloat16, st, cute.AddressSpace.smem, assumed_align=1024), sl)
        s1 = cute.make_tensor(cute.make_ptr(BFloat16, st + TB, cute.AddressSpace.smem, assumed_align=1024), sl)
        d0, gsrc = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s0, 0, 2),
                                         cute.group_modes(gkv, 0, 2))
        d1, _ = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s1, 0, 2),
                                      cute.group_modes(gkv, 0, 2))
        if i == 0:
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init(mbar + 1, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        W, TPS, R0, R1, ntiles = self.walk(LENS, NS, gz, t, z)

        ML = cute.make_rmem_tensor((4,), Float32)
        O = cute.make_rmem_tensor((4 * self.NI,), Float32)
        self.reset(ML, O)
        S = cute.make_rmem_tensor((16,), Float32)
        P = cute.make_rmem_tensor((32,), Uint32)
        dq = desc_sw(sq, 16, 1024)

        if ntiles > 0:
            self.stage_query(q.toint(), ql.toint(), sq, t, g, i)
            self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, 0, i)
        if ntiles > 1:
            self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, 1, i)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)
        proxy_fence_shared()
        cute.arch.sync_threads()
        if ntiles > 0:
            self.wait_tile(mbar, R0, R1, 0)
            self.scores(S, dq, st + wg * 4096, 16)   # rows 32 wg..: 4 KB in
            wgmma_wait(0)
            self.softmax_half(S, P, O, ML, R0, R1, tq, scale, wg, hl, xm, xp, st + rope, i)
        for j in cutlass.range(ntiles):
            self.values(O, P, st + (j % 2) * TB, wg)
            wgmma_wait(0)
            if j % TPS == TPS - 1 or j + 1 == ntiles:
                self.store_both(pm, pl, pa, ML, O, T, NS, t, hl, hlo, z * W + j // TPS, wg, tq, xm)
                self.reset(ML, O)
            if j + 1 < ntiles:
                self.next_tile_ready(mbar, R0, R1, j)
                self.scores(S, dq, st + ((j + 1) % 2) * TB + wg * 4096, 16)
                if j + 2 < ntiles:
                    self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, j + 2, i)
                cute.arch.cp_async_commit_group()
                wgmma_wait(0)
                self.softmax_half(S, P, O, ML, R0 + TR * (j + 1), R1, tq, scale, wg, hl, xm, xp,
                                   st + ((j + 1) % 2) * TB + rope, i)
        cute.arch.cp_async_wait_group(0)
        for w in cutlass.range((ntiles + TPS - 1) // TPS, W):
            if z * W + w < NS:
                self.store_both(pm, pl, pa, ML, O, T, NS, t, hl, hlo, z * W + w, wg, tq, xm)

    @cute.jit
    def softmax_half(self, S, P, O, ML, rb, end, tq, scale, wg, hl, xm, xp, xr, i):
        """The online softmax of body_tma's tile (first row rb): this warpgroup's rows' maxima,
        the tile's from both (shared memory, a CTA barrier), then softmax's steps as
        k_mla_attn_wg.py's on this half; its P hi / lo to shared memory (warpgroup 0's at xp, 1's
        at xr: the tile's rope block) in 16-byte chunks c (hi 0, 1, lo 2, 3) at c 2 KB + 16 lane
        of the warpgroup, a barrier, and all four k-steps' fragments back: P[8 w + u] hi and
        P[16 + 8 w + u] lo from warpgroup w's chunks."""
        m_lo = ML[0]
        m_hi = ML[1]
        mx_lo, mx_hi = masked_max(S, S, 16, rb + 32 * wg, end, tq, scale)
        if tq == 0:
            st_shared_f32(xm + (wg * HM + hl) * 4, mx_lo)
            st_shared_f32(xm + (wg * HM + hl + 8) * 4, mx_hi)
        cute.arch.sync_threads()
        mx_lo = cute.arch.fmax(mx_lo, ld_shared_f32(xm + ((1 - wg) * HM + hl) * 4), nan=True)
        mx_hi = cute.arch.fmax(mx_hi, ld_shared_f32(xm + ((1 - wg) * HM + hl + 8) * 4), nan=True)
        self.update_ml(S, 16, O, ML, m_lo, m_hi, mx_lo, mx_hi)
        H = cute.make_rmem_tensor((16,), Uint32)          # this half's hi 0..7, lo 8..15
        for u in cutlass.range_constexpr(8):
            H[u], H[8 + u] = hi_lo(S[2 * u], S[2 * u + 1])
        mine = xp
        if wg == 1:
            mine = xr
        li = (i % 128) * 16
        for c in cutlass.range_constexpr(4):
            st_shared_v4_u32(mine + c * 2048 + li, H[4 * c], H[4 * c + 1], H[4 * c + 2], H[4 * c + 3])
        cute.arch.sync_threads()
        for w in cutlass.range_constexpr(2):
            src = xp if w == 0 else xr
            for c in cutlass.range_constexpr(4):
                v = ld_shared_v4(src + c * 2048 + li)
                base = 8 * w + 4 * (c % 2) + (16 if c >= 2 else 0)
                for k in cutlass.range_constexpr(4):
                    P[base + k] = v[k]

    @cute.jit
    def store_both(self, pm, pl, pa, ML, O, T, NS, t, hl, hlo, s, wg, tq, xm):
        """store with body_tma's l: each warpgroup's quad sums, warpgroup 1's through shared
        memory (a CTA barrier), added to warpgroup 0's, which writes m and l."""
        l_lo, l_hi = quad_sums(ML)
        if wg == 1 and tq == 0:
            st_shared_f32(xm + (2 * HM + hl) * 4, l_lo)
            st_shared_f32(xm + (2 * HM + hl + 8) * 4, l_hi)
        cute.arch.sync_threads()
        if wg == 0:
            l_lo = l_lo + ld_shared_f32(xm + (2 * HM + hl) * 4)
            l_hi = l_hi + ld_shared_f32(xm + (2 * HM + hl + 8) * 4)
        self.write_partials(pm, pl, pa, ML, l_lo, l_hi, O, T, NS, t, hlo, s, wg, tq)

    @cute.jit
    def next_tile_ready(self, mbar, R0, R1, j):
        """Tile j + 1 landed (its mbarrier, or this thread's cp.async) and, the barrier, every
        thread done with tile j, whose buffer tile j + 2 takes (the proxy fence: P's generic
        writes into its rope block before TMA's)."""
        self.wait_tile(mbar, R0, R1, j + 1)
        cute.arch.cp_async_wait_group(0)
        proxy_fence_shared()
        cute.arch.sync_threads()

    @cute.jit
    def wait_tile(self, mbar, R0, R1, j):
        """Tile j, if brought by TMA: wait for its buffer's phase (j / 2) % 2."""
        if R0 + TR * (j + 1) <= R1:
            cute.arch.mbarrier_wait(mbar + j % 2, (j // 2) % 2)

    @cute.jit
    def load(self, atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, j, i):
        """Tile j of the walk into buffer j % 2: one TMA copy by warp 0 if its rows are all
        inside [R0, R1), else every thread's cp.async (clamped rows). Not by thread 0 alone: the
        copy's elect.sync needs the full warp (alone, lane 0 hung on the GPU)."""
        rb = R0 + TR * j
        if rb + TR <= R1:
            if i < 32:      # the whole warp: the DSL's TMA copy elects its lane (elect.sync)
                if i == 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar + j % 2, self.TB)
                if j % 2 == 0:
                    cute.copy(atom, gsrc[(None, rb // TR, 0, t)], d0, tma_bar_ptr=mbar)
                else:
                    cute.copy(atom, gsrc[(None, rb // TR, 0, t)], d1, tma_bar_ptr=mbar + 1)
        else:
            self.issue_clamped(kvb, st, t, Lcap, R0, R1, j, j % 2, i)

    # the swizzled image's descriptors (k_mla_attn_wg.py's scores and values use them)
    def k_desc(self, sb):
        """K-major SW128 (SBO 1 KB: the next 8 rows)."""
        return desc_sw(sb, 16, 1024)

    def k_step(self, j: int):
        """k-step j: 64-column block j / 4 (8 KB each), 32 bytes per step inside it."""
        return Int64((j // 4) * 512 + (j % 4) * 2)          # 16-byte units

    def v_desc(self, sb, kk: int, wg):
        """V N-major SW128 on the same image: k-step kk at 8-row groups 2 kk, 2 kk + 1 (2 KB a
        step), warpgroup wg's columns from block wg NV / 64 (LBO 8 KB: the next 64 columns)."""
        return desc_sw(sb + kk * 2048 + wg * self.NV * 128, 8192, 1024)

    def unit_at(self, base, u, r, cc):
        """Unit u (row r's chunk cc, r % 8 = u % 8) of the SW128 image at base: (cc / 8) 8 KB +
        r 128 + (cc % 8 ^ r % 8) 16 (the query and partial tiles by cp.async, where TMA would
        write them)."""
        return base + (cc // 8) * 8192 + r * 128 + ((cc % 8) ^ (u % 8)) * 16
