"""python -m megakernel.tools.timeline: when each launch of one step runs, from a CUPTI trace of
CUDA graph replays (full dims). --step moe (--fmt, --T, --modes: the MoE's stream settings,
moe.LatentMoE) or mla / kda (--T, --len for MLA's cache, --modes: fused, or fork point/side CTAs
per SM, mla.MlaStep / kda.KdaStep). Prints, for one step in the middle of the replays, every kernel's
start, end and duration relative to the step's first kernel, and writes
--out DIR: also DIR/timeline_<step>_T<T>.txt.
"""
import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from megakernel.tools.bench import no_gpu, DEV, draw_weights, out_log
from megakernel.dims import FULL

R = 6


def moe_runner(a):
    from megakernel.moe import STAGES, LatentMoE
    moe = LatentMoE(FULL, draw_weights(FULL, a.fmt, seed=0), DEV)
    xs = [torch.randn(a.T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(R)]

    def setting(mode):
        """-> kernels per step"""
        if mode == "serial":
            moe.streams = "serial"
        else:
            f, g, c = mode.split("/")
            moe.streams, moe.fork, moe.gate, moe.side_ctas_per_sm = "fork", f, g, int(c)
        return len(STAGES)
    return setting, (lambda i: moe.launch(xs[i]))


def attn_runner(a):
    """The MLA or KDA step's setting switch (-> its launches per step) and its i-th step (fresh
    cache rows / state slots per step, as bench_mla / bench_kda)."""
    if a.step == "mla":
        from megakernel.dims import MLA_FULL as md
        from megakernel.mla import MlaStep
        from megakernel.tools.bench_mla import draw_weights as dw, step_inputs
        step = MlaStep(md, dw(md), DEV)
        x, cache, ln = step_inputs(md, a.T, a.len, R)
        run = lambda i: step.launch(x, cache, ln[i], max_len=a.len + R)  # noqa: E731
    else:
        from megakernel.dims import KDA_FULL as kd
        from megakernel.kda import KdaStep
        from megakernel.tools.bench_kda import draw_weights as dw, step_inputs
        step = KdaStep(kd, dw(kd), DEV)
        x, conv, rec, idx = step_inputs(kd, a.T, R)
        run = lambda i: step.launch(x, conv, rec, idx[i])  # noqa: E731

    def setting(mode):
        if mode == "fused":
            step.streams = "fused"
        else:
            f, c = mode.split("/")
            step.streams, step.fork, step.side_ctas_per_sm = "fork", f, int(c)
        return len(step.launches())
    return setting, run


def mode_ok(step, mode):
    """Whether --modes names a setting of the step (checked before any weight is drawn)."""
    if mode == ("serial" if step == "moe" else "fused"):
        return True
    if step == "moe":
        from megakernel.launch_streams import FORKS, GATES
        parts, forks, n = mode.split("/"), FORKS, 3
    else:
        import importlib
        forks = importlib.import_module(f"megakernel.{step}").STEPS.forks
        parts, n = mode.split("/"), 2
    return (len(parts) == n and parts[0] in forks and parts[-1].isdigit()
            and (n == 2 or parts[1] in GATES))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.timeline")
    ap.add_argument("--step", default="moe", choices=("moe", "mla", "kda"))
    ap.add_argument("--fmt", default="mxfp4", help="moe: the experts' format")
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--len", type=int, default=1024, help="mla: the cache length")
    ap.add_argument("--modes", default="",
                    help="comma-separated: moe fork/gate/side CTAs per SM (default start/none/0), "
                         "or serial; mla / kda fork point/side CTAs per SM (default start/0), "
                         "or fused")
    ap.add_argument("--out", help="a folder: the trace also goes to OUT/timeline_STEP_TT.txt")
    a = ap.parse_args(argv)
    modes = a.modes or ("start/none/0" if a.step == "moe" else "start/0")
    bad = [m for m in modes.split(",") if not mode_ok(a.step, m)]
    if bad:
        print(f"timeline: --modes {bad[0]!r}: for moe serial or fork/gate/CTAs (e.g. start/none/0), "
              f"for mla / kda fused or fork/CTAs (e.g. start/2)", file=sys.stderr)
        return 2
    if no_gpu("timeline"):
        return 2
    setting, run = moe_runner(a) if a.step == "moe" else attn_runner(a)
    label = f"{a.fmt}, T={a.T}" if a.step == "moe" else f"{a.step}, T={a.T}"
    log = out_log(f"timeline_{a.step if a.step != 'moe' else a.fmt}_T{a.T}.txt", a.out)
    for mode in modes.split(","):
        n = setting(mode)
        for line in [f"== {mode}"] + trace(run, n, label):
            log(line)
    return 0


def trace(run, n, label):
    """run(i) for i < R captured in one CUDA graph; one replay traced; n kernels per step."""
    from megakernel.tools.bench_kda import captured
    g = captured(run, R)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    ev = [e for e in prof.events()
          if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower()
          and "memset" not in e.name.lower() and "elementwise" not in e.name.lower()]
    ev.sort(key=lambda e: e.time_range.start)
    lines = [f"{len(ev)} kernels in {R} steps ({label}); step {R // 2} shown"]
    if len(ev) != n * R:
        lines.append("unexpected kernel count; names: "
                     + ", ".join(sorted({e.name[:60] for e in ev})))
    step = ev[(R // 2) * n:(R // 2 + 1) * n]
    t0 = step[0].time_range.start
    prev_end = ev[(R // 2) * n - 1].time_range.end if R > 1 else t0
    lines.append(f"gap from the previous step's last kernel end: {t0 - prev_end:.1f} us")
    lines.append(f"{'kernel':40s} {'start':>7s} {'end':>7s} {'us':>7s}")
    for e in step:
        s, t = e.time_range.start - t0, e.time_range.end - t0
        nm = e.name.replace("kernel_cutlass_kernel_megakernel", "")[:40]
        lines.append(f"{nm:40s} {s:7.1f} {t:7.1f} {t - s:7.1f}")
    lines.append(f"step span {max(e.time_range.end for e in step) - t0:.1f} us")
    return lines


if __name__ == "__main__":
    sys.exit(main())
