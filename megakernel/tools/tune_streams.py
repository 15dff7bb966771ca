"""python -m megakernel.tools.tune_streams: how the shared experts' side stream should run beside
the routed chain (moe.py: fork, gate, side_ctas_per_sm, and the side GEMVs' unroll), measured at
full dims, bf16 and MXFP4 experts, T = 1 and 8.

Every mode must give bitwise the output of the one-stream order (checked here on each input
before timing). Timing as in bench.py: R steps in one CUDA graph over rotating inputs, median
of 5. With --out DIR, also DIR/streams.txt.
"""
import argparse
import copy

import torch

from dataclasses import replace
from megakernel.tools.bench import DEV, draw_weights, graph_us, out_log
from megakernel.dims import FULL
from megakernel.moe import LatentMoE

# (label, LatentMoE attributes, unroll of the side GEMVs, unroll of the main GEMVs)
MODES = [("serial", dict(streams="serial"), 4, 4)]
MODES += [(f"{f}/{g}/0", dict(fork=f, gate=g, side_ctas_per_sm=0), 4, 4)
          for f, g in (("start", "none"), ("after_x", "none"), ("after_route", "none"),
                       ("after_schedule", "none"), ("after_route", "down"),
                       ("after_schedule", "down"), ("start", "down"))]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_streams")
    ap.add_argument("--modes", default=",".join(m[0] for m in MODES))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--out", help="a folder: the table also goes to OUT/streams.txt as it comes")
    a = ap.parse_args(argv)
    modes = [m for m in MODES if m[0] in a.modes.split(",")]
    log = out_log("streams.txt", a.out)
    dm = FULL
    log("fork/gate/side CTAs per SM (0 = no cap), U: GEMV unroll; us per step")
    log(f"{'format':6s} {'T':>3s} " + " ".join(f"{m[0]:>22s}" for m in modes))
    for fmt in ("mxfp4", "bf16"):
        moe = LatentMoE(dm, draw_weights(dm, fmt, seed=0), DEV)
        base = moe.settings
        ref = copy.copy(moe)                        # the same weights, on one stream
        ref.streams, ref._scratch = "serial", {}
        for T in (int(b) for b in a.batches.split(",")):
            xs = [torch.randn(T, dm.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
            cells = []
            for label, attrs, u_side, u_main in modes:
                # the unrolls on this tuner's own settings object (every value: the same bits)
                unroll = (("gemv_shared", u_side), ("out_shared", u_side), ("gemv_x", u_main),
                          ("out_routed", u_main))
                moe.settings = replace(base, gemv=replace(base.gemv, unroll=unroll))
                moe.streams = "fork"
                for k, v in attrs.items():
                    setattr(moe, k, v)
                for x in xs[:2]:
                    got = moe.launch(x)["out"].clone()
                    assert torch.equal(got, ref.launch(x)["out"]), f"{fmt} T={T} {label} differs"
                cells.append(graph_us([moe], xs, 20 if T == 1 else 8))
            log(f"{fmt:6s} {T:3d} " + " ".join(f"{c:22.1f}" for c in cells))
        del moe, ref
        torch.cuda.empty_cache()

if __name__ == "__main__":
    main()
