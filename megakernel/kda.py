"""The KDA decode step (K3_SPEC 4) on the GPU: six launches on the caller's stream ("fused"), or
seven with the output gate's GEMV on a side stream beside the chain ("fork", below).

  fused: 0 kda_x  z = bf16(x [W_q | W_k | W_v | W_fa | W_b | W_g]^T), then 1-5
  fork: main stream                                                   side stream
  0 kda_in    z[:, :NM] = bf16(x [W_q | W_k | W_v | W_fa | W_b]^T)  Gemv    kda_g  z[:, G0:] =
  1 kda_fb    graw = bf16(f_a W_fb^T), f_a = z[:, FA0 : FA0 + D]    Gemv           bf16(x W_g^T)
  2 kda_conv  y = bf16(silu(short conv)) of q|k|v, the conv state shifted  k_kda_conv.py
  3 kda_core  norms, gates, the delta rule in place, the readout o     k_kda_core.py (rows split)
                                                   <-- join --
  4 kda_norm  normed = gated RMSNorm(o), the gate z[:, G0:]            k_kda_norm.py
  5 kda_out   out = bf16(normed W_o^T)                                 Gemv

kda_in and kda_g are the rows of kda_x (one weight tensor, three views) written into the columns
of one buffer z = [q | k | v | f_a | beta_raw | g] (dims.KdaDims; ldy): each row's dot is the
same in every launch, so the modes share their bits. The gate (176 MB at full dims) is read only
by the gated norm, so in "fork" it streams while f_b -> conv -> core wait on latencies
(`streams`, `fork` ("start" / "after_in"), `side_ctas_per_sm` as in mla.py; the default mode is
the one measured faster, `python -m megakernel.tools.tune_fork`).
The GEMVs are the MoE's (cache.gemv_variant: k_gemv_mma.py on the tensor cores, a fixed K
order whatever the batch); the other kernels work per token: the step is batch-invariant and
deterministic, as the backend declares. Null tokens (state_idx <= 0) get zero intermediates, so
o_proj gives them exact zeros; their projections are computed and never read. The states are
updated in place.
"""
import torch

from megakernel import cache, side_stream
from megakernel.launch_streams import FULL_GRID

CHAIN = ("kda_in", "kda_fb", "kda_conv", "kda_core", "kda_norm", "kda_out")
SIDE = ("kda_g",)
FUSED = "kda_x"                                # kda_in and kda_g in one launch
FORKS = {"start": None, "after_in": "kda_in"}  # where the side starts -> side_stream.plan
# prefetch stages (k_l2_prefetch.py) -> the weights they fetch into L2: f_b, o_proj
PREFETCH = {"kda_pf_fb": "w_fb", "kda_pf_o": "w_o"}
# none by default: written in a session with no GPU lent, not yet run; scripts/gpu_prefetch.sh
# times every spec side by side (tune_prefetch) and checks the bits, then a default can be chosen
PF_DEFAULT = {"fused": "off", "fork": "off"}
STAGES = (FUSED,) + CHAIN[:1] + SIDE + CHAIN[1:] + tuple(PREFETCH)   # every launch, any mode
# `python -m megakernel.tools.tune_fork` (H200, sixth session, full dims, one run; us at batch
# 1 / 8 / 64): fused 245.6 / 284.3 / 692.4; fork start, no cap 245.4 / 283.4 / 688.7; start, 2
# CTAs per SM 247.2 / 285.3 / 688.7; after_in/0 248.1 / 282.8 / 720.0. bench_kda, another run:
# fork 250.7 / 283.7 / 686.8 against fused 250.5 / 284.6 / 691.9. The fork gains nothing at
# batch 1 and 8: the chain it could hide (f_b, conv, core) is ~10 us in a trace, and the two
# GEMVs side by side end later (193.5 us) than one after the other (189.3), so the default is
# the fused launch (timeline, NOTES.md)
STREAMS, FORK, SIDE_CTAS_PER_SM = "fused", "start", 0
OUTPUTS = ("out", "conv_out", "decay", "beta", "core", "normed")
# stage -> {kernel argument: buffer} (the generic Gemv's arguments w, x, y)
BIND = {
    "kda_x": dict(w="w_x", x="x", y="z", ctas="full_grid"),
    "kda_in": dict(w="w_x", x="x", y="z", ctas="full_grid"),
    "kda_g": dict(w="w_g", x="x", y="gz", ctas="side_grid"),
    "kda_fb": dict(w="w_fb", x="f_a", y="graw", ctas="full_grid"),
    "kda_out": dict(w="w_o", x="normed", y="out", ctas="full_grid"),
}
_INT31 = 1 << 31


class KdaStep(side_stream.Modes):
    CHAIN, SIDE, FUSED, JOIN, FORKS = CHAIN, SIDE, FUSED, "kda_norm", FORKS
    STREAMS, FORK, SIDE_CTAS_PER_SM = STREAMS, FORK, SIDE_CTAS_PER_SM
    PREFETCH, PF_DEFAULT = PREFETCH, PF_DEFAULT

    def __init__(self, kd, weights: dict, device, streams=None, fork=None, side_ctas_per_sm=None,
                 prefetch=None):
        """streams, fork, side_ctas_per_sm, prefetch: as mla.MlaStep's (None: the module's
        defaults)."""
        self.kd, self.device = kd, device
        self._modes(device, streams, fork, side_ctas_per_sm, prefetch)
        w = {n: t.to(device) for n, t in weights.items()}
        bf = lambda t: t.to(torch.bfloat16).contiguous()          # noqa: E731
        f32 = lambda t: t.to(torch.float32).contiguous()          # noqa: E731
        # z's column order (dims.KdaDims); kda_in takes the first NM rows, kda_g the rest (views)
        w_x = bf(torch.cat([w[n + ".weight"] for n in ("q_proj", "k_proj", "v_proj", "f_a",
                                                       "b_proj", "g_proj")]))
        self._weights = dict(
            w_x=w_x, w_g=w_x[kd.G0:], w_fb=bf(w["f_b.weight"]), w_o=bf(w["o_proj.weight"]),
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
        named = dict(s, **self._weights, x=x, f_a=s["z"][:, kd.FA0:], gz=s["z"][:, kd.G0:],
                     conv_state=conv_state, rec=rec, T=T, S=S, full_grid=FULL_GRID,
                     side_grid=self.side_grid(FULL_GRID))

        def go(name, st):
            if stages is not None and name not in stages:
                return
            if name in PREFETCH:
                self.prefetch_launch(name, named, st, kd)
            else:
                v = cache.gemv_variant(name, T) if name in BIND else (
                    cache.kda_core_variant(T) if name == "kda_core" else {})
                cache.compiled(name, kd, **v)(named, st, BIND.get(name))

        self._streams.run(self.plan(), go, self.streams)
        return s
