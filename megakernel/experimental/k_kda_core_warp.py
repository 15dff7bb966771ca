"""State: written 2026-12-06 after the device time ran out; compiled on the
CPU (sm_90a, sm_103a), never run on a GPU. Next: `python -m megakernel.tools.tune_attn
--splits 4,8,w16,w32`: its time beside the default core and FLA's, its bits against the
default's).

The KDA core (k_kda_core.py) in CTAs of one warp: a warp per (token, head, split of the state
rows), D / split rows each, no shared memory and no CTA barrier. Why: at batch 64 the shipped core
moves its 805 MB of f32 state at 91% of an H100's copy bandwidth and FLA's fused recurrent KDA at
95% (lab/kda/); FLA runs one warp a program. A
4-warp CTA waits at two barriers for the norms before any warp can run its rule, and an SM holds 7
of them (72 registers); one-warp CTAs run their rules independently, up to 32 an SM.

The same bits as k_kda_core.py by construction, every sum in the same order:
- the norms: there warp w sums its 32 channels 32 w + lane by a butterfly and the warp partials
  are added in warp order; here lane l holds channels l + 32 j (j = 0 .. D/32 - 1), the butterfly
  of group j is that of warp j over the same lanes, and the groups are added in j order;
- the rule is KdaCore.rule itself (a warp's lanes hold keys lane + 32 j of each of its rows),
  fed the same q_hat, k_hat and exp(gk) for those keys, which here each lane computed itself
  (no exchange through shared memory);
- every elementwise step is the same expression in the same order.
Which CTA or warp takes which rows changes no bit.
"""
from megakernel.device import cute, cutlass, Float32, warp_sum
from megakernel.k_kda_core import L2_EPS, KdaCore, views
from megakernel.kernel_args import declare
from megakernel.pointwise import sigmoid


@declare
class KdaCoreWarp(KdaCore):
    """KdaCore's arguments and launch (grid (T, H, split)), CTAs of one warp, its own body."""

    def __init__(self, kd, split: int = 16):
        assert kd.D % 32 == 0 and kd.D % split == 0
        self.kd, self.split, self.threads = kd, split, 32

    @cute.jit
    def body(self, z, graw, conv_out, rec, sidx, a_log, dt_bias, decay, beta, core, T, S, t, h, part):
        kd = self.kd
        D, P = kd.D, kd.P
        KPL = D // 32                          # keys (and channels) per lane
        RPS = D // self.split                  # state rows of this CTA
        lane, _, _ = cute.arch.thread_idx()
        Z, G, CO, REC, SIDX, ALOG, DTB, DEC, BETA, CORE = views(kd, z, graw, conv_out, rec, sidx, a_log,
                                                                dt_bias, decay, beta, core, T, S)
        slot = SIDX[t]
        if slot <= 0:
            for r in cutlass.range_constexpr(0, RPS, 32):
                if r + lane < RPS:
                    CORE[t, h, part * RPS + r + lane] = Float32(0.0)
            if part == 0:
                for j in cutlass.range_constexpr(KPL):
                    DEC[t, h, lane + 32 * j] = Float32(0.0)
                if lane == 0:
                    BETA[t, h] = Float32(0.0)
        else:
            # the CTA's state rows first: nothing below depends on them until the rule
            st = cute.make_rmem_tensor((RPS * KPL,), Float32)
            for r in cutlass.range_constexpr(RPS):
                for j in cutlass.range_constexpr(KPL):
                    st[r * KPL + j] = REC[slot, h, part * RPS + r, lane + 32 * j]
            a = cute.math.exp(ALOG[h])
            b = sigmoid(Z[t, kd.B0 + h].to(Float32))
            q = cute.make_rmem_tensor((KPL,), Float32)
            k = cute.make_rmem_tensor((KPL,), Float32)
            for j in cutlass.range_constexpr(KPL):
                q[j] = CO[t, h * D + lane + 32 * j].to(Float32)
                k[j] = CO[t, P + h * D + lane + 32 * j].to(Float32)
            # k_kda_core's norms: each group's butterfly (its warp's), the groups in order
            tq = warp_sum(q[0] * q[0])
            tk = warp_sum(k[0] * k[0])
            for j in cutlass.range_constexpr(1, KPL):
                tq = tq + warp_sum(q[j] * q[j])
                tk = tk + warp_sum(k[j] * k[j])
            kq = cute.make_rmem_tensor((KPL,), Float32)
            kk = cute.make_rmem_tensor((KPL,), Float32)
            ke = cute.make_rmem_tensor((KPL,), Float32)
            for j in cutlass.range_constexpr(KPL):
                c0 = h * D + lane + 32 * j
                gk = Float32(kd.lb) * sigmoid(a * (G[t, c0].to(Float32) + DTB[c0]))
                if part == 0:
                    DEC[t, h, lane + 32 * j] = gk
                kq[j] = q[j] * cute.math.rsqrt(tq + Float32(L2_EPS)) * Float32(D ** -0.5)
                kk[j] = k[j] * cute.math.rsqrt(tk + Float32(L2_EPS))
                ke[j] = cute.math.exp(gk)
            if part == 0:
                if lane == 0:
                    BETA[t, h] = b
            # the delta rule: k_kda_core's, on this CTA's rows part RPS + r
            self.rule(st, kq, kk, ke, b, CO[t, None], 2 * P + h * D, REC, CORE, t, slot, h, part * RPS, 1,
                      lane, RPS)
