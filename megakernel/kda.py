"""The KDA decode step (K3_SPEC 4) on the GPU: six launches on the caller's stream.

  0 kda_in    z = bf16(x [W_q | W_k | W_v | W_g | W_fa | W_b]^T)       Gemv, N = 4P + D + H
  1 kda_fb    graw = bf16(f_a W_fb^T), f_a = z[:, 4P : 4P + D]         Gemv over a column slice
  2 kda_conv  y = bf16(silu(short conv)) of q|k|v, the conv state shifted  k_kda_conv.py
  3 kda_core  norms, gates, the delta rule in place, the readout o     k_kda_core.py (rows split)
  4 kda_norm  normed = gated RMSNorm(o)                                 k_kda_norm.py
  5 kda_out   out = bf16(normed W_o^T)                                  Gemv

The GEMVs are the MoE's (cache.gemv_variant: k_gemv_mma.py on the tensor cores, a fixed K
order whatever the batch); the other kernels work per token: the step is batch-invariant and deterministic, as the backend declares. Null tokens
(state_idx <= 0) get zero intermediates, so o_proj gives them exact zeros; their projections are
computed and never read. The states are updated in place.
"""
import torch

from megakernel import cache
from megakernel.launch_streams import stream

STAGES = ("kda_in", "kda_fb", "kda_conv", "kda_core", "kda_norm", "kda_out")
OUTPUTS = ("out", "conv_out", "decay", "beta", "core", "normed")
# stage -> {kernel argument: buffer} (the generic Gemv's arguments w, x, y)
BIND = {
    "kda_in": dict(w="w_in", x="x", y="z", ctas="full_grid"),
    "kda_fb": dict(w="w_fb", x="f_a", y="graw", ctas="full_grid"),
    "kda_out": dict(w="w_o", x="normed", y="out", ctas="full_grid"),
}
_INT31 = 1 << 31


class KdaStep:
    def __init__(self, kd, weights: dict, device):
        self.kd, self.device = kd, device
        w = {n: t.to(device) for n, t in weights.items()}
        bf = lambda t: t.to(torch.bfloat16).contiguous()          # noqa: E731
        f32 = lambda t: t.to(torch.float32).contiguous()          # noqa: E731
        self._weights = dict(
            w_in=bf(torch.cat([w[n] for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                              "g_proj.weight", "f_a.weight", "b_proj.weight")])),
            w_fb=bf(w["f_b.weight"]), w_o=bf(w["o_proj.weight"]),
            conv_w=f32(w["conv.weight"].reshape(3 * kd.P, kd.W)),
            a_log=f32(w["A_log"].reshape(-1)[:kd.H]),             # per head: the first H entries
            dt_bias=f32(w["dt_bias"]), o_norm=bf(w["o_norm.weight"]))
        self._scratch = {}

    def scratch(self, T):
        s = self._scratch.get(T)
        if s is None:
            kd, dev = self.kd, self.device
            e = lambda *sh, dt=torch.bfloat16: torch.empty(*sh, dtype=dt, device=dev)  # noqa: E731
            s = dict(z=e(T, kd.N), graw=e(T, kd.P), sidx=e(T, dt=torch.int32),
                     out=e(T, kd.d), conv_out=e(T, 3 * kd.P), decay=e(T, kd.H, kd.D, dt=torch.float32),
                     beta=e(T, kd.H, dt=torch.float32), core=e(T, kd.H, kd.D, dt=torch.float32),
                     normed=e(T, kd.P))
            self._scratch[T] = s
        return s

    def launch(self, x, conv_state, rec, state_idx, stages=None):
        """Enqueue the step on the caller's stream; `conv_state` [S, 3P, W-1] bf16 and `rec`
        [S, H, D, D] f32 (contiguous) are updated in place. Returns the scratch dict, whose
        buffers named OUTPUTS hold the results. `stages` (names from STAGES): only those
        launches (the bench times each alone)."""
        kd = self.kd
        T, S = x.shape[0], conv_state.shape[0]
        if S * kd.H * kd.D * kd.D >= _INT31:
            raise ValueError(f"megakernel KDA: {S} state slots exceed its 32-bit state offsets")
        for t, dt in ((x, torch.bfloat16), (conv_state, torch.bfloat16), (rec, torch.float32)):
            assert t.dtype == dt and t.is_contiguous()
        s = self.scratch(T)
        s["sidx"].copy_(state_idx.to(torch.int32))
        f_a = s["z"][:, 4 * kd.P:]
        named = dict(s, **self._weights, x=x, f_a=f_a, conv_state=conv_state, rec=rec, T=T, S=S,
                     full_grid=1 << 30)
        st = stream()
        for name in STAGES:
            if stages is None or name in stages:
                v = cache.gemv_variant(name, T) if name in BIND else (
                    cache.kda_core_variant(T) if name == "kda_core" else {})
                cache.compiled(name, kd, **v)(named, st, BIND.get(name))
        return s
