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
butterflies and a store per row: at batch 1 that was latency, 0.45 TB/s (docs/megakernel-notes.md). With SPLIT
CTAs per head each warp owns D / (4 SPLIT) rows, its lanes over the keys at a stride of 32 (each
load instruction reads 128 contiguous bytes). The warp loads its rows before the norms and gates
(they do not depend on them) and then runs each step of the rule for all its rows at once, so
neither the loads nor the butterflies wait one row at a time (v2 walked its rows one by one: 10.4
us at batch 1 against FLA's 8.0, docs/megakernel-notes.md). Every sum has a fixed order
(per lane in key order, then the butterfly; the norms' warp partials in warp order), so a token's
results depend neither on the batch, nor the split, nor the run.
"""
from megakernel.cute_env import NUM_SMS
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

    def __init__(self, kd, split: int = SPLIT, per_sm: int = 0):
        assert kd.D % 32 == 0 and (kd.D // split) % (kd.D // 32) == 0   # whole rows per warp
        self.kd, self.split, self.per_sm = kd, split, per_sm

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        if cutlass.const_expr(self.per_sm == 0):
            self.kernel(*A.kernel()).launch(grid=(A.T, self.kd.H, self.split), block=(self.kd.D, 1, 1),
                                            stream=A.stream)
        else:
            items = A.T * (self.kd.H * self.split)
            self.kernel(*A.kernel()).launch(grid=(cutlass.min(items, self.per_sm * NUM_SMS), 1, 1),
                                            block=(self.kd.D, 1, 1), stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        if cutlass.const_expr(self.per_sm == 0):
            t, h, part = cute.arch.block_idx()
            self.body(*a, t, h, part)
        else:
            self.walk(*a)

    def tensors(self, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S):
        """The arguments as tensors (the step's buffers, docs/k3-decode.md §4.4)."""
        kd = self.kd
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

    def scratch(self):
        """Shared memory: the norms' warp partials and the rule's vectors (rows: 0 q_hat,
        1 k_hat, 2 exp(gk), 3 v)."""
        D, NW = self.kd.D, self.kd.D // 32
        smem = cutlass.memory.SmemAllocator()
        return (smem.allocate_tensor(Float32, cute.make_layout((2, NW), stride=(NW, 1)), 16),
                smem.allocate_tensor(Float32, cute.make_layout((4, D), stride=(D, 1)), 16))

    @cute.jit
    def body(self, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S, t, h, part):
        ts = self.tensors(z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S)
        i, _, _ = cute.arch.thread_idx()
        st = cute.make_rmem_tensor((self.rows_per_thread(),), Float32)
        self.item(ts, t, h, part, None, st, i, None, None)

    @cute.jit
    def walk(self, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S):
        """The persistent launch: CTA b takes items b, b + G, ... (item = (token, head, split)
        in that order of significance), the next item's state rows loaded while this one's
        rule runs, so each CTA keeps a split's rows in flight the whole launch. Each item is
        `item`'s code on the same rows: the bits of `body`."""
        ts = self.tensors(z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S)
        REC, SIDX = ts[3], ts[4]
        H, SP = self.kd.H, self.split
        i, _, _ = cute.arch.thread_idx()
        b, _, _ = cute.arch.block_idx()
        G, _, _ = cute.arch.grid_dim()
        items = T * (H * SP)
        st = cute.make_rmem_tensor((self.rows_per_thread(),), Float32)
        nx = cute.make_rmem_tensor((self.rows_per_thread(),), Float32)
        red, vec = self.scratch()
        t0 = b // (H * SP)
        s0 = SIDX[t0]
        if s0 > 0:
            self.load_rows(REC, s0, (b // SP) % H, b % SP, i, st)
        for it in cutlass.range(b, items, G):
            t = it // (H * SP)
            h = (it // SP) % H
            part = it % SP
            slot = SIDX[t]
            nit = it + G
            if nit < items:
                sn = SIDX[nit // (H * SP)]
                if sn > 0:
                    self.load_rows(REC, sn, (nit // SP) % H, nit % SP, i, nx)
            cute.arch.sync_threads()        # the last item's readers of red and vec are done
            self.item(ts, t, h, part, slot, st, i, red, vec)
            for k in cutlass.range_constexpr(self.rows_per_thread()):
                st[k] = nx[k]

    def rows_per_thread(self):
        D = self.kd.D
        return (D // self.split) // (D // 32) * (D // 32)      # RPW rows x KPL keys

    @cute.jit
    def load_rows(self, REC, slot, h, part, i, st):
        """This warp's state rows v = part RPS + warp + NW r into st (lanes over keys lane,
        lane + 32, ...: each load instruction reads 128 contiguous bytes)."""
        D = self.kd.D
        NW, KPL = D // 32, D // 32
        RPS = D // self.split
        lane, warp = i % 32, i // 32
        for r in cutlass.range_constexpr(RPS // NW):
            for j in cutlass.range_constexpr(KPL):
                st[r * KPL + j] = REC[slot, h, part * RPS + warp + NW * r, lane + 32 * j]

    @cute.jit
    def item(self, ts, t, h, part, slot, st, i, red, vec):
        """One (token, head, split): its norms and gates, the delta rule on its rows (in st),
        the state written back in place and the readout. Null tokens write zeros. red is None:
        the one-item launch, which reads the slot and loads its rows here and allocates its shared
        memory (slot None too)."""
        Z, G, CO, REC, SIDX, ALOG, DTB, DEC, BETA, CORE = ts
        kd = self.kd
        H, D, P = kd.H, kd.D, kd.P
        NW, KPL = D // 32, D // 32            # warps per CTA; keys per lane
        RPS = D // self.split                 # state rows per CTA
        RPW = RPS // NW
        lane = i % 32
        warp = i // 32
        c0 = h * D + i                         # this thread's channel of the head
        sl = SIDX[t] if cutlass.const_expr(slot is None) else slot
        if sl <= 0:
            if i < RPS:
                CORE[t, h, part * RPS + i] = Float32(0.0)
            if part == 0:
                DEC[t, h, i] = Float32(0.0)
                if i == 0:
                    BETA[t, h] = Float32(0.0)
        else:
            if cutlass.const_expr(red is None):
                # this warp's state rows, loaded first: nothing below depends on them until
                # the delta rule, so their latency hides under the norms
                self.load_rows(REC, sl, h, part, i, st)
                sm = self.scratch()
            else:
                sm = (red, vec)
            rs, vs = sm
            q = CO[t, c0].to(Float32)
            k = CO[t, P + c0].to(Float32)
            sq = warp_sum(q * q)
            sk = warp_sum(k * k)
            if lane == 0:
                rs[0, warp] = sq
                rs[1, warp] = sk
            a = cute.math.exp(ALOG[h])
            gk = Float32(kd.lb) * sigmoid(a * (G[t, c0].to(Float32) + DTB[c0]))
            b = sigmoid(Z[t, kd.B0 + h].to(Float32))
            if part == 0:
                DEC[t, h, i] = gk
                if i == 0:
                    BETA[t, h] = b
            cute.arch.sync_threads()
            tq = rs[0, 0]
            tk = rs[1, 0]
            for w in cutlass.range_constexpr(1, NW):
                tq = tq + rs[0, w]
                tk = tk + rs[1, w]
            vs[0, i] = q * cute.math.rsqrt(tq + Float32(L2_EPS)) * Float32(D ** -0.5)
            vs[1, i] = k * cute.math.rsqrt(tk + Float32(L2_EPS))
            vs[2, i] = cute.math.exp(gk)
            vs[3, i] = CO[t, 2 * P + c0].to(Float32)
            cute.arch.sync_threads()
            # --- the delta rule: one warp per state row v, lanes over keys lane, lane + 32, ...
            kq = cute.make_rmem_tensor((KPL,), Float32)
            kk = cute.make_rmem_tensor((KPL,), Float32)
            ke = cute.make_rmem_tensor((KPL,), Float32)
            for j in cutlass.range_constexpr(KPL):
                kq[j] = vs[0, lane + 32 * j]
                kk[j] = vs[1, lane + 32 * j]
                ke[j] = vs[2, lane + 32 * j]
            # the rows' sums are independent: each step runs for all RPW rows before the next,
            # so the butterflies of different rows overlap (per row the same sums in the same
            # order as one row at a time)
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
                v = part * RPS + warp + NW * r
                u = b * (vs[3, v] - e[r])
                a_ = Float32(0.0)
                for j in cutlass.range_constexpr(KPL):
                    st[r * KPL + j] = st[r * KPL + j] + u * kk[j]
                    REC[sl, h, v, lane + 32 * j] = st[r * KPL + j]
                    a_ = a_ + st[r * KPL + j] * kq[j]
                o[r] = a_
            for r in cutlass.range_constexpr(RPW):
                o[r] = warp_sum(o[r])
            if lane == 0:
                for r in cutlass.range_constexpr(RPW):
                    CORE[t, h, part * RPS + warp + NW * r] = o[r]


def variant(T):
    """CTAs per (token, head) at batch T (the bits do not depend on it): 8 at batch 1, else 4
    (`python -m megakernel.tools.tune_attn`, H200, fourth session; timings in docs/megakernel-notes.md)."""
    return dict(split=8 if T == 1 else 4)
