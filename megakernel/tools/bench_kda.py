"""python -m megakernel.tools.bench_kda: the KDA step (kda.py) against the copy roofline.

Method as bench.py's: R steps captured in one CUDA graph, replays timed with events, median of 5;
states in fresh slots per step so no state is read from L2 warm. Roofline = the bytes the step
must move (the weights once: the fused in-projection, f_b and o_proj; each live token's D x D
f32 state per head and its conv history, read and written) / the device-copy bandwidth measured
in the same run; "roof2" is the two-limit floor (tools/roofline.py), measured in the same run.
Then each launch alone, the same way (over the scratch the full steps left), the step at batch
> 8 with its tensor-core GEMVs on mma.sync instead of wgmma ("GEMVs on mma.sync": config.Gemv.wgmma,
the same bits), and the step in the other stream mode (kda.py: "fused" or "fork"); and, when fla-core is installed, FLA's fused recurrent KDA (`fused_recurrent_kda_fwd`, in-place on
the slots, q/k L2 norms and the beta sigmoid in the kernel) on the same shapes: the core people
run today. It does a little less than kda_core (no decay gate: FLA computes it in a kernel of
its own); "x fla" is FLA's time over kda_core's. Against k3diff's torch-blocked step (megakernel/
imports neither k3diff nor reference): `python -m k3diff.tools.step_time --stage kda`.
"""
import argparse
import sys

import torch

from megakernel.config import KDA_GEMVS
from megakernel.dims import KDA_FULL, KDA_SMALL
from megakernel.kda import KdaStep
from megakernel.side_stream import other_mode
from megakernel.tools import roofline
from megakernel.tools.bench import (no_gpu, copy_bw, other_gemv_kernel, other_large_gemv,
                                    time_events)

DEV = torch.device("cuda")


def draw_weights(kd, seed=1):
    g = torch.Generator(DEV).manual_seed(seed)
    rn = lambda *s, fan: (torch.randn(*s, generator=g, device=DEV) / fan ** 0.5).to(torch.bfloat16)  # noqa: E731
    P, D, H, d = kd.P, kd.D, kd.H, kd.d
    w = {n: rn(P, d, fan=d) for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight")}
    w.update({"f_a.weight": rn(D, d, fan=d), "f_b.weight": rn(P, D, fan=D), "b_proj.weight": rn(H, d, fan=d),
              "o_proj.weight": rn(d, P, fan=P), "o_norm.weight": torch.ones(D, device=DEV).to(torch.bfloat16),
              "conv.weight": 0.5 * torch.randn(3 * P, kd.W, generator=g, device=DEV),
              "A_log": 0.5 * torch.randn(H, generator=g, device=DEV),
              "dt_bias": 0.3 * torch.randn(P, generator=g, device=DEV)})
    return w


def step_inputs(kd, T, R):
    """x [T, d] and the states of R steps in fresh slots (slot 0 unused): conv, rec, and idx[r],
    the T slots of step r."""
    S = R * T + 1
    conv = torch.randn(S, 3 * kd.P, kd.W - 1, device=DEV).to(torch.bfloat16)
    rec = torch.randn(S, kd.H, kd.D, kd.D, device=DEV) * 0.1
    x = torch.randn(T, kd.d, device=DEV).to(torch.bfloat16)
    idx = [torch.arange(1 + r * T, 1 + (r + 1) * T, device=DEV) for r in range(R)]
    return x, conv, rec, idx


def captured(fn, R):
    """fn(i) for i < R run once, then captured in one CUDA graph and replayed once: the graph."""
    for i in range(R):
        fn(i)                                # compile, autotune, allocate outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(R):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_us(fn, R):
    """Microseconds per call: fn(i) for i < R captured in one CUDA graph, the replay timed."""
    g = captured(fn, R)
    us = time_events(g.replay) / R
    del g
    return us


def fla_core_us(kd, T, R):
    """FLA's fused recurrent KDA over R steps of T tokens in fresh slots; None without fla-core."""
    try:
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    except Exception:  # noqa: BLE001 - optional
        return None
    H, D = kd.H, kd.D
    bf = torch.bfloat16
    q = torch.randn(T, 1, H, D, device=DEV).to(bf)
    k = torch.randn(T, 1, H, D, device=DEV).to(bf)
    v = torch.randn(T, 1, H, D, device=DEV)
    g = -torch.nn.functional.softplus(torch.randn(T, 1, H, D, device=DEV))     # log-space decay
    b = torch.randn(T, 1, H, device=DEV).to(bf)
    rec = torch.randn(R * T + 1, H, D, D, device=DEV) * 0.1
    idx = [torch.arange(1 + r * T, 1 + (r + 1) * T, device=DEV, dtype=torch.int32) for r in range(R)]
    return graph_us(lambda i: fused_recurrent_kda_fwd(
        q=q, k=k, v=v, g=g, beta=b, initial_state=rec, inplace_final_state=True, state_v_first=True,
        ssm_state_indices=idx[i], scale=D ** -0.5, use_qk_l2norm_in_kernel=True,
        use_beta_sigmoid_in_kernel=True), R)


def weight_elements(kd):
    """The step's weights, each once: the fused in-projection, f_b, o_proj."""
    return kd.N * kd.d + kd.P * kd.D + kd.d * kd.P


def step_bytes(kd, T):
    """The bytes the step must move: the weights once (the fused in-projection, f_b, o_proj), each
    token's D x D f32 state per head and its conv history, read and written."""
    states = T * (2 * kd.H * kd.D * kd.D * 4 + 2 * 3 * kd.P * (kd.W - 1) * 2)
    return 2 * weight_elements(kd) + states


def step_flops(kd, T):
    """Every GEMV for each token (2 flops per weight element), and the delta rule per token and
    head on its D x D state: decay, S k, the rank-1 update and S q, ~8 D^2."""
    return 2 * T * weight_elements(kd) + 8 * T * kd.H * kd.D ** 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.bench_kda", description=__doc__.splitlines()[0])
    p.add_argument("--dims", default="full,small")
    p.add_argument("--batches", default="1,8,64")
    a = p.parse_args(argv)
    if no_gpu("bench_kda"):
        return 2
    bw = copy_bw()
    machine = roofline.measure(DEV)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; {machine.line()}")
    print(f"{'dims':6} {'T':>4} {'us':>9} {'MB moved':>9} {'roofline':>9} {'roof2':>8}  each launch alone (us)")
    for dn in a.dims.split(","):
        kd = {"full": KDA_FULL, "small": KDA_SMALL}[dn]
        w = draw_weights(kd)
        step = KdaStep(kd, w, DEV)
        for T in (int(b) for b in a.batches.split(",")):
            R = 8
            x, conv, rec, idx = step_inputs(kd, T, R)     # fresh slots for each captured step
            us = {only: graph_us(lambda i, only=only: step.launch(x, conv, rec, idx[i], stages=only), R)
                  for only in (None,) + tuple((n,) for n in step.launches())}
            # the same step with KDA's GEMVs all on the other kernel (the CUDA-core k_gemv.py when
            # the tensor-core k_gemv_mma.py is the default, config.Gemv.mma), in the same run
            mma_now = any(g in step.settings.gemv.mma for g in KDA_GEMVS)
            with other_gemv_kernel([step], KDA_GEMVS):
                alt = graph_us(lambda i: step.launch(x, conv, rec, idx[i]), R)
            # and with the GEMVs at batch > 8 on mma.sync (config.Gemv.wgmma; the same bits)
            wg = None
            if T > 8:
                with other_large_gemv([step]):
                    wg = graph_us(lambda i: step.launch(x, conv, rec, idx[i]), R)
            # and in the other stream mode (fused x-side GEMV / the gate beside the chain)
            with other_mode(step) as other:
                one = graph_us(lambda i: step.launch(x, conv, rec, idx[i]), R)
            mb = step_bytes(kd, T)
            alone = " ".join(f"{n}={us[(n,)]:.1f}" for n in step.launches())
            alone += f"  step with the GEMVs all on the {'CUDA' if mma_now else 'tensor'} cores {alt:.1f}"
            if wg is not None:
                alone += f"  GEMVs on mma.sync {wg:.1f} (x{wg / us[None]:.2f})"
            alone += f"  {other} {one:.1f} (x{one / us[None]:.2f})"
            fla = fla_core_us(kd, T, R)
            vs = "" if fla is None else f"  fla core {fla:.1f} (x fla {fla / us[('kda_core',)]:.2f})"
            two = roofline.share(machine, us[None], mb, step_flops(kd, T))
            print(f"{dn:6} {T:>4} {us[None]:9.1f} {mb / 1e6:9.1f} {mb / (us[None] * 1e-6) / bw:8.1%} "
                  f"{two}  {alone}{vs}", flush=True)
            conv = rec = None          # freed before the next batch's states (a name, not del: the lambdas)
        step = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
