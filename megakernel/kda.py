"""The KDA decode step (docs/k3-decode.md §4) on the GPU: six launches on the caller's stream ("fused"), or
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
The GEMVs are the MoE's (gemv.variant: k_gemv_mma.py on the tensor cores, a fixed K
order whatever the batch); the other kernels work per token: the step is batch-invariant and
deterministic, as the backend declares. Null tokens (state_idx <= 0) get zero intermediates, so
o_proj gives them exact zeros; their projections are computed and never read. The states are
updated in place.
"""
import torch

from megakernel import gemv, k_kda_core, side_stream

STEPS = side_stream.Stages(
    chain=("kda_in", "kda_fb", "kda_conv", "kda_core", "kda_norm", "kda_out"),
    side=("kda_g",), fused="kda_x", join="kda_norm",      # kda_x: kda_in and kda_g in one launch
    forks={"start": None, "after_in": "kda_in"},
    bind={   # a GEMV stage -> {kernel argument: buffer} (the generic GEMV's w, x, y, ctas)
        "kda_x": dict(w="w_x", x="x", y="z", ctas="full_grid"),
        "kda_in": dict(w="w_x", x="x", y="z", ctas="full_grid"),
        "kda_g": dict(w="w_g", x="x", y="gz", ctas="side_grid"),
        "kda_fb": dict(w="w_fb", x="f_a", y="graw", ctas="full_grid"),
        "kda_out": dict(w="w_o", x="normed", y="out", ctas="full_grid"),
    },
    variant={"kda_core": k_kda_core.variant},
    # the default, measured (`python -m megakernel.tools.tune_fork`, bench_kda, H200;
    # lab/kda/): the fork gains nothing at batch 1 and 8 (the chain it could hide is
    # ~10 us, and the two GEMVs side by side end later than one after the other): fused
    streams="fused", fork="start", side_ctas_per_sm=0)
OUTPUTS = ("out", "conv_out", "decay", "beta", "core", "normed")
# The launches by what they depend on (verify.py runs a verify step this way): per token, on the
# step's T rows, the projections; per sequence, on its slot, the conv and the core (they advance
# the states); per token again, the gated norm and the output GEMV. The state launches read and
# write these token rows (k_kda_conv.py, k_kda_core.py ARGS; tests/megakernel/test_mk_verify.py).
TOKEN_STAGES = ("kda_x", "kda_in", "kda_g", "kda_fb")
STATE_STAGES = ("kda_conv", "kda_core")
OUT_STAGES = ("kda_norm", "kda_out")
STATE_READS = ("z", "graw")
STATE_WRITES = ("conv_out", "decay", "beta", "core")
_INT31 = 1 << 31


class KdaStep(side_stream.Modes):
    STEPS = STEPS

    def __init__(self, kd, weights: dict, device, streams=None, fork=None, side_ctas_per_sm=None,
                 settings=None):
        """streams, fork, side_ctas_per_sm, settings: as mla.MlaStep's (None: the module's
        defaults)."""
        self.kd, self.device = kd, device
        self._modes(device, settings, streams, fork, side_ctas_per_sm)
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
        buffers named OUTPUTS hold the results. `stages` (names from STEPS.stages): only those
        launches (the bench times each alone)."""
        kd = self.kd
        T, S = x.shape[0], conv_state.shape[0]
        if S * kd.H * kd.D * kd.D >= _INT31:
            raise ValueError(f"megakernel KDA: {S} state slots exceed its 32-bit state offsets")
        for t, dt in ((x, torch.bfloat16), (conv_state, torch.bfloat16), (rec, torch.float32)):
            assert t.dtype == dt and t.is_contiguous()
        s = self.scratch(T)
        s["sidx"].copy_(state_idx)            # converted in one kernel, no temporary
        named = dict(s, **self._weights, x=x, f_a=s["z"][:, kd.FA0:], gz=s["z"][:, kd.G0:],
                     conv_state=conv_state, rec=rec, T=T, S=S, full_grid=gemv.FULL_GRID,
                     side_grid=self.side_grid(gemv.FULL_GRID))

        self.run(named, T, kd, stages)
        return s
