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
