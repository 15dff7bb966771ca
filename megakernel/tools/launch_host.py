"""python -m megakernel.tools.launch_host: the host time of one step's launches (no CUDA graph),
CuTe DSL's own call path against fast_call.py's, side by side in one process.

What k3diff pays per candidate run on the GPU is mostly this host time: a small-preset step runs
in tens of microseconds on the GPU, its eleven launches take longer to enqueue. Per row: the
enqueue time per step (mean of R steps, no sync inside the loop) and the step's wall time with
a sync after each step, both paths on the same weights, inputs and scratch, alternated
(slow, fast, slow, fast) so that drift hits both; the median of the alternations.
"""
import argparse
import statistics
import sys
import time

import torch

from megakernel import cache, fast_call
from megakernel.dims import FULL, SMALL
from megakernel.moe import LatentMoE
from megakernel.tools.bench import no_gpu, draw_weights

DEV = torch.device("cuda")


def _per_step(m, x, steps, sync_each):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        m.launch(x)
        if sync_each:
            torch.cuda.synchronize()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / steps * 1e6


def _use(fast: bool, saved: dict):
    """Every compiled kernel's Launch switched to its fast call or to CuTe DSL's path (`saved`
    keeps each one's fast call while it is off)."""
    for key, launch in cache._CACHE.items():
        saved.setdefault(key, launch.fast)
        if saved[key] is None:
            raise SystemExit(f"launch_host: kernel {key[0]} has no fast call (see the line above)")
        launch.fast = saved[key] if fast else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.launch_host", description=__doc__.splitlines()[0])
    p.add_argument("--dims", choices=("small", "full"), default="small")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    if no_gpu("launch_host"):
        return 2
    if not fast_call.enabled():
        print(f"launch_host: {fast_call.ENV}=0 turns the fast path off; unset it to compare", file=sys.stderr)
        return 2
    dm = SMALL if a.dims == "small" else FULL
    saved = {}
    print(f"dims {a.dims}; {a.steps} steps x {a.rounds} rounds per path; us per step")
    print(f"{'fmt':6} {'streams':10} {'T':>4} {'enqueue slow':>13} {'fast':>8} {'x':>6} "
          f"{'synced slow':>12} {'fast':>8} {'x':>6}")
    for fmt in ("bf16", "mxfp4"):
        w = draw_weights(dm, fmt, seed=1)
        for streams in ("fork", "serial", "persistent"):
            m = LatentMoE(dm, w, DEV, streams=streams)
            for T in (1, 8, 64):
                x = torch.randn(T, dm.d, device=DEV).to(torch.bfloat16)
                for _ in range(2):
                    m.launch(x)            # compile / load, then attach the fast calls
                got = {}
                for sync_each in (False, True):
                    for fast in (False, True) * a.rounds:
                        _use(fast, saved)
                        got.setdefault((sync_each, fast), []).append(_per_step(m, x, a.steps, sync_each))
                med = {k: statistics.median(v) for k, v in got.items()}
                print(f"{fmt:6} {streams:10} {T:>4} {med[False, False]:13.1f} {med[False, True]:8.1f} "
                      f"{med[False, False] / med[False, True]:6.2f} {med[True, False]:12.1f} "
                      f"{med[True, True]:8.1f} {med[True, False] / med[True, True]:6.2f}")
        del w
    return 0


if __name__ == "__main__":
    sys.exit(main())
