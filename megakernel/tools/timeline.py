"""python -m megakernel.tools.timeline: when each launch of one step runs, from a CUPTI trace of
CUDA graph replays (full dims; --fmt, --T, --modes for the stream settings). Prints, for one step
in the middle of the replays, every kernel's start, end and duration relative to the step's first
kernel, and writes $OUT/timeline_<fmt>_T<T>.txt.
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from megakernel.tools.bench import DEV, draw_weights, out_log
from megakernel.dims import FULL
from megakernel.moe import STAGES, LatentMoE

R = 6


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.timeline")
    ap.add_argument("--fmt", default="mxfp4")
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--modes", default="start/none/0",
                    help="comma-separated fork/gate/side CTAs per SM (moe.LatentMoE), or serial")
    a = ap.parse_args(argv)
    moe = LatentMoE(FULL, draw_weights(FULL, a.fmt, seed=0), DEV)
    log = out_log(f"timeline_{a.fmt}_T{a.T}.txt")
    for mode in a.modes.split(","):
        if mode == "serial":
            moe.streams = "serial"
        else:
            f, g, c = mode.split("/")
            moe.streams, moe.fork, moe.gate, moe.side_ctas_per_sm = "fork", f, g, int(c)
        for line in [f"== {mode}"] + trace(moe, a):
            log(line)


def trace(moe, a):
    xs = [torch.randn(a.T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(R)]
    for x in xs:
        moe.launch(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for x in xs:
            moe.launch(x)
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    ev = [e for e in prof.events()
          if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower()]
    ev.sort(key=lambda e: e.time_range.start)
    n = len(STAGES)
    lines = [f"{len(ev)} kernels in {R} steps ({a.fmt}, T={a.T}); step {R // 2} shown"]
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
    main()
