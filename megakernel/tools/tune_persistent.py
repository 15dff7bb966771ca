"""python -m megakernel.tools.tune_persistent: the one-launch step (k_persistent.py) against the
11-launch fork-join, side by side, full dims, over the persistent launch's knobs (plan.Order and
CTAs per SM).

Every setting must give bitwise the fork-join's output and intermediates (checked on two inputs
before timing). Timing as in bench.py: R steps in one CUDA graph over 8 rotating inputs, median
of 5. With --out DIR, also DIR/persistent.txt.
"""
import argparse
import copy
from dataclasses import replace

import torch

from megakernel.tools.bench import DEV, draw_weights, graph_us, out_log
from megakernel.dims import FULL
from megakernel.moe import LatentMoE
from megakernel.plan import Order

# (label, plan.Order, CTAs per SM; 0 = what the kernel is built for, config.Persist.ctas[, the
# build: config.Persist fields over the settings' own])
SETTINGS = [("default", Order(), 0), ("sfirst0", Order(shared_first=0), 0),
            ("nobackfill", Order(backfill=1.0), 0), ("backfill0", Order(backfill=0.0), 0),
            ("gemv2", Order(gemv_tiles=2), 0), ("groups8", Order(groups=8), 0),
            ("groups32", Order(groups=32), 0), ("2/SM", Order(), 2),
            # the tensor-core GEMV tasks with one K block per buffer and their K loop rolled: no
            # spill in any GEMV task's K loop at batch 1 (against up to 17 stores and 23 loads
            # a pass, MXFP4), 7-15 loads at batch > 1 against up to 69 (tools/persistent_regs.py
            # --loops, CPU). Not yet timed.
            ("lean", Order(), 0, dict(mma_gemv=(("U", 1), ("lean", 1)))),
            # the same built for fewer, fatter CTAs: 2 a SM at 128 registers (U = 2), 1 at 255
            # (U = 4: 16 KB of loads a warp in flight, the CTA shape a layer's one launch needs
            # beside the TMA attention); no spill in any hot loop at batch 1 (persistent_regs
            # --loops --ctas 2|1), 0-3 loads a pass at batch > 1 at 2 a SM, none at 1. Not yet timed.
            ("lean2/SM", Order(), 0, dict(ctas=2, mma_gemv=(("U", 2), ("lean", 1)))),
            ("lean1/SM", Order(), 0, dict(ctas=1, mma_gemv=(("U", 4), ("lean", 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_persistent")
    ap.add_argument("--formats", default="mxfp4,bf16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--settings", default=",".join(s[0] for s in SETTINGS))
    ap.add_argument("--trace", action="store_true",
                    help="instead: trace one launch per format and batch (default knobs)")
    ap.add_argument("--out", help="a folder: the table also goes to OUT/persistent.txt as it comes")
    a = ap.parse_args(argv)
    if a.trace:
        return trace_main(a)
    chosen = [s for s in SETTINGS if s[0] in a.settings.split(",")]
    log = out_log("persistent.txt", a.out)
    log("us per step; fork-join = the 11-launch step; other columns: the persistent launch "
        "(label: plan.Order knobs / CTAs per SM)")
    log(f"{'format':6s} {'T':>3s} {'fork-join':>10s} " + " ".join(f"{s[0]:>12s}" for s in chosen))
    for fmt in a.formats.split(","):
        fork = LatentMoE(FULL, draw_weights(FULL, fmt, seed=0), DEV)
        one = copy.copy(fork)                    # same weights, its own scratch and counters
        one.streams, one._scratch, one._plans = "persistent", {}, {}
        one._sync = torch.zeros_like(fork._sync)
        for T in (int(b) for b in a.batches.split(",")):
            xs = [torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
            R = 20 if T == 1 else 8
            cells = [graph_us([fork], xs, R)]
            for label, order, cps, *build in chosen:
                one.settings = _built(fork.settings, *build)
                one.order, one.ctas_per_sm = order, cps or one.settings.moe.persist.ctas
                for x in xs[:2]:
                    sf, so = fork.launch(x), one.launch(x)
                    for n, v in dict(fork.debug_outputs(sf, T), out=sf["out"]).items():
                        w = dict(one.debug_outputs(so, T), out=so["out"])[n]
                        assert torch.equal(v, w), f"{fmt} T={T} {label}: {n} differs"
                cells.append(graph_us([one], xs, R))
                one.check_persistent()
            log(f"{fmt:6s} {T:3d} " + " ".join(f"{c:10.1f}" if i == 0 else f"{c:12.1f}"
                                              for i, c in enumerate(cells)))
        del fork, one
        torch.cuda.empty_cache()


def _built(settings, persist=None):
    """settings with the persistent launch's build (config.Persist) fields `persist` laid over."""
    if not persist:
        return settings
    return replace(settings, moe=replace(settings.moe, persist=replace(settings.moe.persist,
                                                                       **persist)))


def trace_main(a):
    """Where the one launch's time goes: per stage, when its tasks ran and how long they waited
    for their dependencies (from the start of the CTA's choice of task to the start of the task:
    spinning, and ticket draws); per CTA, the time between its tasks (signal, barriers)."""
    from megakernel import plan as P
    log = out_log("persistent_trace.txt", a.out)
    for fmt in a.formats.split(","):
        one = LatentMoE(FULL, draw_weights(FULL, fmt, seed=0), DEV, streams="persistent")
        for T in (int(b) for b in a.batches.split(",")):
            x = torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16)
            one.trace = torch.zeros(1 << 20, 4, dtype=torch.int64, device=DEV)
            for _ in range(3):                      # the last launch is the one kept
                one.launch(x)
            torch.cuda.synchronize()
            one.check_persistent()
            _, tot_r, tot_s = P.build(_shape(one, T), T, min(FULL.E, T * FULL.k), one.order,
                                      one._nsm)
            total = tot_r + tot_s
            tr = one.trace[:total].cpu()
            one.trace = None
            t0 = int(tr[:, 1].min())
            st, drawn = (tr[:, 0] % 32).tolist(), ((tr[:, 1] - t0) / 1e3).tolist()
            start, end = ((tr[:, 2] - t0) / 1e3).tolist(), ((tr[:, 3] - t0) / 1e3).tolist()
            cta = (tr[:, 0] // 65536).tolist()
            span = max(end)
            log(f"{fmt} T={T}: {total} tasks on {one._nsm * one.ctas_per_sm} CTAs, span "
                f"{span:.1f} us (first ticket drawn to last task done)")
            log(f"  {'stage':12s} {'tasks':>6s} {'first start':>12s} {'last end':>9s} "
                f"{'mean run':>9s} {'mean wait':>10s} {'max wait':>9s}")
            for s_ in range(P.NST):
                ix = [i for i in range(total) if st[i] == s_]
                if not ix:
                    continue
                runs = [end[i] - start[i] for i in ix]
                waits = [start[i] - drawn[i] for i in ix]
                log(f"  {P.STAGES[s_]:12s} {len(ix):6d} {min(start[i] for i in ix):12.1f} "
                    f"{max(end[i] for i in ix):9.1f} {sum(runs) / len(ix):9.2f} "
                    f"{sum(waits) / len(ix):10.2f} {max(waits):9.2f}")
            by_cta = {}
            for i in range(total):
                by_cta.setdefault(cta[i], []).append(i)
            gaps = []
            for ix in by_cta.values():
                ix = sorted(ix, key=lambda i: drawn[i])
                gaps += [drawn[b] - end[a_] for a_, b in zip(ix, ix[1:])]
            busy = sum(end[i] - start[i] for i in range(total))
            wait = sum(start[i] - drawn[i] for i in range(total))
            slots = span * len(by_cta)
            log(f"  CTA time: running {100 * busy / slots:.1f}%, waiting on dependencies "
                f"{100 * wait / slots:.1f}%, between tasks {100 * sum(gaps) / slots:.1f}% "
                f"(mean gap {sum(gaps) / max(1, len(gaps)):.2f} us), rest (before the first / "
                f"after the last task) {100 - 100 * (busy + wait + sum(gaps)) / slots:.1f}%")
        del one
        torch.cuda.empty_cache()


def _shape(moe, T):
    from megakernel import registry
    from megakernel.experimental import launch_persistent
    return registry.persistent_step(moe.dm, **launch_persistent._variant(moe, False, T)).shape()


if __name__ == "__main__":
    main()
