"""The shared experts' pointwise part, on the side stream:
act_s = bf16(SiTU(bf16(gate), bf16(up))).

S2[t] = [gate Is | up Is] in f32 from the shared x-side GEMV; each is rounded to bf16 once (the
rounding the spec puts on the gate_up projection, docs/k3-decode.md §5.4), SiTU in f32, rounded to bf16.
Grid (T, NPW): a few CTAs per token, so the launch is short.
"""
from megakernel.device import THREADS, cute, cutlass, BFloat16, Float32, Int32
from megakernel.pointwise import situ, bf16_round
from megakernel.kernel_args import INT, TokenLaunch, declare

NPW = 4


@declare
class SharedAct(TokenLaunch):
    ARGS = (("s2", Float32), ("acts", BFloat16), ("T", INT))

    CTAS, threads = NPW, THREADS

    @cute.jit
    def body(self, s2, acts, T, t, by):
        dm = self.dm
        Is = dm.Is
        tid, _, _ = cute.arch.thread_idx()
        S = cute.make_tensor(s2, cute.make_layout((T, 2 * Is), stride=(2 * Is, 1)))
        AS = cute.make_tensor(acts, cute.make_layout((T, Is), stride=(Is, 1)))
        for i in cutlass.range(by * THREADS + tid, Is, NPW * THREADS):
            g = bf16_round(S[t, i])
            u = bf16_round(S[t, Is + i])
            AS[t, i] = situ(g, u, dm.beta, dm.beta_lin).to(BFloat16)
