"""KDA launch 2: the short causal conv (docs/k3-decode.md §4.3) of every q, k, v channel, one thread per
(token, channel): y = bf16(silu(sum_w window[w] conv_w[c, w])) over (the slot's conv history,
the new raw input z), oldest first, in that order; then the history shifted and the raw input
appended (bf16 copies: bitwise the reference's). Null tokens (state_idx <= 0) get y = 0 and touch
no state. A launch of its own: the core (k_kda_core.py) splits a head's state rows over several
CTAs, which all read y; the history they would otherwise read is rewritten here.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import sigmoid

THREADS = 256


@declare
class KdaConv:
    ARGS = (("z", BFloat16), ("conv_state", BFloat16), ("sidx", Int32), ("conv_w", Float32),
            ("conv_out", BFloat16), ("T", INT), ("S", INT))

    def __init__(self, kd):
        self.kd = kd
        self.ctas = (3 * kd.P + THREADS - 1) // THREADS

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.ctas, 1), block=(THREADS, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, by, _ = cute.arch.block_idx()
        self.body(*a, t, by)

    @cute.jit
    def body(self, z, conv_state, sidx, conv_w, conv_out, T, S, t, by):
        kd = self.kd
        P3, W, N = 3 * kd.P, kd.W, kd.N
        i, _, _ = cute.arch.thread_idx()
        c = by * THREADS + i
        Z = cute.make_tensor(z, cute.make_layout((T, N), stride=(N, 1)))
        CS = cute.make_tensor(conv_state, cute.make_layout((S, P3, W - 1), stride=(P3 * (W - 1), W - 1, 1)))
        SIDX = cute.make_tensor(sidx, cute.make_layout((T,), stride=(1,)))
        CW = cute.make_tensor(conv_w, cute.make_layout((P3, W), stride=(W, 1)))
        CO = cute.make_tensor(conv_out, cute.make_layout((T, P3), stride=(P3, 1)))
        slot = SIDX[t]
        if c < P3:
            if slot <= 0:
                CO[t, c] = Float32(0.0).to(BFloat16)
            else:
                new = Z[t, c]
                acc = Float32(0.0)
                hist = cute.make_rmem_tensor((W - 1,), BFloat16)
                for w in cutlass.range_constexpr(W - 1):
                    hist[w] = CS[slot, c, w]
                    acc = acc + hist[w].to(Float32) * CW[c, w]
                acc = acc + new.to(Float32) * CW[c, W - 1]
                CO[t, c] = (acc * sigmoid(acc)).to(BFloat16)
                for w in cutlass.range_constexpr(W - 2):
                    CS[slot, c, w] = hist[w + 1]
                CS[slot, c, W - 2] = new
