"""CPU: the index bookkeeping of k_expert_mma.py, emulated lane by lane with the PTX fragment
layouts of mma.sync m16n8k16, against a plain dot product; and its nibble decode bits against the
CUDA-core path's recipe (no GPU, no cutlass needed)."""
import random

import numpy as np


def old_words(v):
    out = []
    for sh in (12, 8, 4, 0):
        x = (v << sh) & 0xFFFFFFFF
        out.append((x & 0x80008000) | ((x >> 6) & 0x01C001C0))
    return out


def new_words(v):
    w, out = v >> 8, []
    for i in range(4):
        src = v if i < 2 else w
        iso, mul = ((0x000F000F, 4160), (0x00F000F0, 260))[i % 2]
        out.append((((src & iso) * mul) & 0xFFFFFFFF) & 0x81C081C0)
    return out


def test_decode_bits_match_cuda_core_recipe():
    rng = random.Random(0)
    for v in [0, 0xFFFFFFFF, 0x88888888, 0x77777777] + [rng.getrandbits(32) for _ in range(50000)]:
        assert old_words(v) == new_words(v), hex(v)


def act_pos(j):
    return 2 * (j % 4) + j // 4


def emulate(W, X, pair_order_x):
    """W [16, K] (values), X [8, K]; returns C [16, 8] built from per-lane fragments exactly as
    the kernel assigns them, with the PTX layouts of A (row), B (col) and C."""
    K = W.shape[1]
    C = np.zeros((16, 8))
    Xs = X.copy()
    if pair_order_x:                     # stored in the pair order, as up writes ACT
        Xs = np.zeros_like(X)
        for c in range(K // 8):
            for j in range(8):
                Xs[:, 8 * c + act_pos(j)] = X[:, 8 * c + j]
    for blk in range(K // 128):
        for q in range(4):
            for h in range(2):
                A = np.zeros((16, 16))
                B = np.zeros((16, 8))
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    G = 4 * blk + t
                    base = 32 * G + 8 * q
                    # decoded words: word i = (nibble i, nibble i+4) as (lo, hi)
                    word = lambda r, i: (W[r, base + i], W[r, base + i + 4])  # noqa: E731
                    a0, a2 = word(g, 2 * h), word(g, 2 * h + 1)
                    a1, a3 = word(g + 8, 2 * h), word(g + 8, 2 * h + 1)
                    # PTX A layout: a0 (row g, k 2t,2t+1), a1 (row g+8, same k), a2 (row g,
                    # k 2t+8, 2t+9), a3 (row g+8, same k)
                    A[g, 2 * t:2 * t + 2] = a0
                    A[g + 8, 2 * t:2 * t + 2] = a1
                    A[g, 2 * t + 8:2 * t + 10] = a2
                    A[g + 8, 2 * t + 8:2 * t + 10] = a3
                    xs = Xs[g, 32 * G + 8 * q: 32 * G + 8 * q + 8]   # 4 u32 = 4 bf16 pairs
                    u = [(xs[2 * m], xs[2 * m + 1]) for m in range(4)]
                    if pair_order_x:
                        bq = [(u[0], u[1]), (u[2], u[3])]
                    else:   # prmt 0x5410 -> (a.lo, b.lo), 0x7632 -> (a.hi, b.hi)
                        bq = [((u[0][0], u[2][0]), (u[0][1], u[2][1])),
                              ((u[1][0], u[3][0]), (u[1][1], u[3][1]))]
                    b0, b1 = bq[h]
                    B[2 * t:2 * t + 2, g] = b0           # b0: k 2t, 2t+1, column g
                    B[2 * t + 8:2 * t + 10, g] = b1      # b1: k 2t+8, 2t+9
                C += A @ B
    return C


def test_fragment_bookkeeping_is_a_permuted_dot():
    rng = np.random.default_rng(0)
    K = 256
    W = rng.integers(-8, 8, (16, K)).astype(np.float64)
    X = rng.integers(-8, 8, (8, K)).astype(np.float64)
    ref = W @ X.T
    for po in (False, True):
        assert np.array_equal(emulate(W, X, po), ref), po


def test_up_writes_act_in_pair_order():
    # the up epilogue stores logical row r0 + 8hh + g at r0 + 8hh + 2*(g%4) + g//4
    assert [2 * (g % 4) + g // 4 for g in range(8)] == [act_pos(j) for j in range(8)]
    assert sorted(act_pos(j) for j in range(8)) == list(range(8))


def emulate_gemv(W, X, BK):
    """k_gemv_mma.GemvMMA's bookkeeping for one 16-row tile and one 8-token tile: lane (g, t)
    holds BK/4 consecutive elements of rows g, g+8 and of token g per block; mma j takes its u32
    words 2j, 2j+1 (bf16 pairs) as k-slots (2t, 2t+1) and (2t+8, 2t+9)."""
    K = W.shape[1]
    C = np.zeros((16, 8))
    for blk in range(K // BK):
        for j in range(BK // 16):
            A = np.full((16, 16), np.nan)
            B = np.full((16, 8), np.nan)
            for lane in range(32):
                g, t = lane // 4, lane % 4
                base = blk * BK + t * (BK // 4)
                word = lambda v, i: (v[base + 2 * i], v[base + 2 * i + 1])  # noqa: E731
                A[g, 2 * t:2 * t + 2] = word(W[g], 2 * j)
                A[g + 8, 2 * t:2 * t + 2] = word(W[g + 8], 2 * j)
                A[g, 2 * t + 8:2 * t + 10] = word(W[g], 2 * j + 1)
                A[g + 8, 2 * t + 8:2 * t + 10] = word(W[g + 8], 2 * j + 1)
                B[2 * t:2 * t + 2, g] = word(X[g], 2 * j)
                B[2 * t + 8:2 * t + 10, g] = word(X[g], 2 * j + 1)
            assert not np.isnan(A).any() and not np.isnan(B).any()   # every fragment slot set
            C += A @ B
    return C


def test_gemv_mma_bookkeeping_is_a_permuted_dot():
    rng = np.random.default_rng(1)
    for BK, K in ((64, 192), (32, 96)):
        W = rng.integers(-8, 8, (16, K)).astype(np.float64)
        X = rng.integers(-8, 8, (8, K)).astype(np.float64)
        assert np.array_equal(emulate_gemv(W, X, BK), W @ X.T), BK


def test_gemv_wgmma_staging_gives_each_k_slot_the_element_mma_sync_reads():
    """GemvMMA WG = 1 (k_gemv_mma.wg_group): lane t's u32 word w of a token staged at byte
    (tok // 8) * 128 CW + (tok % 8) * 16 + 4 t + 128 w of the X tile; wgmma step j reads it through
    a no-swizzle K-major descriptor (start + 256 j, LBO 128, SBO 128 CW; PTX's canonical layout:
    element (n, k) of the step at start + (n // 8) SBO + (n % 8) 16 + (k // 8) LBO + 2 (k % 8)).
    Every (step, K slot, token) must find the element that mma j's A fragment puts in that slot:
    lane t = (slot % 8) // 2 gives word 2 j + slot // 8 of its chunk, elements t BK / 4 + 2 w,
    + 1. So the same products meet in the same K slots (on the H200 the same bits: tune_gemv)."""
    for BK in (64, 32):
        CW, N = BK // 8, 64
        tile = {}                                   # byte -> (token, logical element of the block)
        for tok in range(N):
            for t in range(4):
                for w in range(CW):
                    at = (tok // 8) * 128 * CW + (tok % 8) * 16 + 4 * t + 128 * w
                    for half in range(2):
                        assert at + 2 * half not in tile
                        tile[at + 2 * half] = (tok, t * (BK // 4) + 2 * w + half)
        assert len(tile) == N * BK                  # every element staged once, no overlap
        for j in range(BK // 16):
            for n in range(N):
                for k in range(16):
                    at = 256 * j + (n // 8) * 128 * CW + (n % 8) * 16 + (k // 8) * 128 + 2 * (k % 8)
                    t = (k % 8) // 2
                    want = t * (BK // 4) + 2 * (2 * j + k // 8) + k % 2
                    assert tile[at] == (n, want), (BK, j, n, k)


def bf16(x):
    """Round float64 values to bf16 (nearest even), as cvt.rn.bf16x2.f32 does (via f32)."""
    f = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def emulate_mla_split(Qm, rows, start, end, R, ncol, scale):
    """k_mla_attn_mma.MlaAttnMMA's bookkeeping for one head tile (Qm [16, C]) over rows
    [start, end) of one sequence (rows [n, C]), all NCOL column groups: the scores through
    GemvMMA's K permutation (emulate_gemv, BK = 64), the C layout of S read as the A layout of P
    (hi + lo bf16 parts), B from ldmatrix.trans, the per-quad softmax. Returns m [16], l [16],
    acc [16, R] as the kernel stores them."""
    RT, CW = 16, R // ncol
    m = np.full((32, 2), -np.inf)           # per lane: head lo, hi
    lsum = np.zeros((32, 2))
    O = np.zeros((ncol, 32, (CW // 8) * 4))
    for rb in range(start, end, RT):
        tile = np.stack([rows[min(rb + r, end - 1)] for r in range(RT)])
        C0 = emulate_gemv(Qm, tile[0:8], 64)
        C1 = emulate_gemv(Qm, tile[8:16], 64)
        z = np.zeros((32, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for nt, Cn in enumerate((C0, C1)):
                vals = (Cn[g, 2 * t], Cn[g, 2 * t + 1], Cn[g + 8, 2 * t], Cn[g + 8, 2 * t + 1])
                for e in range(4):
                    row = 8 * nt + 2 * t + e % 2
                    z[lane, 4 * nt + e] = -np.inf if rb + row >= end else vals[e] * scale
        # quad max (lanes 4g .. 4g + 3 hold head g's and g + 8's 16 scores)
        mx = np.zeros((32, 2))
        for lane in range(32):
            q = range(4 * (lane // 4), 4 * (lane // 4) + 4)
            mx[lane, 0] = max(z[x, e] for x in q for e in (0, 1, 4, 5))
            mx[lane, 1] = max(z[x, e] for x in q for e in (2, 3, 6, 7))
        mn = np.maximum(m, mx)
        a = np.exp(m - mn)
        p = np.zeros((32, 8))
        for lane in range(32):
            for e in range(8):
                hh = 0 if e % 4 < 2 else 1
                p[lane, e] = np.exp(z[lane, e] - mn[lane, hh])
                lsum[lane, hh] = lsum[lane, hh] * (a[lane, hh] if e in (0, 2) else 1) + p[lane, e]
        m = mn
        # P as the A operand: words w = (z[4(w//2) + 2(w%2)], z[... + 1]) -> a0..a3
        for part in ("hi", "lo"):
            A = np.full((16, 16), np.nan)
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for w in range(4):
                    x = p[lane, [4 * (w // 2) + 2 * (w % 2), 4 * (w // 2) + 2 * (w % 2) + 1]]
                    v = bf16(x) if part == "hi" else bf16(x - bf16(x))
                    r = g + 8 * (w % 2)
                    k = 2 * t + 8 * (w // 2)
                    A[r, k:k + 2] = v
            assert not np.isnan(A).any()
            for cg in range(ncol):
                if part == "hi":
                    for jn in range(CW // 8):
                        O[cg, :, 4 * jn:4 * jn + 2] *= a[:, 0:1]
                        O[cg, :, 4 * jn + 2:4 * jn + 4] *= a[:, 1:2]
                for jp in range(CW // 16):
                    n0 = cg * CW + 16 * jp
                    # ldmatrix.x4.trans: lane L gives the address of row L % 16, column
                    # n0 + 8 (L // 16); matrix i is lanes 8i .. 8i + 7; lane (g, t) receives
                    # (row 2t, col g), (row 2t + 1, col g) of each
                    mats = []
                    for i in range(4):
                        r0, c0 = (8 * i) % 16, n0 + 8 * ((8 * i) // 16)
                        mats.append(tile[r0:r0 + 8, c0:c0 + 8])
                    for hf in range(2):
                        B = np.full((16, 8), np.nan)
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            b0 = mats[2 * hf][2 * t:2 * t + 2, g]
                            b1 = mats[2 * hf + 1][2 * t:2 * t + 2, g]
                            B[2 * t:2 * t + 2, g] = b0
                            B[2 * t + 8:2 * t + 10, g] = b1
                        assert np.array_equal(B, tile[:, n0 + 8 * hf:n0 + 8 * hf + 8])
                        D = A @ B
                        jn = 2 * jp + hf
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            O[cg, lane, 4 * jn:4 * jn + 4] += (D[g, 2 * t], D[g, 2 * t + 1],
                                                               D[g + 8, 2 * t], D[g + 8, 2 * t + 1])
    # the quad's partial sums in butterfly order (xor 1, then xor 2)
    l1 = lsum + lsum[np.arange(32) ^ 1]
    l2 = l1 + l1[np.arange(32) ^ 2]
    mo, lo, acc = np.zeros(16), np.zeros(16), np.zeros((16, R))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for hh in range(2):
            h = g + 8 * hh
            mo[h], lo[h] = m[lane, hh], l2[lane, hh]
            for cg in range(ncol):
                for jn in range(CW // 8):
                    col = cg * CW + 8 * jn + 2 * t
                    acc[h, col:col + 2] = O[cg, lane, 4 * jn + 2 * hh:4 * jn + 2 * hh + 2]
    return mo, lo, acc


def test_mla_attention_mma_bookkeeping_matches_a_split_softmax():
    """The tensor-core MLA attention (k_mla_attn_mma.py), lane by lane: the split's partials
    equal a direct softmax over its rows (exact scores; probabilities kept to about 2^-16 by the
    bf16 hi + lo parts), including a ragged last tile and an empty split."""
    rng = np.random.default_rng(3)
    R, RP, ncol = 128, 64, 4
    C = R + RP
    Qm = rng.integers(-4, 5, (16, C)).astype(np.float64)
    rows = rng.integers(-4, 5, (70, C)).astype(np.float64)
    scale = 0.0625                                   # a power of two: scaled scores stay exact
    for start, end in ((0, 70), (16, 37), (64, 65)):
        m, lsum, acc = emulate_mla_split(Qm, rows, start, end, R, ncol, scale)
        z = scale * Qm @ rows[start:end].T
        mr = z.max(axis=1)
        p = np.exp(z - mr[:, None])
        assert np.array_equal(m, mr)                     # the scores are exact (integers)
        assert np.allclose(lsum, p.sum(axis=1), rtol=1e-12)
        assert np.allclose(acc, p @ rows[start:end, :R], rtol=1e-4, atol=1e-4 * np.abs(rows).max())
    m, lsum, acc = emulate_mla_split(Qm, rows, 70, 70, R, ncol, scale)   # empty split
    assert np.all(m == -np.inf) and not lsum.any() and not acc.any()


def test_mla_attention_wgmma_images_feed_each_operand_its_element():
    """k_mla_attn_wg.py: 16-byte unit u of the query image (and of a cache tile) holds row
    8 (u // 8 CC) + u % 8, chunk (u // 8) % CC (CC = C / 8), i.e. elements 8 cc .. 8 cc + 7 at
    byte 16 u. Read through PTX's no-swizzle canonical layouts (cute's make_gmma_desc comment):
    K-major, element (m, k) of a step at start + (m // 8) SBO + (m % 8) 16 + (k // 8) LBO + 2 (k % 8);
    N-major (B transposed), element (k, n) at start + (n // 8) SBO + 2 (n % 8) + (k % 8) 16 +
    (k // 8) LBO. The scores' step j (start + 256 j, LBO 128, SBO 128 CC) must find query
    element 16 j + k of head m and tile row n's element 16 j + k; P V's step kk of warpgroup w
    (start + 2 kk 128 CC + w (R / 16) 128, LBO 128 CC, SBO 128) tile row 16 kk + k's latent
    column w R / 2 + n: the same image serves as both operands."""
    for C, R in ((576, 512), (96, 64)):
        CC, RG, NV = C // 8, 128 * (C // 8), R // 2
        image = {}                                  # byte -> (row, element)
        for u in range(64 * CC):
            row, cc = 8 * (u // (8 * CC)) + u % 8, (u // 8) % CC
            for e in range(8):
                assert 16 * u + 2 * e not in image
                image[16 * u + 2 * e] = (row, 8 * cc + e)
        assert len(image) == 64 * C
        for j in range(C // 16):
            for m in range(64):
                for k in range(16):
                    at = 256 * j + (m // 8) * RG + (m % 8) * 16 + (k // 8) * 128 + 2 * (k % 8)
                    assert image[at] == (m, 16 * j + k), (C, j, m, k)
        for w in range(2):
            for kk in range(4):
                start = kk * 2 * RG + w * (NV // 8) * 128
                for k in range(16):
                    for n in range(NV):
                        at = start + (n // 8) * 128 + 2 * (n % 8) + (k % 8) * 16 + (k // 8) * RG
                        assert image[at] == (16 * kk + k, w * NV + n), (C, w, kk, k, n)


def swz(a):
    """PTX's 128-byte swizzle of an address formed unswizzled (the image 1024-byte aligned):
    bits 4-6 XORed with bits 7-9."""
    return a ^ (((a >> 7) & 7) << 4)


def sw128_image(C):
    """byte -> (row, element) of a 64-row tile image as TMA writes it (k_mla_attn_tma.py): row
    r's 16-byte chunk cc at (cc // 8) 8192 + r 128 + (cc % 8 ^ r % 8) 16."""
    image = {}
    for r in range(64):
        for cc in range(C // 8):
            for e in range(8):
                at = (cc // 8) * 8192 + r * 128 + ((cc % 8) ^ (r % 8)) * 16 + 2 * e
                assert at not in image
                image[at] = (r, 8 * cc + e)
    return image


def v_at(kk, w, NV, k, n):
    """The byte P V's step kk of warpgroup w reads for element (k, n) of V: the N-major SW128
    layout (start kk 2048 + w NV 128, LBO 8192, SBO 1024)."""
    return swz(kk * 2048 + w * NV * 128 + 2 * (n % 8) + 16 * ((n // 8) % 8) + (n // 64) * 8192
               + (k % 8) * 128 + (k // 8) * 1024)


def test_mla_attention_tma_swizzled_image_feeds_each_operand_its_element():
    """k_mla_attn_tma.py: row r's 16-byte chunk cc (elements 8 cc .. 8 cc + 7) sits at byte
    (cc // 8) 8192 + r 128 + (cc % 8 ^ r % 8) 16 of an image (what TMA writes with the 128-byte
    swizzle: lab/probes/tma_probe.py held a tile to it on the H200; the query and
    partial tiles go there by cp.async). Read through PTX's 128-byte-swizzle canonical layouts
    (cute's make_gmma_desc comment): an address is formed unswizzled, then bits 4-6 are XORed
    with bits 7-9 (the image 1024-byte aligned). K-major, element (m, k) of a step at start +
    (m // 8) SBO + (m % 8) 128 + 2 k; N-major (B transposed), element (k, n) at start + 2 (n % 8)
    + 16 ((n // 8) % 8) + (n // 64) LBO + (k % 8) 128 + (k // 8) SBO. The scores' step j (start
    + (j // 4) 8192 + (j % 4) 32, SBO 1024) must find element 16 j + k of row m in the query and
    the tile alike; P V's step kk of warpgroup w (start + kk 2048 + w (R / 2) 128, LBO 8192, SBO
    1024) tile row 16 kk + k's latent column w R / 2 + n."""
    for C, R in ((576, 512), (192, 128)):
        NV = R // 2
        image = sw128_image(C)
        assert len(image) == 64 * C and max(image) < 64 * C * 2
        for j in range(C // 16):
            start = (j // 4) * 8192 + (j % 4) * 32
            for m in range(64):
                for k in range(16):
                    at = swz(start + (m // 8) * 1024 + (m % 8) * 128 + 2 * k)
                    assert image[at] == (m, 16 * j + k), (C, j, m, k)
        for w in range(2):
            for kk in range(4):
                for k in range(16):
                    for n in range(NV):
                        assert image[v_at(kk, w, NV, k, n)] == (16 * kk + k, w * NV + n), (C, w, kk, k, n)


def test_mla_attention_split_halves_feed_the_whole_tiles_operands():
    """k_mla_attn_tma.py's split scores: warpgroup w's scores (m64n32) read the image at start +
    4096 w, which must find tile rows 32 w .. 32 w + 31 (element 16 j + k) with the swizzle of
    the test above; V's descriptors never reach the tile's last 64-column block (the rope block
    warpgroup 1's P overwrites), while the scores do read it. Then the exchange: thread X of
    warpgroup w holds S_half[4 b + e] = (head 16 (X // 32) + X % 32 // 4 + 8 (e >= 2), row 32 w +
    8 b + 2 (X % 4) + e % 2); its P half goes out in chunks c (hi u = 4 c.. for c < 2, lo for c >=
    2) at c 2048 + 16 X of its warpgroup's buffer, and back into P[8 w + 4 (c % 2) + k (+ 16 for
    lo)] of both warpgroups' thread X: which must be the P a whole-tile softmax holds there
    (P[x] = pack(S[2 x], S[2 x + 1]) of the m64n64 fragment; hi x < 16, lo the same pairs)."""
    for C, R in ((576, 512), (192, 128)):
        NV = R // 2
        image = sw128_image(C)
        rope = (C // 64 - 1) * 8192
        assert all(col >= R for at, (_, col) in image.items() if at >= rope)
        for w in range(2):
            for j in range(C // 16):
                start = 4096 * w + (j // 4) * 8192 + (j % 4) * 32
                for n in range(32):
                    for k in range(16):
                        at = swz(start + (n // 8) * 1024 + (n % 8) * 128 + 2 * k)
                        assert image[at] == (32 * w + n, 16 * j + k), (C, w, j, n, k)
            for kk in range(4):
                for k in range(16):
                    for n in range(NV):
                        assert v_at(kk, w, NV, k, n) < rope, (C, w, kk, k, n)

    def s_full(X, e):            # the m64n64 fragment: element e of thread X -> (head, row)
        return (16 * (X // 32) + X % 32 // 4 + 8 * (e % 4 >= 2), 8 * (e // 4) + 2 * (X % 4) + e % 2)

    def s_half(w, X, e):
        return (16 * (X // 32) + X % 32 // 4 + 8 * (e % 4 >= 2), 32 * w + 8 * (e // 4) + 2 * (X % 4) + e % 2)

    for X in range(128):
        whole = {x: (s_full(X, 2 * x), s_full(X, 2 * x + 1)) for x in range(16)}
        buffers = {}
        for w in range(2):                      # H[u] hi, H[8 + u] lo: pairs (2 u, 2 u + 1)
            H = [(s_half(w, X, 2 * (u % 8)), s_half(w, X, 2 * (u % 8) + 1)) for u in range(16)]
            for c in range(4):
                buffers[(w, c * 2048 + 16 * X)] = H[4 * c:4 * c + 4]
        P = {}
        for w in range(2):
            for c in range(4):
                for k, v in enumerate(buffers[(w, c * 2048 + 16 * X)]):
                    P[8 * w + 4 * (c % 2) + (16 if c >= 2 else 0) + k] = v
        assert sorted(P) == list(range(32))
        for x in range(16):
            assert P[x] == whole[x] and P[16 + x] == whole[x], (X, x)
