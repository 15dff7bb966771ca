"""Launch 7: one pass over [W_up | W_shared_down], one warp per output row n of d.

yu = bf16(yn . W_up[n]) (K = r), ys = bf16(act_s . W_sd[n]) (K = Is), out = bf16(f32(yu) + f32(ys))
(K3_SPEC 5.3-5.4). Both dots share the warp, so the final sum needs no extra launch.
"""
from megakernel.dev import (THREADS, WARPS, cute, cutlass, BFloat16, Float32, Int32,
                            copy_atom_128, dot_rows, warp_sum)


class OutProj:
    def __init__(self, dims, TT: int, debug: bool):
        self.dm, self.TT, self.debug = dims, TT, debug

    @cute.jit
    def __call__(self, wup: cute.Pointer, wsd: cute.Pointer, yn: cute.Pointer,
                 acts: cute.Pointer, out: cute.Pointer, ro: cute.Pointer, so: cute.Pointer,
                 T: Int32, stream):
        self.kernel(wup, wsd, yn, acts, out, ro, so, T).launch(
            grid=((self.dm.d + WARPS - 1) // WARPS, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, wup: cute.Pointer, wsd: cute.Pointer, yn: cute.Pointer,
               acts: cute.Pointer, out: cute.Pointer, ro: cute.Pointer, so: cute.Pointer,
               T: Int32):
        d, r, Is, TT = self.dm.d, self.dm.r, self.dm.Is, self.TT
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        lane = tid % 32
        row = bid * WARPS + tid // 32
        WU = cute.make_tensor(wup, cute.make_layout((d, r // 8, 8), stride=(r, 8, 1)))
        WS = cute.make_tensor(wsd, cute.make_layout((d, Is // 8, 8), stride=(Is, 8, 1)))
        XN = cute.make_tensor(yn, cute.make_layout((T, r // 8, 8), stride=(r, 8, 1)))
        XS = cute.make_tensor(acts, cute.make_layout((T, Is // 8, 8), stride=(Is, 8, 1)))
        O = cute.make_tensor(out, cute.make_layout((T, d), stride=(d, 1)))
        RO = cute.make_tensor(ro, cute.make_layout((T, d), stride=(d, 1)))
        SO = cute.make_tensor(so, cute.make_layout((T, d), stride=(d, 1)))
        atom = copy_atom_128(BFloat16)
        if row < d:
            for t0 in cutlass.range(0, T, TT):
                au = cute.make_rmem_tensor((TT,), Float32)
                ash = cute.make_rmem_tensor((TT,), Float32)
                tix = cute.make_rmem_tensor((TT,), Int32)
                for j in cutlass.range_constexpr(TT):
                    au[j] = Float32(0.0)
                    ash[j] = Float32(0.0)
                    tix[j] = cutlass.min(t0 + j, T - 1)
                dot_rows(atom, WU, row, XN, tix, au, r // 8, TT, lane)
                dot_rows(atom, WS, row, XS, tix, ash, Is // 8, TT, lane)
                for j in cutlass.range_constexpr(TT):
                    yu = warp_sum(au[j]).to(BFloat16)
                    ys = warp_sum(ash[j]).to(BFloat16)
                    if lane == 0 and t0 + j < T:
                        O[t0 + j, row] = (yu.to(Float32) + ys.to(Float32)).to(BFloat16)
                        if cutlass.const_expr(self.debug):
                            RO[t0 + j, row] = yu
                            SO[t0 + j, row] = ys
