"""MLA launch 4 on wgmma with the cache tiles brought by TMA (Hopper, sm_90a): k_mla_attn_wg.py's
sums in k_mla_attn_wg.py's order (the same bits: mla_ksplit's SAME_BITS holds it), its loads
changed.

Why: k_mla_attn_wg.py brings each 64-row tile (72 KB) by 4608 cp.async of 16 bytes; every thread
issues 18 per tile, and ncu (call 53, docs/megakernel-notes.md thirteenth session) puts a fifth
of the warps' time in that issue and each SM's fetch at ~11 GB/s, a third of its share of HBM.
One thread issues a tile as one TMA copy (9 boxes of 64 rows x 128 bytes), completion counted
on the buffer's mbarrier; the other threads never touch the load.

The tile's shared image is wgmma's 128-byte-swizzle K-major layout (TMA writes it so): 64-column
blocks of 8 KB, in each 8-row groups of 1 KB, row r's 16-byte chunk c at (c ^ r % 8) 16 of its
128-byte line. So the descriptors: S's operands K-major SW128 (SBO 1 KB; k-step j at block j / 4,
32 bytes per step in it); V the same image N-major (LBO 8 KB: the next 64 columns; SBO 1 KB: the
next 8 rows). The query is staged by cp.async into the same layout (once per walk).

With desync (a variant, not yet the default) the warpgroups are not held together per tile: a
warp done with a tile arrives on its buffer's `empty` mbarrier (8 arrivals a phase), and the
next load into that buffer waits for it; so one warpgroup's softmax runs beside the other's
products.

A tile that runs past the sequence (the walk's last, when the length is not a multiple of 64)
comes by cp.async as before, rows past the end repeating the last one (finite; the kv cache past
a sequence may hold anything, which a TMA box would read). Only a walk's last tile can be
partial, so buffer b's k-th TMA tile is its k-th mbarrier phase: tile j waits parity (j / 2) % 2.
"""
from megakernel.device import cute, cutlass, BFloat16, Int32, Int64
from megakernel.kernel_args import Args, declare
from megakernel.k_mla_attn_wg import HM, SMS, TR, WAVES, MlaAttnWG, fits as wg_fits
from megakernel.k_mla_attn import CH_SHORT, SHORT
from megakernel.ptx import cp_async_16, proxy_fence_shared, wgmma_wait

SW128 = 1 << 62          # a wgmma descriptor's layout type: 128-byte swizzle


def fits(md) -> bool:
    """k_mla_attn_wg.py's dims whose rows are whole 64-column blocks (C = R + RP)."""
    return wg_fits(md) and md.C % 64 == 0 and md.R % 128 == 0


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

    def __init__(self, md, ch: int = 512, desync: bool = False):
        """desync: no CTA barrier per tile; each warp releases a buffer on its `empty` mbarrier
        and the loads into it wait for the release, so the two warpgroups drift apart (one's
        softmax beside the other's products). The same instructions per warpgroup: the same bits
        (call 60, every row of mla_ksplit), 1.04-1.09x the attention alone at 8k-32k caches,
        within 0.5 us at 1k. Not the default: the whole check (the MLA GPU tests, ci, memcheck)
        has not run on it; the step's kernel is desync=False, whose PTX is 56595a0's (checked
        by ptx_dump --diff), the one calls 58 and 59 judged."""
        assert fits(md), "mla_attn_tma: dims or arch it does not take (fits)"
        super().__init__(md, ch)
        self.desync = desync

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
        """k_mla_attn_wg.py's body (early issue), tiles by TMA where whole."""
        from cutlass.cute.nvgpu import cpasync
        TB = self.TB
        scale = cutlass.Float32(float(self.md.NP + self.md.RP) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        _, _, gz = cute.arch.grid_dim()
        lane = i % 32
        wg = i // 128
        tq = lane % 4
        hlo = g * HM + (i // 32 % 4) * 16 + lane // 4
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        smem = cutlass.memory.SmemAllocator()
        sq = smem.allocate(self.QB + 2 * TB, 1024).toint()
        st = sq + self.QB
        mbar = smem.allocate_array(cutlass.Int64, 4 if self.desync else 2)   # full 0, 1, empty 0, 1
        kvb = kv_cache.toint()

        # the TMA view: tile (row tile, token) of the cache into buffer 0 or 1
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
            if cutlass.const_expr(self.desync):
                cute.arch.mbarrier_init(mbar + 2, 8)     # one arrival per warp
                cute.arch.mbarrier_init(mbar + 3, 8)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        W = (NS + gz - 1) // gz
        n = LENS[t] + 1
        ch = self.ch
        if n <= SHORT:
            ch = CH_SHORT
        TPS = ch // TR
        R0 = z * W * ch
        R1 = cutlass.min(R0 + W * ch, n)
        ntiles = Int32(0)
        if R1 > R0:
            ntiles = (R1 - R0 + TR - 1) // TR

        ML = cute.make_rmem_tensor((4,), cutlass.Float32)
        O = cute.make_rmem_tensor((4 * self.NI,), cutlass.Float32)
        self.reset(ML, O)
        S = cute.make_rmem_tensor((32,), cutlass.Float32)
        P = cute.make_rmem_tensor((32,), cutlass.Uint32)
        dq = desc_sw(sq, 16, 1024)

        if ntiles > 0:
            self.stage_query(q.toint(), ql.toint(), sq, t, g, i)
            self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, 0, i)
        if ntiles > 1:
            self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, 1, i)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)      # the query (and a partial tile 0 / 1)
        proxy_fence_shared()
        cute.arch.sync_threads()
        if ntiles > 0:
            self.wait_tile(mbar, R0, R1, 0)
            self.scores(S, dq, st)
            wgmma_wait(0)
            self.softmax(S, P, O, ML, R0, R1, tq, scale)
        for j in cutlass.range(ntiles):
            self.values(O, P, st + (j % 2) * TB, wg)
            wgmma_wait(0)
            if cutlass.const_expr(self.desync):
                if lane == 0:
                    cute.arch.mbarrier_arrive(mbar + 2 + j % 2)     # this warp is done with tile j
            if j % TPS == TPS - 1 or j + 1 == ntiles:
                self.store(pm, pl, pa, ML, O, T, NS, t, hlo, z * W + j // TPS, wg, tq)
                self.reset(ML, O)
            if j + 1 < ntiles:
                # tile j + 1 landed (its mbarrier, or this thread's cp.async then the barrier);
                # the barrier: every thread done with tile j, whose buffer tile j + 2 takes
                self.wait_tile(mbar, R0, R1, j + 1)
                if cutlass.const_expr(self.desync):
                    if R0 + TR * (j + 2) > R1:           # a partial tile: every thread's cp.async
                        cute.arch.cp_async_wait_group(0)
                        proxy_fence_shared()
                        cute.arch.sync_threads()
                else:
                    cute.arch.cp_async_wait_group(0)
                    proxy_fence_shared()
                    cute.arch.sync_threads()
                self.scores(S, dq, st + ((j + 1) % 2) * TB)
                if j + 2 < ntiles:
                    self.load(atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, j + 2, i)
                cute.arch.cp_async_commit_group()
                wgmma_wait(0)
                self.softmax(S, P, O, ML, R0 + TR * (j + 1), R1, tq, scale)
        cute.arch.cp_async_wait_group(0)
        for w in cutlass.range((ntiles + TPS - 1) // TPS, W):
            if z * W + w < NS:
                self.store(pm, pl, pa, ML, O, T, NS, t, hlo, z * W + w, wg, tq)

    @cute.jit
    def wait_tile(self, mbar, R0, R1, j):
        """Tile j, if brought by TMA: wait for its buffer's phase (j / 2) % 2."""
        if R0 + TR * (j + 1) <= R1:
            cute.arch.mbarrier_wait(mbar + j % 2, (j // 2) % 2)

    @cute.jit
    def load(self, atom, gsrc, d0, d1, mbar, kvb, st, t, Lcap, R0, R1, j, i):
        """Tile j of the walk into buffer j % 2: one TMA copy by warp 0 if its rows are all
        inside [R0, R1), else every thread's cp.async (clamped rows). Not by thread 0 alone: the
        copy's elect.sync needs the full warp (alone, lane 0 hung: call 56)."""
        rb = R0 + TR * j
        if cutlass.const_expr(self.desync):
            if j >= 2:      # every warp done with tile j - 2, which this one replaces
                if rb + TR <= R1:
                    if i < 32:
                        cute.arch.mbarrier_wait(mbar + 2 + j % 2, (j // 2 + 1) % 2)
                else:
                    cute.arch.mbarrier_wait(mbar + 2 + j % 2, (j // 2 + 1) % 2)
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

    @cute.jit
    def stage_query(self, qb, qlb, sq, t, g, i):
        """The group's query [ql | q_pe] by cp.async into the SW128 image (k_mla_attn_wg.py's
        units; head row hr, chunk cc at (cc / 8) 8 KB + hr 128 + (cc % 8 ^ hr % 8) 16)."""
        md = self.md
        H, R, NP, CC = md.H, md.R, md.NP, self.CC
        Qw = NP + md.RP
        for u in cutlass.range(i, HM * CC, 256):
            cc = (u // 8) % CC
            hr = 8 * (u // (8 * CC)) + u % 8
            h = cutlass.min(g * HM + hr, H - 1)
            src = qlb + (Int64(t) * Int64(H) + Int64(h)) * Int64(2 * R) + Int64(16 * cc)
            if cc >= R // 8:
                src = (qb + ((Int64(t) * Int64(H) + Int64(h)) * Int64(Qw) + Int64(NP)) * Int64(2)
                       + Int64(16 * (cc - R // 8)))
            cp_async_16(sq + (cc // 8) * 8192 + hr * 128 + ((cc % 8) ^ (u % 8)) * 16, src)

    @cute.jit
    def issue_clamped(self, kvb, st, t, Lcap, start, end, tile, bufno, i):
        """A partial tile by cp.async into the SW128 image (rows past `end` repeat row end - 1)."""
        C, CC = self.md.C, self.CC
        for u in cutlass.range(i, TR * CC, 256):
            r = 8 * (u // (8 * CC)) + u % 8
            cc = (u // 8) % CC
            row = Int64(t) * Int64(Lcap) + Int64(cutlass.min(start + TR * tile + r, end - 1))
            cp_async_16(st + bufno * self.TB + (cc // 8) * 8192 + r * 128 + ((cc % 8) ^ (u % 8)) * 16,
                        kvb + row * Int64(2 * C) + Int64(16 * cc))
