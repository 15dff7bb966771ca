"""KDA launch 4: the gated RMSNorm per head (docs/k3-decode.md §4.6), one CTA of D threads per (token,
head): normed = bf16(o rsqrt(mean(o^2) + eps) w sigmoid(g2)), f32 math, one rounding; the sum of
squares per warp by butterfly, then the warp partials in order. Null tokens get 0. A launch of
its own because the core (k_kda_core.py) spreads a head's readout o over several CTAs.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, warp_sum
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import sigmoid


@declare
class KdaNorm:
    ARGS = (("z", BFloat16), ("sidx", Int32), ("core", Float32), ("o_norm", BFloat16),
            ("normed", BFloat16), ("T", INT))

    def __init__(self, kd):
        assert kd.D % 32 == 0
        self.kd = kd

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.kd.H, 1), block=(self.kd.D, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, h, _ = cute.arch.block_idx()
        self.body(*a, t, h)

    @cute.jit
    def body(self, z, sidx, core, o_norm, normed, T, t, h):
        kd = self.kd
        H, D, P, N = kd.H, kd.D, kd.P, kd.N
        NW = D // 32
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        warp = i // 32
        Z = cute.make_tensor(z, cute.make_layout((T, N), stride=(N, 1)))
        SIDX = cute.make_tensor(sidx, cute.make_layout((T,), stride=(1,)))
        CORE = cute.make_tensor(core, cute.make_layout((T, H, D), stride=(P, D, 1)))
        ONW = cute.make_tensor(o_norm, cute.make_layout((D,), stride=(1,)))
        NORMED = cute.make_tensor(normed, cute.make_layout((T, P), stride=(P, 1)))
        c0 = h * D + i
        if SIDX[t] <= 0:
            NORMED[t, c0] = Float32(0.0).to(BFloat16)
        else:
            smem = cutlass.memory.SmemAllocator()
            red = smem.allocate_tensor(Float32, cute.make_layout((NW,), stride=(1,)), 16)
            o = CORE[t, h, i]
            so = warp_sum(o * o)
            if lane == 0:
                red[warp] = so
            cute.arch.sync_threads()
            tot = red[0]
            for w in cutlass.range_constexpr(1, NW):
                tot = tot + red[w]
            inv = cute.math.rsqrt(tot / Float32(D) + Float32(kd.eps))
            gate = sigmoid(Z[t, kd.G0 + c0].to(Float32))
            NORMED[t, c0] = (o * inv * ONW[i].to(Float32) * gate).to(BFloat16)
