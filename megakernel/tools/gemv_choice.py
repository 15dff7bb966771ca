"""python -m megakernel.tools.gemv_choice: which GEMVs should run on the tensor cores.

A GEMV keeps one kernel for every batch (gemv.py: the two kernels round differently, so a choice
per batch size would break batch invariance). The tensor-core kernel (k_gemv_mma.py) streams each
weight row once per 64 tokens, the CUDA-core one (k_gemv.py) once per 8 and is finer-grained at
batch 1. So the choice trades batch 1 against batch > 1, per GEMV, and is measured on whole
steps: for every subset of the MoE's four GEMVs (fork-join, and with --persistent the one
launch too; full dims, each format) and of KDA's three, the step at each batch, R steps in one CUDA graph, median of 5 replays (bench.py's
method), all in one run. Prints, per step, the time of every subset relative to all-CUDA-core,
and the subset with the best geometric mean over the batches (also among the subsets no more
than --t1-slack slower at batch 1).
"""
import argparse
import itertools
import math
import sys

from dataclasses import replace

import torch

from megakernel.tools.bench import no_gpu

from megakernel.config import KDA_GEMVS, Gemv
from megakernel.dims import FULL, KDA_FULL
from megakernel.kda import KdaStep
from megakernel.moe import LatentMoE
from megakernel.tools import bench, bench_kda

DEV = torch.device("cuda")
MOE_GEMVS = ("gemv_x", "gemv_shared", "out_shared", "out_routed")


def subsets(names):
    return [c for n in range(len(names) + 1) for c in itertools.combinations(names, n)]


def moe_times(fmt, batches, R, mode="fork"):
    """Step us per (subset, T); mode: the launch mode (moe.MODES: fork, serial, persistent)."""
    mod = LatentMoE(FULL, bench.draw_weights(FULL, fmt, seed=0), DEV, streams=mode)
    out = {}
    for T in batches:
        xs = [torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
        for s in subsets(MOE_GEMVS):
            mod.settings = replace(mod.settings, gemv=Gemv(mma=s))
            out[s, T] = bench.graph_us([mod], xs, R)
        if mode == "persistent":
            mod.check_persistent()
    del mod
    torch.cuda.empty_cache()
    return out


def kda_times(batches, R):
    """-> (the GEMVs the step launches in its default stream mode, {(subset, T): us})"""
    kd = KDA_FULL
    step = KdaStep(kd, bench_kda.draw_weights(kd), DEV)
    names = tuple(g for g in KDA_GEMVS if g in step.launches())
    out = {}
    for T in batches:
        x, conv, rec, idx = bench_kda.step_inputs(kd, T, R)
        for s in subsets(names):
            step.settings = replace(step.settings, gemv=Gemv(mma=s))
            out[s, T] = bench_kda.graph_us(lambda i: step.launch(x, conv, rec, idx[i]), R)
        conv = rec = None              # freed before the next batch (a name, not del: the lambdas)
    return names, out


def report(title, names, times, batches, slack):
    base = {T: times[(), T] for T in batches}
    print(f"\n{title}: step us (x all-CUDA-core)")
    print("| on the tensor cores | " + " | ".join(f"T={T}" for T in batches) + " | geo-mean speed-up |")
    print("|---" * (len(batches) + 2) + "|")
    gm = {}
    for s in subsets(names):
        gm[s] = math.exp(sum(math.log(base[T] / times[s, T]) for T in batches) / len(batches))
        cells = " | ".join(f"{times[s, T]:.1f} ({base[T] / times[s, T]:.2f})" for T in batches)
        print(f"| {', '.join(s) or '(none)'} | {cells} | {gm[s]:.3f} |")
    best = max(gm, key=gm.get)
    t1 = min(batches)
    ok = [s for s in gm if times[s, t1] <= base[t1] * (1 + slack)]
    best1 = max(ok, key=gm.get)
    print(f"best geo-mean: {', '.join(best) or '(none)'}; best within {slack:.0%} of all-CUDA-core "
          f"at T={t1}: {', '.join(best1) or '(none)'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.gemv_choice",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="moe,kda", help="moe, kda or both")
    ap.add_argument("--formats", default="bf16,mxfp4")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--R", type=int, default=8)
    ap.add_argument("--t1-slack", type=float, default=0.02)
    ap.add_argument("--persistent", action="store_true",
                    help="the MoE also as one persistent launch (k_persistent.py)")
    a = ap.parse_args(argv)
    if no_gpu("gemv_choice"):
        return 2
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        print("gemv_choice: --batches takes comma-separated integers", file=sys.stderr)
        return 2
    steps = a.steps.split(",")
    if not set(steps) <= {"moe", "kda"} or not set(a.formats.split(",")) <= {"bf16", "mxfp4"}:
        print("gemv_choice: --steps among moe,kda; --formats among bf16,mxfp4", file=sys.stderr)
        return 2
    if "moe" in steps:
        for fmt in a.formats.split(","):
            for mode in ("fork", "persistent") if a.persistent else ("fork",):
                name = "fork-join" if mode == "fork" else "one launch"
                report(f"MoE {fmt}, {name}, full dims", MOE_GEMVS,
                       moe_times(fmt, batches, a.R, mode), batches, a.t1_slack)
    if "kda" in steps:
        report("KDA, full dims", *kda_times(batches, a.R), batches, a.t1_slack)
    return 0


if __name__ == "__main__":
    sys.exit(main())
