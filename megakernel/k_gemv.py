"""Launch 1: one GEMV over the concatenated x-side rows, x read once per token tile.

W1 = [router E | latent down r | shared gate Is | shared up Is] rows, each [d] bf16.
S1[t, n] = sum_k W1[n, k] x[t, k], f32 (router logits stay f32, K3_SPEC 5.2; the other columns
are rounded to bf16 by the route kernel, the same single rounding the spec puts there).
One warp per row, 8 rows per CTA, 128-bit loads, TT tokens per pass over the row.
"""
from megakernel.dev import (THREADS, WARPS, cute, cutlass, BFloat16, Float32, Int32,
                            copy_atom_128, dot_rows, warp_sum)


class GemvX:
    def __init__(self, N: int, K: int, TT: int):
        assert K % 8 == 0
        self.N, self.K, self.TT = N, K, TT

    @cute.jit
    def __call__(self, w: cute.Pointer, x: cute.Pointer, s1: cute.Pointer, T: Int32, stream):
        self.kernel(w, x, s1, T).launch(grid=((self.N + WARPS - 1) // WARPS, 1, 1),
                                        block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, w: cute.Pointer, x: cute.Pointer, s1: cute.Pointer, T: Int32):
        N, K, TT = self.N, self.K, self.TT
        KC = K // 8
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        lane = tid % 32
        row = bid * WARPS + tid // 32
        W = cute.make_tensor(w, cute.make_layout((N, KC, 8), stride=(K, 8, 1)))
        X = cute.make_tensor(x, cute.make_layout((T, KC, 8), stride=(K, 8, 1)))
        S = cute.make_tensor(s1, cute.make_layout((T, N), stride=(N, 1)))
        atom = copy_atom_128(BFloat16)
        if row < N:
            for t0 in cutlass.range(0, T, TT):
                acc = cute.make_rmem_tensor((TT,), Float32)
                tix = cute.make_rmem_tensor((TT,), Int32)
                for j in cutlass.range_constexpr(TT):
                    acc[j] = Float32(0.0)
                    tix[j] = cutlass.min(t0 + j, T - 1)   # clamp: padded tokens are not stored
                dot_rows(atom, W, row, X, tix, acc, KC, TT, lane)
                for j in cutlass.range_constexpr(TT):
                    v = warp_sum(acc[j])
                    if lane == 0 and t0 + j < T:
                        S[t0 + j, row] = v
