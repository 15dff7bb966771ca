"""Launches 4 and 5, MXFP4 on the tensor cores: the nibbles are decoded straight into mma.sync
m16n8k16 A fragments (bf16), the pairs of the expert are the N = 8 columns (padded by repeating
the last pair), so the multiply-adds run on the tensor cores and the f32 unpack + CUDA-core FMAs
of k_expert.py disappear. Same grid idea: (row tile, active expert), each chosen expert's rows
streamed once per launch for all its pairs (8 per pass).

Warp layout. A warp owns 16 output rows: up: gate rows r0..r0+15 and their up rows (two A tiles);
down: MT tiles of 16 rows. It walks K in blocks of 128 = 4 scale groups; in block b, lane
(g = lane/4, t = lane%4) loads group G = 4b + t of rows g and g+8 (16 bytes each, one E8M0 code
each) and the same 32 K of the activation of its column (pair) g. K permutation (the same for A
and B, so the dot is unchanged): u32 q of the 16 bytes holds elements 8q..8q+7 of the group; mma
2q+h takes words (n_{2h}, n_{2h+4}) -> k-slots 2t, 2t+1 and (n_{2h+1}, n_{2h+5}) -> 2t+8, 2t+9.
B then needs the bf16 pairs (x_{8q+2h}, x_{8q+2h+4}), (x_{8q+2h+1}, x_{8q+2h+5}): two prmt from the
natural layout (up reads hl), or none if the activation is stored in the "pair" order
[x0 x4 x1 x5 x2 x6 x3 x7] per 8 (up writes ACT that way, down reads it: ACT is internal).

Numerics: bf16 products exact, f32 accumulation in the tensor core; per (row, pair) the order is
the fixed sequence of blocks, each one mma over 16 k-slots: it depends on neither the batch nor
the column a pair lands in (columns of an mma are independent), so batch invariance and
determinism hold. Scale: value * 2^(s-191) from the bf16x2 multiply (exact for codes 63..190),
the remaining 2^64 on the finished f32 dot (mxfp4.MX_POST), SiTU in f32, act / y_j rounded to bf16.

Loads, two schemes (the launch picks one per kernel: UP, DOWN below; outputs are bitwise identical):
- S = 0: the loads of U blocks are issued into registers (weights 128-bit, L1 no-allocate, L2
  prefetch PF bytes) before any is decoded; ptxas interleaves them with the previous blocks' mma.
- S > 0: a per-warp cp.async ring of S stages in shared memory (cp.async.cg for the weights,
  4-byte cp.async for the scale words); no registers are tied up by loads in flight. At batch 1
  up (one wave of 768 CTAs) this took 85.0 -> 58.9 us (H200); down runs registers, and on
  H100s a ring up to WIDE_T tokens and registers in CTAs of 8 warps above (down_variant below).
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, Int64, Uint8, Uint32
from megakernel.pointwise import situ
from megakernel.mxfp4 import MX_POST, mxfp4_word_to_bf16x2x4, mx_scale2
from megakernel.ptx import (ld_v4_stream, ld_v4_cached, ld_u8_stream, prmt, mma_bf16_16816,
                            cp_async_16, cp_async_4, ld_shared_v4)
from megakernel.dims import MAX_T
from megakernel.k_expert import ExpertLaunch


def act_pos(j: int) -> int:
    """Where logical element j (0..7) of an 8-chunk of ACT is stored (the pair order)."""
    return 2 * (j % 4) + j // 4


class ExpertMMA(ExpertLaunch):
    wdt = Uint8                       # MXFP4 only

    def __init__(self, dims, up: bool, U: int, WPC: int, MT: int = 1, PF: int = 0, S: int = 0,
                 coherent: bool = False, smem_cap: int = 48 * 1024):
        """`coherent`: read the activation with plain loads instead of the read-only (.nc) path,
        required when it is written by the same launch (k_persistent.py)."""
        d = dims
        self.dm, self.up, self.WPC, self.PF, self.S = dims, up, WPC, PF, S
        self.coherent = coherent
        self.threads = 32 * WPC
        self.R = 2 * d.I if up else d.r          # weight rows per expert
        self.K = d.r if up else d.I
        self.NOUT = d.I if up else d.r           # output rows per pair
        assert self.K % 128 == 0 and self.NOUT % 16 == 0, "mma path needs K % 128, N % 16"
        self.NT = 2 if up else MT                # 16-row A tiles per warp
        self.RW = 16 if up else 16 * MT          # output rows per warp
        assert self.NOUT % self.RW == 0
        NB = self.K // 128
        self.U = max(v for v in range(1, U + 1) if NB % v == 0)
        # S > 0: cp.async ring instead of register loads: per warp S stages, each holding per
        # lane NT*2 16-byte weight chunks and one 16-byte field of scale words, laid out
        # [stage][field][lane] (16 B per lane: conflict-free 128-bit shared loads). Each lane
        # reads back only what it copied itself, so no barrier is needed.
        self.SB = (self.NT * 2 + 1) * 512
        assert S == 0 or (S >= 2 and WPC * S * self.SB <= smem_cap)

    @property
    def tiles(self):
        """Row tiles (CTAs) per expert."""
        rc = self.RW * self.WPC
        return (self.NOUT + rc - 1) // rc

    @cute.jit
    def body(self, w, ws, xin, nact, act_e, act_off, act_cnt, pairs, yout, T, bx, u):
        """Row tile bx of active expert slot u (nothing when u >= nact)."""
        dm, UP, K, R, NOUT = self.dm, self.up, self.K, self.R, self.NOUT
        NT, RW, U, WPC, S, SB, PF = self.NT, self.RW, self.U, self.WPC, self.S, self.SB, self.PF
        E, k = dm.E, dm.k
        P = T * k
        KB = K // 2                 # bytes per weight row
        G = K // 32                 # scale groups per row
        NB = K // 128               # K blocks
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        g = lane // 4
        tg = lane % 4
        r0 = (bx * WPC + tid // 32) * RW
        NA = cute.make_tensor(nact, cute.make_layout((1,), stride=(1,)))
        AE = cute.make_tensor(act_e, cute.make_layout((E,), stride=(1,)))
        AO = cute.make_tensor(act_off, cute.make_layout((E,), stride=(1,)))
        AC = cute.make_tensor(act_cnt, cute.make_layout((E,), stride=(1,)))
        PR = cute.make_tensor(pairs, cute.make_layout((P,), stride=(1,)))
        Y = cute.make_tensor(yout, cute.make_layout((P, NOUT), stride=(NOUT, 1)))
        if u < NA[0] and r0 < NOUT:
            e = AE[u]
            off = AO[u]
            cnt = AC[u]
            wb = w.toint()
            sb = ws.toint()
            xb = xin.toint()
            base = Int64(e) * Int64(R) + Int64(r0 + g)
            wad = []
            sad = []
            sad4 = []
            for t in cutlass.range_constexpr(NT):
                for hh in cutlass.range_constexpr(2):
                    if cutlass.const_expr(UP):
                        roff = t * NOUT + 8 * hh          # tile 0 gate rows, tile 1 up rows
                    else:
                        roff = 16 * t + 8 * hh
                    row = base + Int64(roff)
                    wad.append(wb + row * Int64(KB) + Int64(tg * 16))
                    sad.append(sb + row * Int64(G) + Int64(tg))
                    sad4.append(sb + row * Int64(G))
            sw = Int32(0)
            if cutlass.const_expr(S > 0):
                smem = cutlass.memory.SmemAllocator()
                buf = smem.allocate(WPC * S * SB, 16)
                sw = buf.toint() + (tid // 32) * (S * SB)
            acc = cute.make_rmem_tensor((NT * 4,), Float32)
            Ar = cute.make_rmem_tensor((U * NT * 2 * 4,), Uint32)
            Sr = cute.make_rmem_tensor((U * NT * 2,), Uint32)
            Xr = cute.make_rmem_tensor((U * 16,), Uint32)
            for b0 in cutlass.range(0, cnt, 8):
                pc = PR[off + cutlass.min(b0 + g, cnt - 1)]   # padded columns repeat a pair
                xrow = pc
                if cutlass.const_expr(UP):
                    xrow = pc // k                            # up reads hl by token
                xa = xb + Int64(xrow) * Int64(2 * K) + Int64(tg * 64)
                for i in cutlass.range_constexpr(NT * 4):
                    acc[i] = Float32(0.0)
                if cutlass.const_expr(S > 0):
                    for s0 in cutlass.range_constexpr(S - 1):
                        if cutlass.const_expr(s0 < NB):
                            _ring_issue(sw, s0, Int64(s0), lane, wad, sad4, NT, SB, PF)
                        cute.arch.cp_async_commit_group()
                    for blk in cutlass.range(NB):
                        cute.arch.cp_async_wait_group(S - 2)
                        sl = sw + (blk % S) * SB + lane * 16
                        for th in cutlass.range_constexpr(NT * 2):
                            v = ld_shared_v4(sl + th * 512)
                            for q in cutlass.range_constexpr(4):
                                Ar[th * 4 + q] = v[q]
                        sv = ld_shared_v4(sl + NT * 2 * 512)
                        for th in cutlass.range_constexpr(NT * 2):
                            Sr[th] = (sv[th] >> Uint32(8 * tg)) & Uint32(0xFF)
                        for q in cutlass.range_constexpr(4):
                            xv = ld_v4_cached(xa + Int64(blk) * Int64(256) + Int64(16 * q),
                                              self.coherent)
                            for j in cutlass.range_constexpr(4):
                                Xr[4 * q + j] = xv[j]
                        nb = blk + (S - 1)
                        if nb < NB:
                            _ring_issue(sw, nb % S, Int64(nb), lane, wad, sad4, NT, SB, PF)
                        cute.arch.cp_async_commit_group()
                        _mma_block(Ar, Sr, Xr, acc, 0, NT, UP)
                    cute.arch.cp_async_wait_group(0)
                else:
                    for it in cutlass.range(NB // U):
                        # issue every load of U blocks first
                        for uu in cutlass.range_constexpr(U):
                            blk = Int64(it * U + uu)
                            for th in cutlass.range_constexpr(NT * 2):
                                v = ld_v4_stream(wad[th] + blk * Int64(64), PF)
                                for q in cutlass.range_constexpr(4):
                                    Ar[(uu * NT * 2 + th) * 4 + q] = v[q]
                                Sr[uu * NT * 2 + th] = ld_u8_stream(sad[th] + blk * Int64(4))
                            for q in cutlass.range_constexpr(4):
                                xv = ld_v4_cached(xa + blk * Int64(256) + Int64(16 * q),
                                                  self.coherent)
                                for j in cutlass.range_constexpr(4):
                                    Xr[uu * 16 + 4 * q + j] = xv[j]
                        # then decode + mma
                        for uu in cutlass.range_constexpr(U):
                            _mma_block(Ar, Sr, Xr, acc, uu, NT, UP)
                # epilogue: lane holds columns 2t, 2t+1 of rows g, g+8 of each tile
                for cc in cutlass.range_constexpr(2):
                    n = 2 * tg + cc
                    if b0 + n < cnt:
                        p = PR[off + b0 + n]
                        for hh in cutlass.range_constexpr(2):
                            if cutlass.const_expr(UP):
                                ga = acc[2 * hh + cc] * Float32(MX_POST)
                                gb = acc[4 + 2 * hh + cc] * Float32(MX_POST)
                                col = r0 + 8 * hh + 2 * (g % 4) + g // 4   # act_pos(g)
                                Y[p, col] = situ(ga, gb, dm.beta, dm.beta_lin).to(BFloat16)
                            else:
                                for t in cutlass.range_constexpr(NT):
                                    Y[p, r0 + 16 * t + 8 * hh + g] = (
                                        acc[4 * t + 2 * hh + cc] * Float32(MX_POST)).to(BFloat16)


def _ring_issue(sw, st, blk, lane, wad, sad4, NT, SB, PF):
    """cp.async block `blk` of this lane's rows into ring stage `st` (traced inline)."""
    sl = sw + st * SB + lane * 16
    for th in range(NT * 2):
        cp_async_16(sl + th * 512, wad[th] + blk * Int64(64), PF)
        cp_async_4(sl + NT * 2 * 512 + 4 * th, sad4[th] + blk * Int64(4))


def _mma_block(Ar, Sr, Xr, acc, uu, NT, UP):
    """Decode + mma of one K block held in registers (slot uu of Ar / Sr / Xr), traced inline."""
    s2 = [mx_scale2(Sr[uu * NT * 2 + th]) for th in range(NT * 2)]
    for q in range(4):
        x0 = Xr[uu * 16 + 4 * q + 0]
        x1 = Xr[uu * 16 + 4 * q + 1]
        x2 = Xr[uu * 16 + 4 * q + 2]
        x3 = Xr[uu * 16 + 4 * q + 3]
        if UP:
            bq = [(prmt(x0, x2, 0x5410), prmt(x0, x2, 0x7632)),
                  (prmt(x1, x3, 0x5410), prmt(x1, x3, 0x7632))]
        else:
            bq = [(x0, x1), (x2, x3)]             # ACT in pair order
        for t in range(NT):
            ag = mxfp4_word_to_bf16x2x4(Ar[(uu * NT * 2 + 2 * t) * 4 + q], s2[2 * t])
            a8 = mxfp4_word_to_bf16x2x4(Ar[(uu * NT * 2 + 2 * t + 1) * 4 + q], s2[2 * t + 1])
            for h in range(2):
                c = mma_bf16_16816(ag[2 * h], a8[2 * h], ag[2 * h + 1], a8[2 * h + 1],
                                   bq[h][0], bq[h][1], acc[4 * t], acc[4 * t + 1],
                                   acc[4 * t + 2], acc[4 * t + 3])
                for i in range(4):
                    acc[4 * t + i] = c[i]


def fits(dm):
    """The tensor-core kernels need r % 128 == 0 and I % 128 == 0 (else k_expert.py runs)."""
    return dm.r % 128 == 0 and dm.I % 128 == 0


# The variants (`python -m megakernel.tools.tune_mma`, full dims; every variant gives bitwise the
# same result, so a variant may change with the batch or the card without touching batch
# invariance or replay). U: K blocks of 128 whose loads are issued together; WPC: warps per CTA;
# MT: 16-row tiles per warp (down); PF: L2 prefetch bytes on the weight loads; S: stages of a
# per-warp cp.async ring (0 = loads into registers). up: a 3-stage ring (H200, the log).
# down: registers, 4 warps a CTA (H200, the log: 30.6 us at T = 1 and 213 at 8 against a 4-stage
# ring's 37.5 and 269), on every card but those DOWN_BY_CARD names. On H100s (each
# launch alone, us at T = 1 / 8 / 16 / 32 / 64) the ring is the faster up to WIDE_T tokens (41.0 /
# 256.9 against 42.2 / 276.2, and the step 1.03 / 1.24x) and 8 warps a CTA above (461.1 / 795.9 /
# 1273.1 against 591.8 / 1097.8 / 1890.7: twice the bytes in flight per CTA, its activation rows
# shared in L1; the step 1.17-1.18x). Not measured on an H200 since (lab/moe/). ALT_UP:
# the up launch's registers build, so CI compiles every load scheme.
UP = dict(U=1, WPC=4, PF=128, S=3)
ALT_UP = dict(U=2, WPC=4, PF=128)
DOWN = dict(U=2, WPC=4, MT=1, PF=128)
DOWN_RING = dict(U=1, WPC=4, MT=1, PF=128, S=4)
DOWN_WIDE = dict(U=2, WPC=8, MT=1, PF=128)
WIDE_T = 8
# a part of the card's name -> ((largest batch, variant), ...), the batches in rising order
DOWN_BY_CARD = {"H100": ((WIDE_T, DOWN_RING), (MAX_T, DOWN_WIDE))}


def down_variant(T: int, card: str = "") -> dict:
    """The down launch's variant for batch T on the card named `card` (torch's device name)."""
    for part, table in DOWN_BY_CARD.items():
        if part in card:
            return dict(next(v for t, v in table if T <= t))
    return dict(DOWN)


def down_variants() -> list:
    """Every variant down_variant can pick (the compile list, the tests)."""
    out = [DOWN] + [v for table in DOWN_BY_CARD.values() for _, v in table]
    return [dict(v) for i, v in enumerate(out) if v not in out[:i]]
