"""Every dense GEMV of the step: Y[t, n] = sum_k W[n, k] X[t, k], W [N, K] bf16, X [T, K] bf16.

One warp per output row, 8 rows per CTA tile, 128-bit loads, TT tokens per pass over the row (x
read once per token tile); the K order is device.dot_rows's, fixed whatever the batch. `ctas` (a
run-time argument) caps the grid: CTAs then loop over row tiles. The side stream's GEMVs use a
small cap so that they stream in the background without taking the SM slots the routed chain
needs (moe.py). Four instances (moe.py):
- gemv_x:      [router E | latent down r] x d, f32 out (router logits stay f32, docs/k3-decode.md §5.2; the
               latent columns are rounded to bf16 by the route kernel, the spec's one rounding);
- gemv_shared: [shared gate Is | shared up Is] x d, f32 out (rounded by k_shared_act.SharedAct);
- out_shared:  so = bf16(act_s W_sd^T), d x Is;
- out_routed:  ro = bf16(yn W_up^T), d x r (docs/k3-decode.md §5.3-5.4; k_final_sum.FinalSum adds the two).
And three of KDA's (kda.py): the fused in-projection, f_b (over f_a, a column slice of its
output: `ldx`) and o_proj.
"""
from megakernel.device import (THREADS, WARPS, cute, cutlass, BFloat16, Float32, Int32,
                               copy_atom_128, dot_rows, warp_sum)
from megakernel.kernel_args import INT, Args, declare


class GemvLaunch:
    """The launch both GEMV kernels share (this one and k_gemv_mma.GemvMMA): min(ctas, tiles)
    CTAs of self.threads; CTA b takes the tiles b, b + grid, ... (`body`, also a task of
    k_persistent.py)."""
    # y: f32 or bf16 (out_bf16); ctas: a cap on the grid (the kernel gets the grid launched)
    ARGS = (("w", BFloat16), ("x", BFloat16), ("y", "ydt"), ("T", INT), ("ctas", INT))

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        grid = cutlass.min(A.ctas, self.tiles)
        self.kernel(*A.kernel(ctas=grid)).launch(grid=(grid, 1, 1), block=(self.threads, 1, 1),
                                                 stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS, ctas = the grid launched
        bid, _, _ = cute.arch.block_idx()
        w, x, y, T, grid = a
        self.body(w, x, y, T, bid, self.tiles, grid)


@declare
class Gemv(GemvLaunch):
    threads = THREADS

    def __init__(self, N: int, K: int, TT: int, out_bf16: bool, unroll: int = 0, ldx: int = 0,
                 ldy: int = 0):
        """ldx: X's row stride in elements (default K; KDA's f_b reads f_a, a column slice);
        ldy: Y's (default N; MLA's and KDA's gate projections write a column slice)."""
        assert K % 8 == 0 and (ldx or K) % 8 == 0 and (ldy or N) >= N
        self.N, self.K, self.TT, self.out_bf16, self.unroll = N, K, TT, out_bf16, unroll
        self.ldx, self.ldy = ldx or K, ldy or N
        self.ydt = BFloat16 if out_bf16 else Float32
        self.tiles = (N + WARPS - 1) // WARPS

    @cute.jit
    def body(self, w, x, y, T, lo, hi, step):
        """Row tiles lo, lo + step, ... below hi (also a task of k_persistent.py)."""
        N, K = self.N, self.K
        KC = K // 8
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        W = cute.make_tensor(w, cute.make_layout((N, KC, 8), stride=(K, 8, 1)))
        X = cute.make_tensor(x, cute.make_layout((T, KC, 8), stride=(self.ldx, 8, 1)))
        Y = cute.make_tensor(y, cute.make_layout((T, N), stride=(self.ldy, 1)))
        atom = copy_atom_128(BFloat16)
        for tile in cutlass.range(lo, cutlass.min(hi, self.tiles), step):
            row = tile * WARPS + tid // 32
            if row < N:
                self.row(atom, W, X, Y, row, T, lane)

    @cute.jit
    def row(self, atom, W, X, Y, row, T, lane):
        TT = self.TT
        for t0 in cutlass.range(0, T, TT):
            acc = cute.make_rmem_tensor((TT,), Float32)
            tix = cute.make_rmem_tensor((TT,), Int32)
            for j in cutlass.range_constexpr(TT):
                acc[j] = Float32(0.0)
                tix[j] = cutlass.min(t0 + j, T - 1)   # clamp: padded tokens are not stored
            dot_rows(atom, W, row, X, tix, acc, self.K // 8, TT, lane, self.unroll)
            for j in cutlass.range_constexpr(TT):
                v = warp_sum(acc[j])
                if lane == 0 and t0 + j < T:
                    if cutlass.const_expr(self.out_bf16):
                        Y[t0 + j, row] = v.to(BFloat16)
                    else:
                        Y[t0 + j, row] = v
