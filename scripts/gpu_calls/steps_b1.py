"""Call 46: the MLA and KDA steps at batch 1 and 8 with the batch <= 8 GEMV variants
(gemv._X_PIPED, _OUT_PIPED; 560fbf4) against those before it (80a950d), side by side in one process, each stream
mode; and the bits of both (the variants differ in unroll, row tiles and double buffering only,
so every output must be equal). Prints one row per (step, mode, batch): µs before, after, ratio.
Run from the project root: PYTHONPATH=$PWD python3 scripts/gpu_calls/steps_b1.py"""
import contextlib
import sys

import torch

from megakernel import gemv
from megakernel.tools import bench_kda, bench_mla
from megakernel.tools.bench_kda import graph_us

# the T <= 8 variants the table had before (80a950d)
BEFORE = {"kda_in": gemv._X_SIDE[0], "mla_a": gemv._X_SIDE[0],
          "kda_out": dict(gemv._SMALL_T, KS=4, U=2, RT=2),
          "mla_out": dict(gemv._SMALL_T, KS=4, U=2, RT=1)}


@contextlib.contextmanager
def before():
    now = {n: gemv.MMA_GEMV[n] for n in BEFORE}
    try:
        for n, v in BEFORE.items():
            gemv.MMA_GEMV[n] = (v, now[n][1])
        yield
    finally:
        gemv.MMA_GEMV.update(now)


def main():
    from megakernel.dims import KDA_FULL as kd, MLA_FULL as md
    from megakernel.kda import OUTPUTS as KO, KdaStep
    from megakernel.mla import OUTPUTS as MO, MlaStep
    ok = True
    print(f"{'step':4} {'mode':6} {'T':>3} {'L':>6} {'before us':>10} {'after us':>9} {'after/before':>13}  bits")
    mla = MlaStep(md, bench_mla.draw_weights(md), bench_mla.DEV)
    kda = KdaStep(kd, bench_kda.draw_weights(kd), bench_kda.DEV)
    for T in (1, 8):
        R = 8
        for L in (1024, 32768):
            x, cache, ln = bench_mla.step_inputs(md, T, L, R)
            for mode in ("fork", "fused"):
                mla.streams = mode
                run = lambda i: mla.launch(x, cache, ln[i], max_len=L + R)  # noqa: E731
                b = graph_us(run, R)
                s = run(0)
                bits = [s[n].clone() for n in MO.values()]
                with before():
                    a0 = graph_us(run, R)
                    s = run(0)
                    same = all(torch.equal(u, s[n]) for u, n in zip(bits, MO.values()))
                ok &= same
                print(f"mla  {mode:6} {T:>3} {L:>6} {a0:10.1f} {b:9.1f} {b / a0:13.3f}  {same}", flush=True)
            cache = None
        x, conv, rec, idx = bench_kda.step_inputs(kd, T, R)
        conv0, rec0 = conv.clone(), rec.clone()

        def fresh(i):                # step i over the states as drawn (the bits compared)
            conv.copy_(conv0)
            rec.copy_(rec0)
            return kda.launch(x, conv, rec, idx[i])
        for mode in ("fused", "fork"):
            kda.streams = mode
            run = lambda i: kda.launch(x, conv, rec, idx[i])  # noqa: E731
            b = graph_us(run, R)
            s = fresh(0)
            bits = [s[n].clone() for n in KO] + [conv.clone(), rec.clone()]
            with before():
                a0 = graph_us(run, R)
                s = fresh(0)
                bits2 = [s[n] for n in KO] + [conv, rec]
                same = all(torch.equal(u, v) for u, v in zip(bits, bits2))
            ok &= same
            print(f"kda  {mode:6} {T:>3} {'':>6} {a0:10.1f} {b:9.1f} {b / a0:13.3f}  {same}", flush=True)
    print("bits equal before and after:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
