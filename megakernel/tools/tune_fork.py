"""python -m megakernel.tools.tune_fork: the MLA and KDA steps' side stream, every setting side by side.

Settings: "fused" (the x-side projection, gate included, as one GEMV, then the chain, all on
the caller's stream), or "fork": the output gate's GEMV (mla_g / kda_g) on a side stream beside
the chain of latency-bound launches (megakernel/side_stream.py), forked at the start (beside the
first GEMV) or after it, each with the side's grid capped at C CTAs per SM (0 = no cap). Method as bench_mla.py's: R steps in one CUDA
graph, the replay timed with events, median of 5, full dims; MLA with every sequence at the given
cache length. Every setting's outputs, cache and states are compared bitwise with fused's
(the "bits" column: y = equal). Prints us per step and each setting's speed-up over fused.
"""
import argparse
import sys

import torch

from megakernel.tools.bench import no_gpu, attn_step_args, attn_step_values

DEV = torch.device("cuda")


def settings(caps, forks):
    out = [("fused", "start", 0)]
    for f in forks:
        for c in caps:
            out.append(("fork", f, c))
    return out


def _mla(batches, L, sets, R):
    from megakernel.dims import MLA_FULL as md
    from megakernel.mla import OUTPUTS, STEPS, MlaStep
    from megakernel.tools.bench_kda import graph_us
    from megakernel.tools.bench_mla import draw_weights, step_inputs
    step = MlaStep(md, draw_weights(md), DEV)
    for T in batches:
        x, cache, ln = step_inputs(md, T, L, R)

        def bits():
            kv = cache.clone()
            s = step.launch(x, kv, ln[0], max_len=L + R)
            return [s[n].clone() for n in OUTPUTS.values()] + [kv]

        yield T, _row(step, sets, STEPS.forks, bits,
                      lambda: graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R))


def _kda(batches, sets, R):
    from megakernel.dims import KDA_FULL as kd
    from megakernel.kda import OUTPUTS, STEPS, KdaStep
    from megakernel.tools.bench_kda import draw_weights, graph_us, step_inputs
    step = KdaStep(kd, draw_weights(kd), DEV)
    for T in batches:
        x, conv, rec, idx = step_inputs(kd, T, R)

        def bits():
            c, r = conv.clone(), rec.clone()
            s = step.launch(x, c, r, idx[0])
            return [s[n].clone() for n in OUTPUTS] + [c, r]

        yield T, _row(step, sets, STEPS.forks, bits,
                      lambda: graph_us(lambda i: step.launch(x, conv, rec, idx[i]), R))


def _row(step, sets, forks, bits, timed):
    """[(setting, us, bits equal to fused's)] for one batch. Every setting's bits are taken
    before any is timed: the timed replays update the caches and states in place."""
    conf = []
    for streams, fork, cap in sets:
        fork = fork if fork in forks else [k for k in forks if k != "start"][0]
        conf.append((streams, fork, cap))
    snaps = []
    for streams, fork, cap in conf:
        step.streams, step.fork, step.side_ctas_per_sm = streams, fork, cap
        snaps.append(bits())
        torch.cuda.synchronize()
    out = []
    for (streams, fork, cap), got in zip(conf, snaps):
        step.streams, step.fork, step.side_ctas_per_sm = streams, fork, cap
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                   for a, b in zip(snaps[0], got))
        out.append((streams if streams == "fused" else f"{fork}/{cap}", timed(), same))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_fork",
                                description=__doc__.splitlines()[0])
    attn_step_args(p)
    p.add_argument("--caps", default="0,2,4", help="side CTAs per SM (0: no cap)")
    p.add_argument("--forks", default="start,after", help="start and/or after (the first GEMV)")
    a = p.parse_args(argv)
    try:
        steps, batches, L, R = attn_step_values(a)
        caps = [int(c) for c in a.caps.split(",")]
        forks = a.forks.split(",")
        if not set(forks) <= {"start", "after"} or min(caps) < 0:
            raise ValueError
    except ValueError:
        print("tune_fork: --steps mla,kda; --forks start,after; --batches (>= 1), --caps (>= 0), "
              "--len, --R take integers", file=sys.stderr)
        return 2
    if no_gpu("tune_fork"):
        return 2
    sets = settings(caps, forks)
    differ = False
    for name in steps:
        rows = _mla(batches, L, sets, R) if name == "mla" else _kda(batches, sets, R)
        head = None
        for T, row in rows:
            if head is None:
                head = f"{name} (us; fork point/cap; x fused; bits)"
                print(head)
                print(f"{'T':>4} " + " ".join(f"{s:>22}" for s, _, _ in row))
            base = row[0][1]
            print(f"{T:>4} " + " ".join(f"{us:9.1f} {base / us:5.2f}x {'y' if ok else 'N':>5}"
                                        for _, us, ok in row), flush=True)
            differ |= not all(ok for _, _, ok in row)
    if differ:
        print("tune_fork: a setting's bits differ from fused's (N above)", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
