"""Seconds to materialize a case's inputs on a GPU, case version 1 (caches and states drawn on the
CPU, then copied) against version 2 (drawn on the GPU: k3diff.materialize.inputs_draw_on), side by
side in one run: the median of 3 after one warm-up, each timed to the GPU's sync."""
import dataclasses
import statistics
import time

import torch

from k3diff import materialize as M
from k3diff.case import Case


def timed(case):
    def once():
        torch.cuda.synchronize()
        t = time.perf_counter()
        inp = M.inputs_for(case, "cuda")
        if "state_idx" in inp:
            M.poison_unused_slots(inp, case.seed, on_device=M.inputs_draw_on(case, "cuda") == "device")
        torch.cuda.synchronize()
        return time.perf_counter() - t
    once()
    return statistics.median(once() for _ in range(3))


def main():
    rows = [
        ("mla full B8 L4000", Case("mla", "full", batch=8, cache_lens=(4000,) * 8)),
        ("mla full B64 L32000x4", Case("mla", "full", batch=64, cache_lens=(32000,) * 4 + (500,) * 60)),
        ("mla small B64 L300", Case("mla", "small", batch=64, cache_lens=(300,) * 64)),
        ("kda full B64 S130", Case("kda", "full", batch=64, n_slots=130, state_idx=tuple(range(1, 65)))),
        ("kda full B256", Case("kda", "full", batch=256, n_slots=257, state_idx=tuple(range(1, 257)))),
        ("kda small B64 S130", Case("kda", "small", batch=64, n_slots=130, state_idx=tuple(range(1, 65)))),
    ]
    print(f"{'inputs of':26s} {'v1 (CPU draw) s':>16s} {'v2 (GPU draw) s':>16s} {'x':>6s}")
    for label, case in rows:
        v1 = timed(dataclasses.replace(case, version=1))
        v2 = timed(case)
        print(f"{label:26s} {v1:16.4f} {v2:16.4f} {v1 / v2:6.1f}")


if __name__ == "__main__":
    main()
