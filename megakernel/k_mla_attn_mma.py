"""MLA launch 4 on the tensor cores (docs/k3-decode.md §3.4): the same splits and partials as k_mla_attn.py
(the merge, k_mla_merge.py, is shared), the products on mma.sync m16n8k16.

Why: on the CUDA cores every cached row costs every head 576 + 512 f32 multiply-adds, so the
attention is bound by instructions, not bytes (580 us at batch 1 x 32k rows against 9 us of row
bytes, lab/mla/). Here the heads are the M = 16 rows of the mma and a tile of 16 cache rows the N
(scores) or K (values) side.

CTA = (token, group of 16 MTC heads, split), 32 MTC NCOL threads: warp (mt, cg) owns head tile mt
(16 heads) and latent columns [cg R / NCOL, (cg + 1) R / NCOL) of the output. Per tile of RT = 16
rows of the split (cp.async into a double-buffered shared tile, row stride C + 8 elements: the
fragment loads below are free of bank conflicts):
- scores S = Q K^T: A = the head tile's query [ql | q_pe] (16 heads x 576, read through L1), B =
  the tile's rows; c in blocks of 64, lane (g, t) holding the 16 consecutive elements 64 b + 16 t
  of head g / g + 8 and of row g / g + 8, mma j taking its u32 words 2j, 2j+1 (the K permutation
  of k_gemv_mma.py: the same on A and B, so the dot is unchanged). Warp cg of a head tile scores
  only the blocks b % NCOL == cg (KSPLIT); the NCOL partials meet in shared memory, summed in warp
  order by every warp, so all of a tile's warps hold the same S bit for bit;
- z = s S, rows past the split's end -inf; per head the online softmax over the tile (the quad of
  lanes holding a head's 16 scores reduces its max with two butterflies);
- O = O a + P V: the score accumulators are the A fragments of P (rows 2t, 2t + 1 of each 8-row
  half: the C layout of S is the A layout of P), each p split into bf16 hi + lo (two mma, so the
  probabilities keep ~16 bits, as the spec's f32 softmax asks); B = the tile's latent columns
  through ldmatrix.trans (stored rows are k).
The sum per head: l per lane over its tiles, the quad's four in butterfly order at the end.
Partials (m, l, acc) as k_mla_attn.py's (acc un-normalised, m in the scaled domain), so an empty
split writes (-inf, 0, 0). Everything depends on the sequence's own length only (its splits and
tiles): batch-invariant and deterministic. Its bits differ from k_mla_attn.py's: one of the two
serves every batch (Settings.attn.mla_mma).

Needs (R + RP) % 64 == 0 and R % 64 == 0 (attention_kernel, below, falls back to k_mla_attn.py).
Status: the default from its first H200 run (the step 1.05x faster at batch 1 with
a 1k cache, 3.3x at batch 64 with 32k; lab/mla/) until k_mla_attn_wg.py (wgmma)
took sm_90a; still the default off sm_90a (GB300) and with
MK_MLA_MMA=sync. MK_MLA_MMA=0 selects the CUDA-core kernel, which `scripts/gpu_check.sh OUT ci` judges too.
"""
from megakernel import k_mla_attn_tma, k_mla_attn_wg
from megakernel.device import cute, cutlass, Float32, Int32, Int64, Uint32
from megakernel.k_mla_attn import CH, CH_SHORT, SHORT, MlaAttn
from megakernel.mla_softmax import hi_lo, masked_max, update
from megakernel.ptx import (cp_async_16, ld_shared_v4, ld_shared_v4_f32, ld_v4_cached,
                            ldmatrix_x4_trans, mma_bf16_16816, st_shared_v4_f32)

RT = 16        # cache rows per tile
MTC = 2        # 16-head tiles per CTA: 2 with KSPLIT (1.6x alone at 32k; 1 before, H200, tools/mla_ksplit.py)
KSPLIT = True  # each warp scores its share of c (below); False: every warp the whole row
NCOL = 4       # warps per head tile (each over R / NCOL latent columns): with MTC = 2, 127
               # registers, no spill, so 2 CTAs per SM (ptxas -v, sm_90a); without
               # KSPLIT 175; NCOL = 2: 255 and a spill


class MlaAttnMMA(MlaAttn):
    def __init__(self, md, mtc: int = MTC, ncol: int = NCOL, ksplit: bool = KSPLIT):
        """ksplit: each of a head tile's NCOL warps scores only its share of the 64-wide blocks
        of c (b % NCOL == its column group) and the NCOL partial scores are summed through shared
        memory in warp order, instead of every warp scoring the whole row (ksplit=False: NCOL-fold
        score work, ~70% of the mma at K3's dims). Another sum order, so other bits than the
        kernel before it. Measured (H200, tools/mla_ksplit.py, tree 3a7c2d9): with mtc = 2, 1.9x
        faster alone at 32k caches than mtc = 1 without it, and closer to float64 (8.8e-7 against
        1.4e-6); the default since the whole k3diff check ran with it (lab/mla/)."""
        assert (md.R + md.RP) % 64 == 0 and md.R % 64 == 0 and md.R % (16 * ncol) == 0
        self.md, self.mtc, self.ncol, self.ksplit = md, mtc, ncol, ksplit
        self.hg = mtc * ncol                      # warps per CTA (MlaAttn's launch reads hg)
        self.groups = (md.H + 16 * mtc - 1) // (16 * mtc)
        self.SR = md.C + 8                        # shared row stride, elements
        # ksplit's partial scores: 8 floats per lane of every warp
        self.RED = 8 * 32 * self.hg * 4 if ksplit else 0
        assert 2 * RT * self.SR * 2 + self.RED <= 48 * 1024

    @cute.jit
    def body(self, q, ql, kv_cache, lens, pm, pl, pa, T, Lcap, NS, t, g, s):
        md = self.md
        H, R, RP, NP, C = md.H, md.R, md.RP, md.NP, md.C
        Q = NP + RP
        SR, NCOL = self.SR, self.ncol
        NB = C // 64                  # 64-wide blocks of c
        CW = R // NCOL                # latent columns per warp
        NJ = CW // 8                  # their 8-column mma tiles
        CPR = C * 2 // 16             # 16-byte chunks per cache row
        TB = RT * SR * 2              # bytes per shared tile
        NT = 32 * self.hg
        scale = Float32(float(Q) ** -0.5)
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        warp = i // 32
        gq = lane // 4
        tq = lane % 4
        cg = warp % NCOL
        h0 = (g * self.mtc + warp // NCOL) * 16
        hlo = h0 + gq
        hhi = hlo + 8
        LENS = cute.make_tensor(lens, cute.make_layout((T,), stride=(1,)))
        PM = cute.make_tensor(pm, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PL = cute.make_tensor(pl, cute.make_layout((T, H, NS), stride=(H * NS, NS, 1)))
        PA = cute.make_tensor(pa, cute.make_layout((T, H, NS, R), stride=(H * NS * R, NS * R, R, 1)))
        smem = cutlass.memory.SmemAllocator()
        buf = smem.allocate(2 * TB + self.RED, 16)
        sbase = buf.toint()
        rbase = sbase + 2 * TB                    # ksplit's partial scores
        kvb = kv_cache.toint()
        # this lane's query rows (heads past H read head H - 1 and store nothing)
        qlb = ql.toint()
        qb = q.toint()
        ql_lo = qlb + (Int64(t) * Int64(H) + Int64(cutlass.min(hlo, H - 1))) * Int64(2 * R) + Int64(32 * tq)
        ql_hi = qlb + (Int64(t) * Int64(H) + Int64(cutlass.min(hhi, H - 1))) * Int64(2 * R) + Int64(32 * tq)
        qp_lo = qb + ((Int64(t) * Int64(H) + Int64(cutlass.min(hlo, H - 1))) * Int64(Q) + Int64(NP - R)) * Int64(2) + Int64(32 * tq)
        qp_hi = qb + ((Int64(t) * Int64(H) + Int64(cutlass.min(hhi, H - 1))) * Int64(Q) + Int64(NP - R)) * Int64(2) + Int64(32 * tq)

        n = LENS[t] + 1
        ch = CH
        if n <= SHORT:
            ch = CH_SHORT
        start = s * ch
        end = cutlass.min(start + ch, n)
        ntiles = Int32(0)
        if end > start:
            ntiles = (end - start + RT - 1) // RT

        m_lo = Float32(-float("inf"))
        m_hi = Float32(-float("inf"))
        l_lo = Float32(0.0)
        l_hi = Float32(0.0)
        O = cute.make_rmem_tensor((NJ * 4,), Float32)
        for e in cutlass.range_constexpr(NJ * 4):
            O[e] = Float32(0.0)
        S = cute.make_rmem_tensor((8,), Float32)
        z = cute.make_rmem_tensor((8,), Float32)
        qa = cute.make_rmem_tensor((8,), Uint32)
        qh = cute.make_rmem_tensor((8,), Uint32)
        k0 = cute.make_rmem_tensor((8,), Uint32)
        k1 = cute.make_rmem_tensor((8,), Uint32)

        if ntiles > 0:
            self.issue(kvb, sbase, t, Lcap, start, end, 0, 0, i, NT, CPR, SR)
        cute.arch.cp_async_commit_group()
        for it in cutlass.range(ntiles):
            if it + 1 < ntiles:
                self.issue(kvb, sbase, t, Lcap, start, end, it + 1, (it + 1) % 2, i, NT, CPR, SR)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)
            cute.arch.sync_threads()
            sb = sbase + (it % 2) * TB
            # --- scores: S[0..3] rows 0-7 of the tile, S[4..7] rows 8-15
            for e in cutlass.range_constexpr(8):
                S[e] = Float32(0.0)
            if cutlass.const_expr(self.ksplit):
                for b in cutlass.range_constexpr(NB):
                    if cg == b % NCOL:
                        self.score_block(b, S, qa, qh, k0, k1, ql_lo, ql_hi, qp_lo, qp_hi, sb, gq, tq, SR)
                self.sum_partials(S, rbase, warp, lane)
            else:
                for b in cutlass.range_constexpr(NB):
                    self.score_block(b, S, qa, qh, k0, k1, ql_lo, ql_hi, qp_lo, qp_hi, sb, gq, tq, SR)
            # --- online softmax: element e of half nt is row 8 nt + 2 tq + e % 2 of head lo (e < 2)
            # or hi (e >= 2)
            mx_lo, mx_hi = masked_max(S, z, 8, start + RT * it, end, tq, scale)
            mn_lo, mn_hi, l_lo, l_hi = update(z, 8, O, NJ, m_lo, m_hi, l_lo, l_hi, mx_lo, mx_hi)
            m_lo = mn_lo
            m_hi = mn_hi
            # --- P as A fragments, hi + lo parts: a0 = rows 2t, 2t+1 of head lo (half 0), a1 head
            # hi (half 0), a2 / a3 the same of half 1
            ph = []
            pr = []
            for w in cutlass.range_constexpr(4):
                hi, lo = hi_lo(z[4 * (w // 2) + 2 * (w % 2)], z[4 * (w // 2) + 2 * (w % 2) + 1])
                ph.append(hi)
                pr.append(lo)
            # --- O += P V over this warp's columns, two 8-column tiles per ldmatrix
            for jp in cutlass.range_constexpr(NJ // 2):
                n0 = cg * CW + 16 * jp
                bv = ldmatrix_x4_trans(sb + ((lane % 16) * SR + n0 + 8 * (lane // 16)) * 2)
                for hf in cutlass.range_constexpr(2):
                    jn = 2 * jp + hf
                    for part in cutlass.range_constexpr(2):
                        A = ph if part == 0 else pr
                        c = mma_bf16_16816(A[0], A[1], A[2], A[3], bv[2 * hf], bv[2 * hf + 1],
                                           O[4 * jn], O[4 * jn + 1], O[4 * jn + 2], O[4 * jn + 3])
                        for e in cutlass.range_constexpr(4):
                            O[4 * jn + e] = c[e]
            cute.arch.sync_threads()          # the tile is refilled two steps on
        cute.arch.cp_async_wait_group(0)
        for off in cutlass.range_constexpr(1, 3):
            l_lo = l_lo + cute.arch.shuffle_sync_bfly(l_lo, off)
            l_hi = l_hi + cute.arch.shuffle_sync_bfly(l_hi, off)
        for hh in cutlass.range_constexpr(2):
            h = hlo + 8 * hh
            if h < H:
                if tq == 0:
                    if cg == 0:
                        PM[t, h, s] = m_lo if hh == 0 else m_hi
                        PL[t, h, s] = l_lo if hh == 0 else l_hi
                for jn in cutlass.range_constexpr(NJ):
                    col = cg * CW + 8 * jn + 2 * tq
                    PA[t, h, s, col] = O[4 * jn + 2 * hh]
                    PA[t, h, s, col + 1] = O[4 * jn + 2 * hh + 1]

    @cute.jit
    def score_block(self, b: cutlass.Constexpr, S, qa, qh, k0, k1, ql_lo, ql_hi, qp_lo, qp_hi, sb,
                    gq, tq, SR: cutlass.Constexpr):
        """S += the head tile's query times the tile's rows over c's 64-wide block b (lane (g, t)
        holds the 16 consecutive elements 64 b + 16 t of heads g, g + 8 and rows g, g + 8; mma j
        takes its words 2j, 2j + 1: the same K permutation on both sides)."""
        for v in cutlass.range_constexpr(2):
            if cutlass.const_expr(64 * b < self.md.R):
                wl = ld_v4_cached(ql_lo + Int64(128 * b + 16 * v))
                wh = ld_v4_cached(ql_hi + Int64(128 * b + 16 * v))
            else:
                wl = ld_v4_cached(qp_lo + Int64(128 * b + 16 * v))
                wh = ld_v4_cached(qp_hi + Int64(128 * b + 16 * v))
            r0 = ld_shared_v4(sb + (gq * SR + 64 * b + 16 * tq) * 2 + 16 * v)
            r1 = ld_shared_v4(sb + ((gq + 8) * SR + 64 * b + 16 * tq) * 2 + 16 * v)
            for w in cutlass.range_constexpr(4):
                qa[4 * v + w] = wl[w]
                qh[4 * v + w] = wh[w]
                k0[4 * v + w] = r0[w]
                k1[4 * v + w] = r1[w]
        for j in cutlass.range_constexpr(4):
            c = mma_bf16_16816(qa[2 * j], qh[2 * j], qa[2 * j + 1], qh[2 * j + 1],
                               k0[2 * j], k0[2 * j + 1], S[0], S[1], S[2], S[3])
            for e in cutlass.range_constexpr(4):
                S[e] = c[e]
            c = mma_bf16_16816(qa[2 * j], qh[2 * j], qa[2 * j + 1], qh[2 * j + 1],
                               k1[2 * j], k1[2 * j + 1], S[4], S[5], S[6], S[7])
            for e in cutlass.range_constexpr(4):
                S[4 + e] = c[e]

    @cute.jit
    def sum_partials(self, S, rbase, warp, lane):
        """ksplit: every warp of a head tile ends with the same S, the sum of its NCOL warps'
        partials in warp order (one order for every warp, so their softmax agrees bit for bit).
        The tile's closing barrier keeps the next tile's writes behind every read."""
        NCOL = self.ncol
        # [warp][half][lane] x 16 bytes: each 16-byte access of a warp is one contiguous run
        for hf in cutlass.range_constexpr(2):
            st_shared_v4_f32(rbase + ((warp * 2 + hf) * 32 + lane) * 16, S[4 * hf], S[4 * hf + 1],
                             S[4 * hf + 2], S[4 * hf + 3])
        cute.arch.sync_threads()
        w0 = warp - warp % NCOL
        for hf in cutlass.range_constexpr(2):
            acc = ld_shared_v4_f32(rbase + ((w0 * 2 + hf) * 32 + lane) * 16)
            for c in cutlass.range_constexpr(1, NCOL):
                part = ld_shared_v4_f32(rbase + (((w0 + c) * 2 + hf) * 32 + lane) * 16)
                for e in cutlass.range_constexpr(4):
                    acc[e] = acc[e] + part[e]
            for e in cutlass.range_constexpr(4):
                S[4 * hf + e] = acc[e]

    @cute.jit
    def issue(self, kvb, sbase, t, Lcap, start, end, tile, bufno, i, NT: cutlass.Constexpr,
              CPR: cutlass.Constexpr, SR: cutlass.Constexpr):
        """cp.async rows start + RT tile .. + RT - 1 of token t's cache (rows past `end` repeat
        row end - 1: finite, and scored -inf) into shared tile `bufno`."""
        C = self.md.C
        for k in cutlass.range(i, RT * CPR, NT):
            r = k // CPR
            cc = k % CPR
            row = Int64(t) * Int64(Lcap) + Int64(cutlass.min(start + RT * tile + r, end - 1))
            cp_async_16(sbase + bufno * (RT * SR * 2) + r * (SR * 2) + cc * 16,
                        kvb + row * Int64(2 * C) + Int64(16 * cc))


def attention_kernel(md, attn):
    """The attention kernel's name for these dims under attn (a config.Attn): the wgmma one where
    it runs (k_mla_attn_wg.fits: sm_90a, its tiles), its tiles by TMA where they are whole
    128-byte blocks (k_mla_attn_tma.fits; m and acc the bits of k_mla_attn_wg.py's, l summed in
    another order), else this one where its tiles fit, else the CUDA-core one. Each rounds its
    own way, and the choice depends on the dims and arch alone, so one of them serves every
    batch."""
    ok = (md.R + md.RP) % 64 == 0 and md.R % 64 == 0
    if not (attn.mla_mma and ok):
        return "mla_attn"
    if not (attn.mla_wg and k_mla_attn_wg.fits(md)):
        return "mla_attn_mma"
    return "mla_attn_tma" if k_mla_attn_tma.fits(md) else "mla_attn_wg"


def split_rows(kernel: str) -> int:
    """The rows of a long sequence's split (past SHORT) in attention kernel `kernel`."""
    return k_mla_attn_wg.CH_LONG if kernel in ("mla_attn_wg", "mla_attn_tma") else CH
