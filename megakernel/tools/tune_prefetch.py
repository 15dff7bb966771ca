"""python -m megakernel.tools.tune_prefetch: the attention steps' L2 prefetch stages, side by side.

A setting is a prefetch spec (megakernel/side_stream.py: "o@mla_g:32" = the first 32 MiB of
o_proj's weight rows fetched into L2 right after the launch mla_g, on its stream; "off": none),
run in the step's stream mode (--streams), with the plain or the evict_last L2 policy (--last).
Method as tune_fork's (R steps in one CUDA graph, the replay timed with events, median of 5, full
dims, MLA with every sequence at the given cache length), except that the R steps of a graph
use R different weight sets (--rotate 1, the default): a prefetch then cannot profit from lines
the step before it left in L2, and the figures are what a model of distinct layers sees. The
first column, "off/1w", is the step without prefetches over one weight set, as the benches time
it. Every setting's outputs, cache and states are compared bitwise with "off"'s (bits y =
equal). Prints us per step and each setting's speed-up over "off".
"""
import argparse
import sys

import torch

from megakernel import side_stream
from megakernel.tools.bench import attn_step_args, attn_step_values

DEV = torch.device("cuda")
MLA_SETS = ("off,o@mla_g:32,o@mla_g:48,o@mla_attn:32,o@mla_qb:32,a@start:all,qb@mla_a:32,"
            "a@start:all;qb@mla_a:32;o@mla_g:32")
KDA_SETS = "off,o@kda_x:32,o@kda_x:48,o@kda_fb:32,fb@kda_x:all"


def _steps(cls, dims, draw, streams, n):
    return [cls(dims, draw(dims, seed=1 + r), DEV, streams=streams) for r in range(n)]


def _mla(batches, L, sets, R, streams, rotate):
    from megakernel.dims import MLA_FULL as md
    from megakernel.mla import OUTPUTS, MlaStep
    from megakernel.tools.bench_mla import draw_weights, step_inputs
    steps = _steps(MlaStep, md, draw_weights, streams, R if rotate else 1)
    for T in batches:
        x, cache, ln = step_inputs(md, T, L, R)

        def bits():
            kv = cache.clone()
            s = steps[0].launch(x, kv, ln[0], max_len=L + R)
            return [s[n].clone() for n in OUTPUTS.values()] + [kv]

        def run(i, st):
            st.launch(x, cache, ln[i], max_len=L + R)

        yield T, _row(steps, sets, bits, run, R)


def _kda(batches, sets, R, streams, rotate):
    from megakernel.dims import KDA_FULL as kd
    from megakernel.kda import OUTPUTS, KdaStep
    from megakernel.tools.bench_kda import draw_weights, step_inputs
    steps = _steps(KdaStep, kd, draw_weights, streams, R if rotate else 1)
    for T in batches:
        x, conv, rec, idx = step_inputs(kd, T, R)

        def bits():
            c, r = conv.clone(), rec.clone()
            s = steps[0].launch(x, c, r, idx[0])
            return [s[n].clone() for n in OUTPUTS] + [c, r]

        def run(i, st):
            st.launch(x, conv, rec, idx[i])

        yield T, _row(steps, sets, bits, run, R)


def _row(steps, sets, bits, run, R):
    """[(setting, us, bits equal to off's)] for one batch; bits are taken before any timing
    (the timed replays update the caches and states in place). The first entry is "off" over
    step 0's weights alone."""
    from megakernel.tools.bench_kda import graph_us

    def use(spec):
        for st in steps:
            st.prefetch = spec
            st.plan()                 # a bad spec fails here, with its one line

    snaps = []
    for spec in sets:
        use(spec)
        snaps.append(bits())
        torch.cuda.synchronize()
    use("off")
    out = [("off/1w", graph_us(lambda i: run(i, steps[0]), R), True)]
    for spec, got in zip(sets, snaps):
        use(spec)
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                   for a, b in zip(snaps[0], got))
        out.append((spec, graph_us(lambda i: run(i, steps[i % len(steps)]), R), same))
    return out


def _bad_spec(steps, sets, streams):
    """The one line of the first spec that parses wrong or names a launch its mode lacks."""
    import importlib
    for n in steps:
        cls = getattr(importlib.import_module(f"megakernel.{n}"), f"{n.capitalize()}Step")
        for spec in sets[n]:
            try:
                pf = side_stream.parse_prefetch(spec, side_stream.short_names(cls))
                side_stream.step_plan(cls, streams or cls.STREAMS, cls.FORK, pf)
            except ValueError as e:
                return f"{n}: {e}"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_prefetch",
                                description=__doc__.splitlines()[0])
    attn_step_args(p)
    p.add_argument("--mla-sets", default=MLA_SETS,
                   help="MLA prefetch specs, comma-separated; ';' joins the parts of one")
    p.add_argument("--kda-sets", default=KDA_SETS, help="KDA prefetch specs, as --mla-sets")
    p.add_argument("--streams", default="", help="fused or fork (default: each step's own)")
    p.add_argument("--last", default="0", help="0 and/or 1: the evict_last L2 policy")
    p.add_argument("--rotate", default="1", help="1: R weight sets per graph; 0: one")
    a = p.parse_args(argv)
    try:
        steps, batches, L, R = attn_step_values(a)
        lasts = [int(v) for v in a.last.split(",")]
        rotate = int(a.rotate)
        sets = {n: [s.replace(";", ",") for s in v.split(",")]
                for n, v in (("mla", a.mla_sets), ("kda", a.kda_sets))}
        if (a.streams not in ("", "fused", "fork") or not set(lasts) <= {0, 1}
                or rotate not in (0, 1)):
            raise ValueError
        for n in steps:
            if sets[n][0] != "off":
                sets[n].insert(0, "off")
        bad = _bad_spec(steps, sets, a.streams)
    except ValueError:
        print("tune_prefetch: --steps mla,kda; --streams fused or fork; --last 0,1; --rotate 0 "
              "or 1; --batches (>= 1), --len, --R take integers", file=sys.stderr)
        return 2
    if bad:
        print(f"tune_prefetch: {bad}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("tune_prefetch: needs a CUDA GPU", file=sys.stderr)
        return 2
    differ = False
    try:
        for last in lasts:
            side_stream.PF_VARIANT["last"] = bool(last)
            for name in steps:
                gen = (_mla(batches, L, sets[name], R, a.streams or None, rotate) if name == "mla"
                       else _kda(batches, sets[name], R, a.streams or None, rotate))
                head = None
                for T, row in gen:
                    if head is None:
                        head = (f"{name} (us; x off; bits), evict_last {last}, rotate {rotate}")
                        print(head)
                        for i, (s, _, _) in enumerate(row):
                            print(f"  [{i}] {s}")
                        print(f"{'T':>4} " + " ".join(f"{'[' + str(i) + ']':>18}"
                                                      for i in range(len(row))))
                    base = row[1][1]
                    print(f"{T:>4} " + " ".join(f"{us:9.1f} {base / us:5.2f}x {'y' if ok else 'N'}"
                                                for _, us, ok in row), flush=True)
                    differ |= not all(ok for _, _, ok in row)
    except ValueError as e:             # a bad spec: its one line
        print(f"tune_prefetch: {e}", file=sys.stderr)
        return 2
    finally:
        side_stream.PF_VARIANT["last"] = False
    if differ:
        print("tune_prefetch: a setting's bits differ from off's (N above)", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
