"""KDA decode, everything between the in-projection and o_proj (K3_SPEC 4), one CTA per
(token, head), D threads (thread i owns channel i of the head).

Per live token (state_idx > 0): the short causal conv over (conv history, new raw input) with
SiLU for the head's q, k and v channels, rounded to bf16, and the conv state shifted and the raw
input appended (bf16 copies: bitwise the reference's); L2-normalised q (times D^-1/2) and k; the
bounded decay gk = lb sigmoid(exp(A_log[h]) (graw + dt_bias)); beta = sigmoid(beta_raw); the delta
rule on the f32 state S[v][k] of the token's slot, decay along the key axis, in place; the
readout o = S_new q_hat (f32); the gated RMSNorm bf16(o rsqrt(mean(o^2) + eps) w sigmoid(g2)).
Null tokens (state_idx <= 0) write zeros to every output and touch no state.

The state update is the memory traffic (D x D f32 read and written per token and head): one warp
per state row, its lanes over the key axis at a stride of 32 (each load instruction reads 128
contiguous bytes), the row's two dots summed by butterfly. Every sum has a fixed order (per lane
in key order, then the butterfly; the norms' warp partials in warp order), so a token's results
depend neither on the batch nor on the run: batch-invariant and deterministic.
"""
from megakernel.device import cute, cutlass, BFloat16, Float32, Int32, warp_sum
from megakernel.kernel_args import INT, Args, declare
from megakernel.pointwise import sigmoid

L2_EPS = 1e-6      # inside the sum of squares (reference/kda.py, vLLM's fused_recurrent kernel)


@declare
class KdaCore:
    ARGS = (("z", BFloat16), ("graw", BFloat16), ("conv_state", BFloat16), ("rec", Float32),
            ("sidx", Int32), ("conv_w", Float32), ("a_log", Float32), ("dt_bias", Float32),
            ("o_norm", BFloat16), ("conv_out", BFloat16), ("decay", Float32), ("beta", Float32),
            ("core", Float32), ("normed", BFloat16), ("T", INT), ("S", INT))

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
    def body(self, z, graw, conv_state, rec, sidx, conv_w, a_log, dt_bias, o_norm, conv_out,
             decay, beta, core, normed, T, S, t, h):
        kd = self.kd
        H, D, P, W, N = kd.H, kd.D, kd.P, kd.W, kd.N
        NW, KPL = D // 32, D // 32            # warps per CTA; keys per lane
        i, _, _ = cute.arch.thread_idx()
        lane = i % 32
        warp = i // 32
        lay = lambda *shape: cute.make_layout(shape, stride=_row_major(shape))  # noqa: E731
        Z = cute.make_tensor(z, lay(T, N))
        G = cute.make_tensor(graw, lay(T, P))
        CS = cute.make_tensor(conv_state, lay(S, 3 * P, W - 1))
        REC = cute.make_tensor(rec, lay(S, H, D, D))
        SIDX = cute.make_tensor(sidx, lay(T))
        CW = cute.make_tensor(conv_w, lay(3 * P, W))
        ALOG = cute.make_tensor(a_log, lay(H))
        DTB = cute.make_tensor(dt_bias, lay(P))
        ONW = cute.make_tensor(o_norm, lay(D))
        CO = cute.make_tensor(conv_out, lay(T, 3 * P))
        DEC = cute.make_tensor(decay, lay(T, H, D))
        BETA = cute.make_tensor(beta, lay(T, H))
        CORE = cute.make_tensor(core, lay(T, H, D))
        NORMED = cute.make_tensor(normed, lay(T, P))
        c0 = h * D + i                         # this thread's channel of the head
        slot = SIDX[t]
        if slot <= 0:
            for ch in cutlass.range_constexpr(3):
                CO[t, ch * P + c0] = Float32(0.0).to(BFloat16)
            DEC[t, h, i] = Float32(0.0)
            CORE[t, h, i] = Float32(0.0)
            NORMED[t, c0] = Float32(0.0).to(BFloat16)
            if i == 0:
                BETA[t, h] = Float32(0.0)
        else:
            smem = cutlass.memory.SmemAllocator()
            red = smem.allocate_tensor(Float32, cute.make_layout((3, NW), stride=(NW, 1)), 16)
            vec = smem.allocate_tensor(Float32, cute.make_layout((5, D), stride=(D, 1)), 16)
            # rows of vec: 0 q_hat, 1 k_hat, 2 exp(gk), 3 v, 4 the readout o
            # --- short conv (q, k, v channels of this head), SiLU, bf16; the state shifted
            y = cute.make_rmem_tensor((3,), Float32)
            for ch in cutlass.range_constexpr(3):
                c = ch * P + c0
                new = Z[t, c]
                acc = Float32(0.0)
                hist = cute.make_rmem_tensor((W - 1,), BFloat16)
                for w in cutlass.range_constexpr(W - 1):
                    hist[w] = CS[slot, c, w]
                    acc = acc + hist[w].to(Float32) * CW[c, w]
                acc = acc + new.to(Float32) * CW[c, W - 1]
                yb = (acc * sigmoid(acc)).to(BFloat16)
                CO[t, c] = yb
                y[ch] = yb.to(Float32)
                for w in cutlass.range_constexpr(W - 2):
                    CS[slot, c, w] = hist[w + 1]
                CS[slot, c, W - 2] = new
            # --- L2 norms of q and k over the head (warp partials, then in warp order)
            sq = warp_sum(y[0] * y[0])
            sk = warp_sum(y[1] * y[1])
            if lane == 0:
                red[0, warp] = sq
                red[1, warp] = sk
            # --- decay gate and beta
            a = cute.math.exp(ALOG[h])
            gk = Float32(kd.lb) * sigmoid(a * (G[t, c0].to(Float32) + DTB[c0]))
            DEC[t, h, i] = gk
            b = sigmoid(Z[t, 4 * P + D + h].to(Float32))
            if i == 0:
                BETA[t, h] = b
            cute.arch.sync_threads()
            tq = red[0, 0]
            tk = red[1, 0]
            for w in cutlass.range_constexpr(1, NW):
                tq = tq + red[0, w]
                tk = tk + red[1, w]
            vec[0, i] = y[0] * cute.math.rsqrt(tq + Float32(L2_EPS)) * Float32(D ** -0.5)
            vec[1, i] = y[1] * cute.math.rsqrt(tk + Float32(L2_EPS))
            vec[2, i] = cute.math.exp(gk)
            vec[3, i] = y[2]
            cute.arch.sync_threads()
            # --- the delta rule: one warp per state row v, lanes over keys lane, lane + 32, ...
            kq = cute.make_rmem_tensor((KPL,), Float32)
            kk = cute.make_rmem_tensor((KPL,), Float32)
            ke = cute.make_rmem_tensor((KPL,), Float32)
            s = cute.make_rmem_tensor((KPL,), Float32)
            for j in cutlass.range_constexpr(KPL):
                kq[j] = vec[0, lane + 32 * j]
                kk[j] = vec[1, lane + 32 * j]
                ke[j] = vec[2, lane + 32 * j]
            for v in cutlass.range(warp, D, NW):
                e = Float32(0.0)
                for j in cutlass.range_constexpr(KPL):
                    s[j] = REC[slot, h, v, lane + 32 * j] * ke[j]      # decayed state
                    e = e + s[j] * kk[j]
                e = warp_sum(e)
                u = b * (vec[3, v] - e)
                o = Float32(0.0)
                for j in cutlass.range_constexpr(KPL):
                    s[j] = s[j] + u * kk[j]
                    REC[slot, h, v, lane + 32 * j] = s[j]
                    o = o + s[j] * kq[j]
                o = warp_sum(o)
                if lane == 0:
                    CORE[t, h, v] = o
                    vec[4, v] = o
            cute.arch.sync_threads()
            # --- gated RMSNorm over the head, one rounding
            o = vec[4, i]
            so = warp_sum(o * o)
            if lane == 0:
                red[2, warp] = so
            cute.arch.sync_threads()
            tot = red[2, 0]
            for w in cutlass.range_constexpr(1, NW):
                tot = tot + red[2, w]
            inv = cute.math.rsqrt(tot / Float32(D) + Float32(kd.eps))
            gate = sigmoid(Z[t, 3 * P + c0].to(Float32))
            NORMED[t, c0] = (o * inv * ONW[i].to(Float32) * gate).to(BFloat16)


def _row_major(shape):
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= n
    return tuple(reversed(stride))
