"""The last launch, after the two streams join: out = bf16(f32(ro) + f32(so)) (docs/k3-decode.md §5.4).

ro (routed, main stream) and so (shared, side stream) are each already rounded to bf16, so a
separate sum changes no bit against doing it inside either GEMV; it lets the two output GEMVs
run side by side instead of one waiting for the other.
"""
from megakernel.device import THREADS, cute, cutlass, BFloat16, Float32, Int32
from megakernel.kernel_args import INT, TokenLaunch, declare

NPT = 4   # CTAs per token


@declare
class FinalSum(TokenLaunch):
    ARGS = (("ro", BFloat16), ("so", BFloat16), ("out", BFloat16), ("T", INT))

    CTAS, threads = NPT, THREADS

    @cute.jit
    def body(self, ro, so, out, T, t, by):
        d = self.dm.d
        tid, _, _ = cute.arch.thread_idx()
        lay = cute.make_layout((T, d), stride=(d, 1))
        RO, SO, O = (cute.make_tensor(p, lay) for p in (ro, so, out))
        for i in cutlass.range(by * THREADS + tid, d, NPT * THREADS):
            O[t, i] = (RO[t, i].to(Float32) + SO[t, i].to(Float32)).to(BFloat16)
