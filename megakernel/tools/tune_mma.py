"""python -m megakernel.tools.tune_mma: the MXFP4 expert launches alone (full dims), the CUDA-core
path against variants of the tensor-core path (k_expert_mma.py), T = 1 and 8.

Every variant must give bitwise the same act, y and out as the default one (the per-(row, pair)
order is the same whatever U / WPC / MT / PF / S), and the CUDA-core path must agree to bf16
rounding. Writes $OUT/tune.txt, ending with the choice for k_expert_mma.UP / DOWN (a variant
that beats the default; each variant runs on its own config.Settings). Timing as
in bench.py: each launch alone, R times in one CUDA graph over rotating inputs, median of 5.
"""
from dataclasses import replace

import torch

from megakernel import k_expert_mma
from megakernel.tools.bench import draw_weights, out_log, time_events
from megakernel.dims import FULL
from megakernel.moe import LatentMoE

DEV = torch.device("cuda")
# first pair = the defaults (k_expert_mma.py); the others are compared with it bitwise
UPS = [dict(k_expert_mma.UP), dict(k_expert_mma.ALT_UP), dict(U=1, WPC=4, PF=128, S=4),
       dict(U=1, WPC=2, PF=128, S=4), dict(U=1, WPC=2, PF=256, S=3)]
DOWNS = [dict(k_expert_mma.DOWN), dict(k_expert_mma.ALT_DOWN), dict(U=1, WPC=4, MT=1, PF=128, S=3),
         dict(U=1, WPC=4, MT=2, PF=128, S=4), dict(U=1, WPC=2, MT=1, PF=128, S=6)]


def stage_us(moe, xs, stage, R=20):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for j in range(R):
            moe.launch(xs[j % len(xs)], stages={stage})
    g.replay()
    torch.cuda.synchronize()
    return time_events(g.replay) / R


def main():
    log = out_log("tune.txt")
    dm = FULL
    res = {}
    moe = LatentMoE(dm, draw_weights(dm, "mxfp4", seed=0), DEV)
    base = moe.settings
    torch.cuda.synchronize()
    for T in (1, 8):
        xs = [torch.randn(T, dm.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
        moe.settings = replace(base, moe=replace(base.moe, mx_mma=False))
        s = moe.launch(xs[0])
        torch.cuda.synchronize()
        out_cc = s["out"].clone()
        y_cc = s["y"].clone()
        nexp = int(s["nact"][0])
        mb = nexp * (2 * dm.I * dm.r) * (1 / 2 + 1 / 32) / 1e6, nexp * dm.r * dm.I * (17 / 32) / 1e6
        log(f"T={T}: {nexp} experts, up {mb[0]:.1f} MB, down {mb[1]:.1f} MB")
        log(f"  cuda-core path   up {stage_us(moe, xs, 3):7.1f} us  down {stage_us(moe, xs, 4):7.1f} us")
        ref = None
        for vi, (up, down) in enumerate(zip(UPS, DOWNS)):
            moe.settings = replace(base, moe=replace(base.moe, up=tuple(sorted(up.items())),
                                                     down=tuple(sorted(down.items()))))
            sc = moe.scratch(T)
            for n in ("act", "y", "out"):       # poison: a row left unwritten cannot match
                sc[n].fill_(float("nan"))
            s = moe.launch(xs[0])
            torch.cuda.synchronize()
            act, y, out = s["act"].clone(), s["y"].clone(), s["out"].clone()
            if ref is None:
                ref = (act, y, out)
                rel = ((out.float() - out_cc.float()).norm() / out_cc.float().norm()).item()
                rely = ((y.float() - y_cc.float()).norm() / y_cc.float().norm()).item()
                log(f"  mma vs cuda-core: out rel-L2 {rel:.2e}, y rel-L2 {rely:.2e}, "
                    f"finite {bool(torch.isfinite(out.float()).all())}")
            same_up = torch.equal(act, ref[0])
            same = same_up and torch.equal(y, ref[1]) and torch.equal(out, ref[2])
            tu, td = stage_us(moe, xs, 3), stage_us(moe, xs, 4)
            log(f"  mma up {up} {tu:7.1f} us ({mb[0] / tu:.2f} TB/s) | down {down} {td:7.1f} us "
                f"({mb[1] / td:.2f} TB/s) | bitwise same as first: act {same_up}, y+out {same}")
            res.setdefault(vi, []).append(((same_up, same), tu, td))
        moe.settings = base
    # choice: the fastest at T=1 among the variants bitwise equal to the default at both T whose
    # T=8 time is within 5% of the default's
    for name, lst, col in (("k_expert_mma.UP", UPS, 1), ("k_expert_mma.DOWN", DOWNS, 2)):
        best = 0
        for vi in range(1, len(lst)):
            r, r0, rb = res[vi], res[0], res[best]
            if (all(x[0][col - 1] for x in r) and r[1][col] <= 1.05 * r0[1][col]
                    and r[0][col] < rb[0][col]):
                best = vi
        log(f"choice {name}: {lst[best]} (T=1 {res[best][0][col]:.1f} us, "
            f"T=8 {res[best][1][col]:.1f} us; default {res[0][0][col]:.1f} / {res[0][1][col]:.1f})")


if __name__ == "__main__":
    main()
