"""KDA launch 3: the recurrent core (docs/k3-decode.md §4.4-4.5), one CTA of D threads per (token, head,
split of the state rows).

Per live token (state_idx > 0), every CTA of a head reads the conv outputs q, k, v (k_kda_conv.py)
and computes the L2-normalised q (times D^-1/2) and k, the bounded decay
gk = lb sigmoid(exp(A_log[h]) (graw + dt_bias)) and beta = sigmoid(beta_raw) -- a few hundred
flops, repeated per split rather than passed between CTAs; split 0 writes gk and beta. Then the
delta rule on its D / SPLIT rows of the f32 state S[v][k] of the token's slot, decay along the
key axis, in place, and the readout o[v] = S_new[v] . q_hat (f32). Null tokens (state_idx <= 0)
write zeros and touch no state.

Why splits: the state update is the memory traffic (D x D f32 read and written per token and
head), and one CTA per head walked its 128 rows four warps wide, one dependent load, two
butterflies and a store per row: at batch 1 that was latency, 0.45 TB/s (lab/kda/). With SPLIT
CTAs per head each warp owns D / (4 SPLIT) rows, its lanes over the keys at a stride of 32 (each
load instruction reads 128 contiguous bytes). The warp loads its rows before the norms and gates
(they do not depend on them) and then runs each step of the rule for all its rows at once, so
neither the loads nor the butterflies wait one row at a time (v2 walked its rows one by one: 10.4
us at batch 1 against FLA's 8.0, lab/kda/). Every sum has a fixed order
(per lane in key order, then the butterfly; the norms' warp partials in warp order), so a token's
results depend neither on the batch, nor the split, nor the run.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, warp_sum
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import sigmoid

L2_EPS = 1e-6      # inside the sum of squares (reference/kda.py, vLLM's fused_recurrent kernel)
SPLIT = 8          # CTAs per (token, head), each over D / SPLIT state rows


@declare
class KdaCore:
    ARGS = (("z", BFloat16), ("graw", BFloat16), ("conv_out", BFloat16), ("rec", Float32),
            ("sidx", Int32), ("a_log", Float32), ("dt_bias", Float32), ("decay", Float32),
            ("beta", Float32), ("core", Float32), ("T", INT), ("S", INT))

    def __init__(self, kd, split: int = SPLIT):
        assert kd.D % 32 == 0 and (kd.D // split) % (kd.D // 32) == 0   # whole rows per warp
        self.kd, self.split, self.threads = kd, split, kd.D

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.kd.H, self.split), block=(self.threads, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, h, part = cute.arch.block_idx()
        self.body(*a, t, h, part)

    @cute.jit
    def body(self, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S, t, h, part):
        kd = self.kd
        D, P = kd.D, kd.P
        NW, KPL = D // 32, D // 32            # warps per CTA; keys per lane
        RPS = D // self.split                 # state rows per CTA
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        warp = i // 32
        Z, G, CO, REC, SIDX, ALOG, DTB, DEC, BETA, CORE = views(kd, z, graw, conv_out, rec, sidx, a_log,
                                                                dt_bias, decay, beta, core, T, S)
        c0 = h * D + i                         # this thread's channel of the head
        slot = SIDX[t]
        if slot <= 0:
            if i < RPS:
                CORE[t, h, part * RPS + i] = Float32(0.0)
            if part == 0:
                DEC[t, h, i] = Float32(0.0)
                if i == 0:
                    BETA[t, h] = Float32(0.0)
        else:
            # this warp's state rows v = part RPS + warp + NW r, loaded first: nothing below
            # depends on them until the delta rule, so their latency hides under the norms
            RPW = RPS // NW
            st = cute.make_rmem_tensor((RPW * KPL,), Float32)
            for r in cutlass.range_constexpr(RPW):
                for j in cutlass.range_constexpr(KPL):
                    st[r * KPL + j] = REC[slot, h, part * RPS + warp + NW * r, lane + 32 * j]
            smem = cutlass.memory.SmemAllocator()
            red = smem.allocate_tensor(Float32, cute.make_layout((2, NW), stride=(NW, 1)), 16)
            vec = smem.allocate_tensor(Float32, cute.make_layout((4, D), stride=(D, 1)), 16)
            # rows of vec: 0 q_hat, 1 k_hat, 2 exp(gk), 3 v
            q = CO[t, c0].to(Float32)
            k = CO[t, P + c0].to(Float32)
            sq = warp_sum(q * q)
            sk = warp_sum(k * k)
            if lane == 0:
                red[0, warp] = sq
                red[1, warp] = sk
            a = cute.math.exp(ALOG[h])
            gk = Float32(kd.lb) * sigmoid(a * (G[t, c0].to(Float32) + DTB[c0]))
            b = sigmoid(Z[t, kd.B0 + h].to(Float32))
            if part == 0:
                DEC[t, h, i] = gk
                if i == 0:
                    BETA[t, h] = b
            cute.arch.sync_threads()
            tq = red[0, 0]
            tk = red[1, 0]
            for w in cutlass.range_constexpr(1, NW):
                tq = tq + red[0, w]
                tk = tk + red[1, w]
            vec[0, i] = q * cute.math.rsqrt(tq + Float32(L2_EPS)) * Float32(D ** -0.5)
            vec[1, i] = k * cute.math.rsqrt(tk + Float32(L2_EPS))
            vec[2, i] = cute.math.exp(gk)
            vec[3, i] = CO[t, 2 * P + c0].to(Float32)
            cute.arch.sync_threads()
            # --- the delta rule: one warp per state row v, lanes over keys lane, lane + 32, ...
            kq = cute.make_rmem_tensor((KPL,), Float32)
            kk = cute.make_rmem_tensor((KPL,), Float32)
            ke = cute.make_rmem_tensor((KPL,), Float32)
            for j in cutlass.range_constexpr(KPL):
                kq[j] = vec[0, lane + 32 * j]
                kk[j] = vec[1, lane + 32 * j]
                ke[j] = vec[2, lane + 32 * j]
            self.rule(st, kq, kk, ke, b, vec[3, None], 0, REC, CORE, t, slot, h, part * RPS + warp, NW,
                      lane, RPW)

    @cute.jit
    def rule(self, st, kq, kk, ke, b, vals, voff, REC, CORE, t, slot, h, base, stride: cutlass.Constexpr,
             lane, RPW: cutlass.Constexpr):
        """The delta rule on this warp's rows v = base + stride r (r < RPW; st holds row r's keys
        lane + 32 j at r KPL + j), v's value vals[voff + v], written back in place; the readout
        o[v] to CORE. The rows' sums are independent: each step runs for all RPW rows before the
        next, so the butterflies of different rows overlap (per row the same sums in the same
        order as one row at a time)."""
        KPL = self.kd.D // 32
        e = cute.make_rmem_tensor((RPW,), Float32)
        o = cute.make_rmem_tensor((RPW,), Float32)
        for r in cutlass.range_constexpr(RPW):
            a_ = Float32(0.0)
            for j in cutlass.range_constexpr(KPL):
                st[r * KPL + j] = st[r * KPL + j] * ke[j]        # decayed state
                a_ = a_ + st[r * KPL + j] * kk[j]
            e[r] = a_
        for r in cutlass.range_constexpr(RPW):
            e[r] = warp_sum(e[r])
        for r in cutlass.range_constexpr(RPW):
            v = base + stride * r
            u = b * (vals[voff + v].to(Float32) - e[r])
            a_ = Float32(0.0)
            for j in cutlass.range_constexpr(KPL):
                st[r * KPL + j] = st[r * KPL + j] + u * kk[j]
                REC[slot, h, v, lane + 32 * j] = st[r * KPL + j]
                a_ = a_ + st[r * KPL + j] * kq[j]
            o[r] = a_
        for r in cutlass.range_constexpr(RPW):
            o[r] = warp_sum(o[r])
        if lane == 0:
            for r in cutlass.range_constexpr(RPW):
                CORE[t, h, base + stride * r] = o[r]

def views(kd, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S):
    """The core's arguments as tensors (docs/k3-decode.md §4.4): z, graw, the conv outputs
    [q | k | v], the f32 state S[slot, head, v, k], the slots, A_log, dt_bias, and the outputs gk,
    beta and the readout o."""
    H, D, P, N = kd.H, kd.D, kd.P, kd.N
    return (cute.make_tensor(z, cute.make_layout((T, N), stride=(N, 1))),
            cute.make_tensor(graw, cute.make_layout((T, P), stride=(P, 1))),
            cute.make_tensor(conv_out, cute.make_layout((T, 3 * P), stride=(3 * P, 1))),
            cute.make_tensor(rec, cute.make_layout((S, H, D, D), stride=(H * D * D, D * D, D, 1))),
            cute.make_tensor(sidx, cute.make_layout((T,), stride=(1,))),
            cute.make_tensor(a_log, cute.make_layout((H,), stride=(1,))),
            cute.make_tensor(dt_bias, cute.make_layout((P,), stride=(1,))),
            cute.make_tensor(decay, cute.make_layout((T, H, D), stride=(P, D, 1))),
            cute.make_tensor(beta, cute.make_layout((T, H), stride=(H, 1))),
            cute.make_tensor(core, cute.make_layout((T, H, D), stride=(P, D, 1))))


def variant(T):
    """CTAs per (token, head) at batch T (the bits do not depend on it): 8 at batch 1, else 4
    (`python -m megakernel.tools.tune_attn`, H200; timings in lab/kda/)."""
    return dict(split=8 if T == 1 else 4)
