"""python -m megakernel.tools.bench_verify: the attention steps at a verify step's widths and on the
FP8 latent cache (verify.py, fp8_cache.py), beside the decode step they are built from.

Rows: MLA at B sequences x W tokens (W 1 is the decode step) x cache length L x cache format, and
KDA at B x W. Method as bench_mla's and bench_kda's: R steps captured in one CUDA graph, the replay
timed with events, median of 5 (a fixed-width step: the launches are W, the width told to verify.py
as a serving engine knows it). Columns: µs, "x W1" its time over the decode step of the same B
(and L, format) measured in the same run, and "roof2" the share of the two-limit floor
(tools/roofline.py) of what a verify step must do at least:
  MLA  bytes: the weights once, each sequence's L + W cache rows read once (bf16 C x 2 bytes, FP8
       row_bytes), its W rows written; flops: every GEMV for each of the B x W tokens, and token
       j's attention over L + j + 1 rows (C-wide score, R-wide value, per head);
  KDA  bytes: the weights once, each sequence's state (f32 D x D per head, its conv history) read
       once and written once, and each token's state written (the per-token states the contract
       keeps); flops: the GEMVs for each token.
The steps as served today (verify.py) read every weight once but run the cache or state launches
W times (MLA reads its cache W times): the share shows how far that is from a kernel that takes a
sequence's W query rows at once.
"""
import argparse
import sys

import torch

from megakernel import fp8_cache, verify
from megakernel.dims import KDA_FULL, KDA_SMALL, MLA_FULL, MLA_SMALL
from megakernel.kda import KdaStep
from megakernel.mla import MlaStep
from megakernel.tools import bench_kda, bench_mla, roofline
from megakernel.tools.bench import no_gpu
from megakernel.tools.bench_kda import graph_us

DEV = torch.device("cuda")
DIMS = {"full": (MLA_FULL, KDA_FULL), "small": (MLA_SMALL, KDA_SMALL)}


def mla_bytes(md, B, W, L, fmt):
    row = fp8_cache.row_bytes(md) if fmt == "fp8" else 2 * md.C
    return 2 * bench_mla.weight_elements(md) + B * row * (L + 2 * W)


def mla_flops(md, B, W, L):
    rows = sum(L + j + 1 for j in range(W))
    return 2 * B * W * bench_mla.weight_elements(md) + 2 * B * rows * md.H * (md.C + md.R)


def kda_weight_elements(kd):
    return kd.N * kd.d + kd.P * kd.D + kd.d * kd.P


def kda_bytes(kd, B, W):
    state = 4 * kd.H * kd.D * kd.D + 2 * 3 * kd.P * (kd.W - 1)
    return 2 * kda_weight_elements(kd) + B * 2 * state + B * W * state


def kda_flops(kd, B, W):
    return 2 * B * W * kda_weight_elements(kd)


def mla_row(step, md, B, W, L, fmt, R=2):
    """µs of one verify step of B sequences x W tokens over caches of L rows, bf16 or FP8."""
    T = B * W
    x = torch.randn(T, md.d, device=DEV).to(torch.bfloat16)
    cache = torch.randn(B, L + W + 1, md.C, device=DEV).to(torch.bfloat16)
    if fmt == "fp8":
        cache = fp8_cache.quantise(cache.view(-1, md.C)[:, :md.R], cache.view(-1, md.C)[:, md.R:],
                                   md).view(B, L + W + 1, -1)
    lens = torch.full((B,), L, dtype=torch.int64, device=DEV)
    ql = None if W == 1 else torch.full((B,), W, dtype=torch.int64, device=DEV)     # W 1: decode
    return graph_us(lambda i: verify.mla(step, x, cache, lens, ql, max_len=L + W, widest=W), R)


def kda_row(step, kd, B, W, R=2):
    """µs of one verify step of B sequences x W tokens, each step's sequences in fresh slots."""
    T = B * W
    _, conv, rec, idx = bench_kda.step_inputs(kd, B, R)         # the states, each step's B slots
    x = torch.randn(T, kd.d, device=DEV).to(torch.bfloat16)
    if W == 1:                                      # the decode step
        return graph_us(lambda i: verify.kda(step, x, conv, rec, idx[i]), R)
    ql = torch.full((B,), W, dtype=torch.int64, device=DEV)
    acc = torch.full((B,), W, dtype=torch.int64, device=DEV)
    conv_t = torch.empty(T, 3 * kd.P, kd.W - 1, dtype=torch.bfloat16, device=DEV)
    rec_t = torch.empty(T, kd.H, kd.D, kd.D, dtype=torch.float32, device=DEV)
    return graph_us(lambda i: verify.kda(step, x, conv, rec, idx[i], ql, acc, conv_t, rec_t, widest=W), R)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.bench_verify", description=__doc__.splitlines()[0])
    p.add_argument("--dims", default="full", help="full or small")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--widths", default="1,2,4,8", help="W per sequence (1: the decode step, the ratios' base)")
    p.add_argument("--lens", default="1024,32768", help="MLA cache lengths")
    p.add_argument("--stages", default="mla,kda")
    a = p.parse_args(argv)
    if no_gpu("bench_verify"):
        return 2
    try:
        batches, widths, lens = ([int(v) for v in s.split(",")] for s in (a.batches, a.widths, a.lens))
        md, kd = DIMS[a.dims]
        stages = a.stages.split(",")
        if set(stages) - {"mla", "kda"} or not all(1 <= w <= verify.MAX_WIDTH for w in widths):
            raise ValueError
    except (ValueError, KeyError):
        print(f"bench_verify: --batches / --widths (1..{verify.MAX_WIDTH}) / --lens take integers, "
              "--dims full or small, --stages mla and/or kda", file=sys.stderr)
        return 2
    widths = sorted(set(widths) | {1})
    machine = roofline.measure(DEV)
    print(machine.line())
    print(f"{'stage':5} {'cache':5} {'B':>4} {'L':>6} {'W':>2} {'us':>9} {'x W1':>6} {'roof2':>8}")
    if "mla" in stages:
        step = MlaStep(md, bench_mla.draw_weights(md), DEV)
        for fmt in ("bf16", "fp8"):
            for B in batches:
                for L in lens:
                    base = None
                    for W in widths:
                        us = mla_row(step, md, B, W, L, fmt)
                        base = base or us
                        two = roofline.share(machine, us, mla_bytes(md, B, W, L, fmt), mla_flops(md, B, W, L))
                        print(f"{'mla':5} {fmt:5} {B:>4} {L:>6} {W:>2} {us:9.1f} {us / base:6.2f} {two}", flush=True)
        step = None
    if "kda" in stages:
        step = KdaStep(kd, bench_kda.draw_weights(kd), DEV)
        for B in batches:
            base = None
            for W in widths:
                us = kda_row(step, kd, B, W)
                base = base or us
                two = roofline.share(machine, us, kda_bytes(kd, B, W), kda_flops(kd, B, W))
                print(f"{'kda':5} {'-':5} {B:>4} {'-':>6} {W:>2} {us:9.1f} {us / base:6.2f} {two}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
