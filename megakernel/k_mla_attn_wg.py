"""MLA launch 4 on wgmma (Hopper, sm_90a; docs/k3-decode.md §3.4): the partials of
k_mla_attn.py (the merge, k_mla_merge.py, is shared), the products on warpgroup MMAs.

Why: k_mla_attn_mma.py's mma.sync keeps every operand in each warp's registers, so each warp
loads its own copy of the cache tile and of the query (~144 KB of L1 / shared traffic per 16-row
tile and 32 heads, ncu: lab/mla/); wgmma reads both from shared
memory once per warpgroup, 64 heads at a time (M = 64).

CTA = (group of HM = 64 heads, token, walk), two warpgroups of 128 threads. Heads past H read
head H - 1 and store nothing (96 heads: two groups, the second a third padding). A walk is W
consecutive splits of the token's cache (splits of CH_SHORT rows up to SHORT, of CH_LONG = 512
past it: this kernel's own, a function of the sequence's length alone; W from the launch's size,
about WAVES CTAs per SM, and no bit depends on it): the query is loaded once per walk and the
tile pipeline runs on across split ends. Shared memory: the group's query [ql | q_pe] (64 x C)
and two cache tiles of TR = 64 rows (C wide), all in wgmma's no-swizzle K-major layout: core
matrices of 8 rows x 16 bytes, the C / 8 core matrices of an 8-row group consecutive (byte
(8 rg + r) row, 16-byte chunk cc at (rg C / 8 + cc) 128 + 16 r; tests/megakernel/
test_mk_mma_layout.py holds it to PTX's descriptor layouts). Rows arrive by cp.async (16 bytes
each; rows past the sequence repeat its last row: finite, scored -inf), tile j + 2's issued
while the tensor cores run tile j + 1's scores (the issue was a fifth of the warps' time: call
53). On sm_90a the step runs k_mla_attn_tma.py where its dims allow: these products, the tiles
brought by TMA and the scores split between the warpgroups. The grid's x is the head group, so both groups of a (token, walk) run side by
side and the second reads the tiles from L2. 255 registers (80 bytes spilled), 221 KB of shared
memory: one CTA (8 warps) per SM. Per tile:
- S = Q K^T, wgmma m64n64k16 over the C / 16 k-steps in order, both operands from shared memory.
  Each warpgroup computes all of S (the same instructions on the same data: the same bits), so
  the two agree on the softmax without an exchange;
- z = s S, rows past the split's end -inf; per head the online softmax over the tile (a head's
  64 scores sit in one quad of lanes: two butterflies);
- O = O a + P V on warpgroup w's R / 2 latent columns: P from registers (the C layout of S is the
  A layout of P, FA3's trick), each p split into bf16 hi + lo (two wgmma per k-step: ~16 bits of
  p, as k_mla_attn_mma.py, the spec's f32 softmax); V = the tile's first R columns read N-major
  from the same shared image (a K-major core matrix of the score's B is an N-major one of V's:
  8 cache rows x 8 latent columns), m64n(R/2)k16, the 4 k-steps in order; waited for before the
  next tile's scores (overlapping the two measured no gain).
A split's partials (m, l, acc) as k_mla_attn.py's, written at its last tile, so an empty split
writes (-inf, 0, 0) and the merge (k_mla_merge.py) is shared; NS follows split_rows. Everything depends
on the sequence's own length (its splits and tiles): batch-invariant and deterministic. Its bits
differ from k_mla_attn_mma.py's (other sum groupings); one kernel serves every batch
(attention_kernel in k_mla_attn_mma.py picks by dims, arch and Settings.attn).
"""
from megakernel.device import cute, cutlass, Float32, Int32, Int64, Uint32
from megakernel.kernel_args import Args, declare
from megakernel.k_gemv_mma import wgmma_arch
from megakernel.k_mla_attn import CH_SHORT, SHORT, MlaAttn
from megakernel.mla_softmax import hi_lo, masked_max, update
from megakernel.ptx import (cp_async_16, opaque_u64, proxy_fence_shared, st_global_v2_f32,
                            wgmma_bf16_rs, wgmma_bf16_ss, wgmma_commit, wgmma_fence, wgmma_wait)

HM = 64         # heads per CTA: wgmma's M
TR = 64         # cache rows per tile: the score wgmma's N
SMEM_MAX = 227 * 1024
SMS = 132       # the H200's SMs (only the walk length depends on it, never a bit)
WAVES = 8       # CTAs per SM the walks aim at
# rows per split of a sequence past SHORT: 512, against the mma.sync kernel's 256 (its partials,
# f32 [H, R] per split, were a third of the bytes at 64 x 32k and the merge 560 us; at batch 1 /
# 32k, 64 splits of 2 head groups fill the 132 SMs once)
CH_LONG = 512


def fits(md) -> bool:
    """Dims this kernel takes: sm_90a, C and R in 16-element k-steps, R / 2 a wgmma N (<= 256),
    the query and two tiles in one CTA's shared memory."""
    return (wgmma_arch() and md.C % 16 == 0 and md.R % 16 == 0 and md.R // 2 <= 256
            and 3 * HM * md.C * 2 <= SMEM_MAX)


def desc(addr, lbo: int, sbo: int):
    """A wgmma shared-memory descriptor, no swizzle: start, LBO and SBO in 16-byte units."""
    return (Int64((lbo >> 4) << 16) + Int64((sbo >> 4) << 32)
            + Int64((Int32(addr) >> 4) & 0x3FFF))


@cute.jit
def quad_sums(ML):
    """(l_lo, l_hi): this lane's running sums (ML[2], ML[3]) summed over its quad, butterfly
    order."""
    l_lo = ML[2]
    l_hi = ML[3]
    for off in cutlass.range_constexpr(1, 3):
        l_lo = l_lo + cute.arch.shuffle_sync_bfly(l_lo, off)
        l_hi = l_hi + cute.arch.shuffle_sync_bfly(l_hi, off)
    return l_lo, l_hi


@declare
class MlaAttnWG(MlaAttn):
    def __init__(self, md, ch: int = CH_LONG, remat: bool = False):
        """ch: rows per split past SHORT (a tool may time others; the step's NS follows
        split_rows in k_mla_attn_mma.py). remat: the query's C / 16 k-step descriptors
        recomputed in each tile's scores (ptx.opaque_u64 keeps them in the loop); left to the
        compiler they are computed before the tile loop and held, and at the 255-register cap
        the TMA kernel spills some and reloads them every tile (21 local loads and 3 stores in
        its tile loop, against 11 and 1: ptxas and cuobjdump on the CPU; not
        yet timed). The same products: the same bits."""
        assert fits(md), "mla_attn_wg: dims or arch it does not take (fits)"
        assert ch % TR == 0 and CH_SHORT % TR == 0      # a split is whole tiles
        self.ch, self.remat = ch, remat
        self.fast = md.C % 32 == 0                        # TR * C / 8 units: whole rounds of 256
        self.md = md
        self.hg = 8                               # warps: two warpgroups
        self.groups = (md.H + HM - 1) // HM
        self.CC = md.C // 8                       # 16-byte chunks per row
        self.RG = self.CC * 128                   # bytes per 8-row group
        self.QB = HM * md.C * 2                   # the query's bytes
        self.TB = TR * md.C * 2                   # a tile's bytes
        self.NV = md.R // 2                       # latent columns per warpgroup
        self.NI = self.NV // 8                    # their 8-column blocks

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        # each CTA walks W consecutive splits (the bits do not depend on W): about WAVES CTAs
        # per SM in all, each loading its query once
        W = cutlass.max(1, (self.groups * A.T * A.NS) // (WAVES * SMS))
        self.kernel(*A.kernel()).launch(grid=(self.groups, A.T, (A.NS + W - 1) // W),
                                        block=(256, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        g, t, z = cute.arch.block_idx()
        self.body(*a, t, g, z)

    @cute.jit
    def body(self, q, ql, kv_cache, lens, pm, pl, pa, T, Lcap, NS, t, g, z):
        """CTA z of the token's walks: its W = ceil(NS / grid z) consecutive splits, their tiles
        one pipeline (a split's rows are a whole number of tiles, so the walk is the tiles of
        rows [R0, R1) with a split ending every ch / TR of them)."""
        TB = self.TB
        scale = Float32(float(self.md.NP + self.md.RP) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        _, _, gz = cute.arch.grid_dim()
        lane = i % 32
        wg = i // 128
        tq = lane % 4
        hlo = g * HM + (i // 32 % 4) * 16 + lane // 4     # this thread's heads: hlo, hlo + 8
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        smem = cutlass.memory.SmemAllocator()
        sq = smem.allocate(self.QB + 2 * TB, 128).toint()
        st = sq + self.QB
        kvb = kv_cache.toint()

        W, TPS, R0, R1, ntiles = self.walk(LENS, NS, gz, t, z)

        ML = cute.make_rmem_tensor((4,), Float32)          # m_lo, m_hi, l_lo, l_hi
        O = cute.make_rmem_tensor((4 * self.NI,), Float32)
        self.reset(ML, O)
        S = cute.make_rmem_tensor((32,), Float32)
        P = cute.make_rmem_tensor((32,), Uint32)           # P's A fragments: 16 hi, 16 lo
        # descriptors: the query and tiles K-major (LBO: the next 8 K, SBO: the next 8 rows); V
        # N-major from the same tile (LBO: the next 8 cache rows = K, SBO: the next 8 columns)
        dq = desc(sq, 128, self.RG)

        # tile 0: the query and its rows, its scores and softmax; tile 1's rows on their way
        if ntiles > 0:
            self.stage_query(q.toint(), ql.toint(), sq, t, g, i)
            self.issue(kvb, st, t, Lcap, R0, R1, 0, 0, i)
        cute.arch.cp_async_commit_group()
        if ntiles > 1:
            self.issue(kvb, st, t, Lcap, R0, R1, 1, 1, i)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)
        proxy_fence_shared()                  # cp.async's writes, to wgmma's reads
        cute.arch.sync_threads()
        if ntiles > 0:
            self.scores(S, dq, st)
            wgmma_wait(0)
            self.softmax(S, P, O, ML, R0, R1, tq, scale)
        # tile j: its P V (waited for: overlapping it with the next scores measured no gain),
        # a split's partials at its last tile; then one barrier (tile j + 1 landed for
        # every thread, every thread done with tile j), the rows of j + 2 into the buffer tile j
        # leaves, the scores and softmax of j + 1
        for j in cutlass.range(ntiles):
            self.values(O, P, st + (j % 2) * TB, wg)
            wgmma_wait(0)
            if j % TPS == TPS - 1 or j + 1 == ntiles:
                self.store(pm, pl, pa, ML, O, T, NS, t, hlo, z * W + j // TPS, wg, tq)
                self.reset(ML, O)
            if j + 1 < ntiles:
                cute.arch.cp_async_wait_group(0)
                proxy_fence_shared()
                cute.arch.sync_threads()
                self.scores(S, dq, st + ((j + 1) % 2) * TB)
                if j + 2 < ntiles:
                    self.issue(kvb, st, t, Lcap, R0, R1, j + 2, j % 2, i)
                cute.arch.cp_async_commit_group()
                wgmma_wait(0)
                self.softmax(S, P, O, ML, R0 + TR * (j + 1), R1, tq, scale)
        cute.arch.cp_async_wait_group(0)
        # the walk's splits past the sequence: empty partials (-inf, 0, 0)
        for w in cutlass.range((ntiles + TPS - 1) // TPS, W):
            if z * W + w < NS:
                self.store(pm, pl, pa, ML, O, T, NS, t, hlo, z * W + w, wg, tq)

    @cute.jit
    def walk(self, LENS, NS, gz, t, z):
        """CTA z's walk of token t's splits (of ch rows past SHORT, CH_SHORT up to it): W =
        ceil(NS / gz) consecutive ones, TPS tiles each, the rows [R0, R1) of the sequence they
        hold and their ntiles tiles. Returns (W, TPS, R0, R1, ntiles)."""
        W = (NS + gz - 1) // gz
        n = LENS[t] + 1
        ch = self.ch
        if n <= SHORT:
            ch = CH_SHORT
        TPS = ch // TR                                    # tiles per split
        R0 = z * W * ch
        R1 = cutlass.min(R0 + W * ch, n)
        ntiles = Int32(0)
        if R1 > R0:
            ntiles = (R1 - R0 + TR - 1) // TR
        return W, TPS, R0, R1, ntiles

    @cute.jit
    def reset(self, ML, O):
        """A split's start: m = -inf, l = 0, O = 0."""
        ML[0] = Float32(-float("inf"))
        ML[1] = Float32(-float("inf"))
        ML[2] = Float32(0.0)
        ML[3] = Float32(0.0)
        for e in cutlass.range_constexpr(4 * self.NI):
            O[e] = Float32(0.0)

    @cute.jit
    def store(self, pm, pl, pa, ML, O, T, NS, t, hlo, s, wg, tq):
        """Split s's partials (m, l, acc) of this thread's heads and columns; l summed over the
        quad (butterfly order), m and l by warpgroup 0's first lane of each quad."""
        l_lo, l_hi = quad_sums(ML)
        self.write_partials(pm, pl, pa, ML, l_lo, l_hi, O, T, NS, t, hlo, s, wg, tq)

    @cute.jit
    def write_partials(self, pm, pl, pa, ML, l_lo, l_hi, O, T, NS, t, hlo, s, wg, tq):
        """Split s's partials: m (ML) and l of heads hlo, hlo + 8 by warpgroup 0's first lane of
        each quad, this thread's columns of acc (O)."""
        H, R, NV = self.md.H, self.md.R, self.NV
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        pab = pa.toint()
        for hh in cutlass.range_constexpr(2):
            h = hlo + 8 * hh
            if h < H:
                if tq == 0:
                    if wg == 0:
                        PM[t, h, s] = ML[hh]
                        PL[t, h, s] = l_lo if hh == 0 else l_hi
                row = (pab + ((Int64(t) * Int64(H) + Int64(h)) * Int64(NS) + Int64(s)) * Int64(4 * R)
                       + Int64(4 * (wg * NV + 2 * tq)))
                for b in cutlass.range_constexpr(self.NI):
                    st_global_v2_f32(row + Int64(32 * b), O[4 * b + 2 * hh], O[4 * b + 2 * hh + 1])

    # the descriptors of the shared image (k_mla_attn_tma.py's swizzled image overrides them)
    def k_desc(self, sb):
        """The K-major descriptor of an image (the query or a tile) at sb: no swizzle."""
        return desc(sb, 128, self.RG)

    def k_step(self, j: int):
        """Descriptor increment of k-step j (16 columns: two core matrices of 128 bytes)."""
        return Int64(16 * j)

    def v_desc(self, sb, kk: int, wg):
        """V's N-major descriptor: k-step kk's 16 cache rows, warpgroup wg's R / 2 columns."""
        return desc(sb + kk * 2 * self.RG + wg * self.NI * 128, self.RG, 128)

    @cute.jit
    def scores(self, S, dq, sb, n: cutlass.Constexpr = 32):
        """Issue S = Q K^T over the 2 n tile rows from shared address sb (C / 16 wgmma m64n(2 n),
        committed as one group; not waited for)."""
        dk = self.k_desc(sb)
        if cutlass.const_expr(self.remat):
            dq = opaque_u64(dq)
        for e in cutlass.range_constexpr(n):
            S[e] = Float32(0.0)
        wgmma_fence()
        for j in cutlass.range_constexpr(self.md.C // 16):
            acc = []
            for e in cutlass.range_constexpr(n):
                acc.append(S[e])
            r = wgmma_bf16_ss(acc, dq + self.k_step(j), dk + self.k_step(j))
            for e in cutlass.range_constexpr(n):
                S[e] = r[e]
        wgmma_commit()

    @cute.jit
    def softmax(self, S, P, O, ML, rb, end, tq, scale):
        """The online softmax over a tile whose first row is rb: S[4 b + e] is head lo (e < 2)
        or hi, row rb + 8 b + 2 tq + e % 2 (rows from `end` on: -inf). Rescales O (its P V must
        be complete), updates ML and leaves P's hi / lo A fragments in P: k-step kk takes S
        blocks 2 kk, 2 kk + 1 (rows g / g + 8, k 2t.. and 2t + 8..)."""
        m_lo = ML[0]
        m_hi = ML[1]
        mx_lo, mx_hi = masked_max(S, S, 32, rb, end, tq, scale)
        self.update_ml(S, 32, O, ML, m_lo, m_hi, mx_lo, mx_hi)
        for w in cutlass.range_constexpr(16):
            P[w], P[16 + w] = hi_lo(S[2 * w], S[2 * w + 1])

    @cute.jit
    def update_ml(self, z, n: cutlass.Constexpr, O, ML, m_lo, m_hi, mx_lo, mx_hi):
        """mla_softmax.update on the split's state ML (m_lo, m_hi, l_lo, l_hi)."""
        mn_lo, mn_hi, l_lo, l_hi = update(z, n, O, self.NI, m_lo, m_hi, ML[2], ML[3], mx_lo, mx_hi)
        ML[0] = mn_lo
        ML[1] = mn_hi
        ML[2] = l_lo
        ML[3] = l_hi

    @cute.jit
    def values(self, O, P, sb, wg):
        """Issue O += P V over this warpgroup's R / 2 columns of the tile at sb: per k-step the
        hi part, then the lo part (committed as one group; not waited for)."""
        NI = self.NI
        wgmma_fence()
        for kk in cutlass.range_constexpr(TR // 16):
            dv = self.v_desc(sb, kk, wg)
            for part in cutlass.range_constexpr(2):
                a = 16 * part + 4 * kk
                r = wgmma_bf16_rs([O[e] for e in range(4 * NI)], P[a], P[a + 1], P[a + 2],
                                  P[a + 3], dv, 1)
                for e in cutlass.range_constexpr(4 * NI):
                    O[e] = r[e]
        wgmma_commit()

    @cute.jit
    def stage_query(self, qb, qlb, sq, t, g, i):
        """cp.async the group's query [ql | q_pe] (64 heads x C) into the K-major image; thread i
        takes 16-byte units i, i + 256, ... (unit u: head 8 (u // 8 CC) + u % 8, chunk
        (u // 8) % CC: consecutive lanes write consecutive shared bytes)."""
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
            cp_async_16(self.unit_at(sq, u, hr, cc), src)

    @cute.jit
    def issue(self, kvb, st, t, Lcap, start, end, tile, bufno, i):
        """cp.async rows start + TR tile .. + TR - 1 of token t's cache (rows past `end` repeat
        row end - 1) into shared tile `bufno`, in the query's unit order."""
        C = self.md.C
        rb = start + TR * tile
        if cutlass.const_expr(self.fast):
            if rb + TR <= end:
                self.issue_whole(kvb + (Int64(t) * Int64(Lcap) + Int64(rb)) * Int64(2 * C),
                                 st + bufno * self.TB, i)
            else:
                self.issue_clamped(kvb, st, t, Lcap, start, end, tile, bufno, i)
        else:
            self.issue_clamped(kvb, st, t, Lcap, start, end, tile, bufno, i)

    @cute.jit
    def issue_whole(self, src, dst, i):
        """issue for a tile of rows all inside the sequence: thread i's units u = i + 256 k keep
        their row in the 8-row group (i % 8), so each is one 32-bit offset from the tile's first
        row (row 8 (w // CC) + i % 8, chunk w % CC, w = i // 8 + 32 k), no clamp, no 64-bit
        multiply: ~8 instructions a unit against ~18."""
        C, CC = self.md.C, self.CC
        rr = i % 8
        v = i // 8
        for k in cutlass.range_constexpr(TR * CC // 256):
            w = v + 32 * k
            off = rr * (2 * C) + (w // CC) * (16 * C) + (w % CC) * 16
            cp_async_16(dst + 16 * i + 4096 * k, src + Int64(off))

    @cute.jit
    def issue_clamped(self, kvb, st, t, Lcap, start, end, tile, bufno, i):
        """issue, any tile (the one a sequence ends in): rows past `end` repeat row end - 1."""
        C, CC = self.md.C, self.CC
        for u in cutlass.range(i, TR * CC, 256):
            r = 8 * (u // (8 * CC)) + u % 8
            cc = (u // 8) % CC
            row = Int64(t) * Int64(Lcap) + Int64(cutlass.min(start + TR * tile + r, end - 1))
            cp_async_16(self.unit_at(st + bufno * self.TB, u, r, cc),
                        kvb + row * Int64(2 * C) + Int64(16 * cc))

    def unit_at(self, base, u, r, cc):
        """The shared address of 16-byte unit u (row r's chunk cc) of an image (the query or a
        tile) at base: the no-swizzle layout's units in order (k_mla_attn_tma.py's swizzled
        image overrides it)."""
        return base + 16 * u
