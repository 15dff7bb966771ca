"""Why the MXFP4 bench rows are slower after the bf16 rows (calls 85, 87, 89: batch 1 fork-join
297.8 vs 254.9 us in one call, with the card cool and at full clock both times; one stream,
each launch alone and the fork-join with CUDA-core GEMVs equal in both). One process, one MXFP4
step object at full dims, batch 1, the bench's timing (bench.graph_us: R steps in one CUDA
graph, median of 5 replays), each row five input seeds, fork-join and one stream:
  A  fresh (twice);
  B  after a 59 GB buffer (or what the card has free, less 4 GiB) was filled, streamed and freed (the bf16 rows' memory, no kernels);
  then the MXFP4 object freed, a bf16 step object built, timed at batch 1, 8 and 64 as the
  bench does, and freed (both do not fit an 80 GB card at once);
  D  a new MXFP4 step object (the bench's order), twice.
If B moves, the bf16 rows' memory is what they leave behind; if only D does, their kernels,
streams or graphs.
    PYTHONPATH=$PWD python3 scripts/gpu_calls/order_probe.py
Call 91 (H100), medians of the 5 seeds: fork-join 265.5 / 265.8 (A), 266.0 (B), 266.5 / 266.6
(D); one graph slow, B's first (308.6 us, the first captured after the buffer was freed), like the
bench's slow row (docs/megakernel-notes.md, twenty-second session).
"""
import statistics
import sys

import torch

from megakernel.dims import FULL
from megakernel.moe import LatentMoE
from megakernel.tools.bench import DEV, draw_weights, gpu_state, graph_us

R = 40


def xs_of(seed, T=1, n=8):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(T, FULL.d, device=DEV, generator=g).to(torch.bfloat16) for _ in range(n)]


def row(label, m, seeds=(0, 1, 2, 3, 4)):
    fj, one = [], []
    for s in seeds:
        xs = xs_of(s)
        m.streams = "fork"
        fj.append(graph_us([m], xs, R))
        m.streams = "serial"
        one.append(graph_us([m], xs, R))
        m.streams = "fork"
    print(f"{label:44s} fork-join " + " ".join(f"{u:6.1f}" for u in fj)
          + f" (median {statistics.median(fj):6.1f}) | one stream median {statistics.median(one):6.1f}"
          + f" | card {gpu_state()}", flush=True)


def build(fmt):
    w = draw_weights(FULL, fmt, seed=0)
    m = LatentMoE(FULL, w, DEV)
    del w
    for T in (1, 8, 64):
        m.compile_all(T)
    torch.cuda.synchronize()
    return m


def main():
    m = build("mxfp4")
    row("A fresh", m)
    row("A fresh, again", m)
    free = torch.cuda.mem_get_info()[0]
    big = torch.empty(min(59 * 2**30, free - 4 * 2**30), dtype=torch.uint8, device=DEV)
    big.fill_(1)
    for _ in range(20):
        big.max()                       # a read of every byte, no copy
    n = big.numel() / 2**30
    del big
    torch.cuda.empty_cache()
    row(f"B after a {n:.0f} GiB buffer streamed and freed", m)
    del m
    torch.cuda.empty_cache()
    b = build("bf16")
    for T in (1, 8, 64):
        xs = [torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
        print(f"  bf16 T={T} fork-join {graph_us([b], xs, min(40, max(1, R // T))):.1f} us", flush=True)
    del b
    torch.cuda.empty_cache()
    m2 = build("mxfp4")
    row("D a new MXFP4 object after the bf16 rows", m2)
    row("D again", m2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
