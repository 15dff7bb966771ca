"""python -m megakernel.experimental.measure {peek,prefetch}: the first GPU run of the two pieces
written without a GPU (issue 31: run it, keep what pays, delete what does not).

peek      the MoE's one launch with peek.py's ready-ticket scheduler against the default
          scheduler and the fork-join, full dims, both formats, batch 1 and 8: the three must
          agree bit for bit (output and intermediates, two inputs), then us per step (R steps in
          one CUDA graph over 8 inputs, median of 5; tune_persistent.py's method).
prefetch  whether k_l2_prefetch.py pays at all, in the setting it was written for: a GEMV that
          waits behind a latency-bound chain while HBM idles. The chain is a one-thread spin of
          `--chain` us (torch.cuda._sleep); then mla_out's GEMV at full dims (176 MB, so never in
          L2 on its own; copies rotated). With the prefetch, a side stream fetches the first
          `--mb` MB of the GEMV's rows into L2 beside the spin. Per setting: us for spin + GEMV
          with and without, and the gain against the most a prefetch can give (its bytes at the
          read bandwidth measured in the same run). Bits are untouched by construction (a prefetch
          writes nothing; checked: the GEMV's output equal with and without).
"""
import argparse
import copy
import sys

import torch

DEV = torch.device("cuda")


def _experimental():
    from megakernel import registry
    from megakernel.experimental import kernels
    registry.KERNELS.update(kernels())


def peek(a):
    from megakernel import cache
    from megakernel.dims import FULL
    from megakernel.moe import LatentMoE
    from megakernel.tools.bench import draw_weights, graph_us
    _experimental()
    real = cache.compiled

    def compiled(name, dims, fresh=False, **v):       # the one launch, under peek's scheduler
        return real("persistent_peek" if name == "persistent" and PEEK[0] else name, dims, fresh, **v)
    PEEK = [False]
    cache.compiled = compiled                         # launch_persistent.py calls it by module
    print("us per step (full dims): fork-join | one launch, default scheduler | one launch, peek "
          "(bits: both one-launch outputs equal to the fork-join's)")
    ok = True
    for fmt in a.formats.split(","):
        fork = LatentMoE(FULL, draw_weights(FULL, fmt, seed=0), DEV)
        one = copy.copy(fork)
        one.streams, one._scratch, one._plans = "persistent", {}, {}
        one._sync = torch.zeros_like(fork._sync)
        for T in (int(b) for b in a.batches.split(",")):
            xs = [torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
            R = 20 if T == 1 else 8
            cells, same = [graph_us([fork], xs, R)], []
            for p in (False, True):
                PEEK[0] = p
                eq = True
                for x in xs[:2]:
                    sf, so = fork.launch(x), one.launch(x)
                    want = dict(fork.debug_outputs(sf, T), out=sf["out"])
                    got = dict(one.debug_outputs(so, T), out=so["out"])
                    eq &= all(torch.equal(want[n], got[n]) for n in want)
                same.append(eq)
                cells.append(graph_us([one], xs, R))
                one.check_persistent()
            ok &= all(same)
            print(f"  {fmt:6s} T={T:2d}  {cells[0]:8.1f} | {cells[1]:8.1f} | {cells[2]:8.1f} "
                  f"(peek / default x{cells[2] / cells[1]:.3f}; bits {'equal' if all(same) else 'DIFFER'})",
                  flush=True)
        del fork, one
        torch.cuda.empty_cache()
    return 0 if ok else 1


def prefetch(a):
    from megakernel import cache, config, gemv
    from megakernel.dims import MLA_FULL
    from megakernel.experimental.k_l2_prefetch import region
    from megakernel.tools import roofline
    from megakernel.tools.bench import time_events
    _experimental()
    machine = roofline.measure(DEV)
    shape = gemv.SHAPES["mla_out"](MLA_FULL)
    N, K = shape[0], shape[1]
    fn = cache.compiled("gemv", shape, **gemv.variant("mla_out", 1, config.current().gemv))
    pf = cache.compiled("l2_prefetch", MLA_FULL, ctas=132, last=False)
    copies = 3                                    # 3 x 176 MB: a replay never finds them in L2
    ws = [(torch.randn(N, K, device=DEV) / K ** 0.5).to(torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, K, device=DEV).to(torch.bfloat16)
    ys = [torch.empty(1, N, dtype=torch.bfloat16, device=DEV) for _ in ws]
    cycles = int(a.chain * 1.98e3)                # ~1.98 GHz SM clock (nvidia-smi, H200)
    side = torch.cuda.Stream()
    print(f"{machine.line()}\nspin {a.chain} us then mla_out's GEMV (batch 1, {2 * N * K / 1e6:.0f} MB); "
          "us per (spin + GEMV), with the first MB of its rows prefetched into L2 beside the spin")
    ok = True
    for mb in [float(v) for v in a.mb.split(",")]:
        rows, row_bytes, prefix = region(ws[0], mb)

        def step(i, with_pf):
            st = torch.cuda.current_stream()
            if with_pf:
                side.wait_stream(st)
                with torch.cuda.stream(side):
                    pf(dict(w=ws[i].view(torch.uint8), rows=rows, row_bytes=row_bytes,
                            prefix=prefix), side.cuda_stream)
            torch.cuda._sleep(cycles)
            fn(dict(w=ws[i], x=x, y=ys[i], T=1, ctas=gemv.FULL_GRID), st.cuda_stream)
            if with_pf:
                st.wait_stream(side)

        us, outs = {}, {}
        for with_pf in (False, True):
            R = 3 * copies
            for i in range(copies):
                step(i, with_pf)
            torch.cuda.synchronize()
            outs[with_pf] = [y.clone() for y in ys]
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(R):
                    step(i % copies, with_pf)
            g.replay()
            torch.cuda.synchronize()
            us[with_pf] = time_events(g.replay) / R
            del g
        same = all(torch.equal(p, q) for p, q in zip(outs[False], outs[True]))
        ok &= same
        fetched = rows * prefix
        best = fetched / machine.read_bw / 1e-6
        print(f"  {fetched / 1e6:6.1f} MB: {us[False]:7.1f} without, {us[True]:7.1f} with "
              f"(gain {us[False] - us[True]:5.1f} us; at most {best:4.1f}); bits "
              f"{'equal' if same else 'DIFFER'}", flush=True)
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.experimental.measure",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("peek")
    p.add_argument("--formats", default="mxfp4,bf16")
    p.add_argument("--batches", default="1,8")
    q = sub.add_parser("prefetch")
    q.add_argument("--chain", type=float, default=40.0, help="the spin's length, us")
    q.add_argument("--mb", default="8,24,48", help="prefetched MB per setting")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("measure: needs a CUDA GPU", file=sys.stderr)
        return 2
    return peek(a) if a.what == "peek" else prefetch(a)


if __name__ == "__main__":
    sys.exit(main())
