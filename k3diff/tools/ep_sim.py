"""The exchange pattern of K3's MoE under expert parallelism, simulated on the CPU.

    python -m k3diff.tools.ep_sim                      # 72 ranks (GB300 NVL72), batch 1, 8, 64
    python -m k3diff.tools.ep_sim --ranks 8 --batches 1,64 --routing natural,hot --steps 16

Each rank decodes its own batch of B tokens (attention data-parallel, experts sharded: the
serving layout of an NVL72 rack), the 896 experts placed contiguously (k3diff/ep_config.py: the
first E % N ranks one expert more). Per step and MoE layer every token picks its top-16 experts
(sigmoid scores + bias, K3's router; logits of a random router on random activations, i.e.
i.i.d. normal; `skewed` and `hot` shift the bias as the routing modes of k3diff/routing.py do).

Dispatch sends each token's latent row hl (r = 3584 bf16 = 7 KiB: LatentMoE exchanges the latent,
half of x's d = 7168) once to every other rank that owns one of its experts, with its ids and
weights (8 B per route); combine returns one row per (token, rank), the rank's weighted sum over
its experts (the same count back). Columns, per step (mean over --steps; max where said):

    rows/rank   rows a rank sends (= receives, on average) off-rank; local = routes kept on-rank
    links       (src, dst) pairs with traffic, of N(N-1); rows/link mean and max over links
    KiB/link    bytes of the busiest link, dispatch
    MiB/rank    the busiest rank's dispatch bytes, out or in (combine: the rows alone, reversed)
    us@BW       dispatch + combine of the busiest rank at --bandwidth GB/s per GPU and direction
                (a lower bound: no latency, no overlap)
"""
from __future__ import annotations

import argparse
import sys

from k3diff.ep_config import contiguous, counts

EXIT_USAGE = 2
ROUTINGS = ("natural", "skewed", "hot")


def simulate(ranks: int, batch: int, routing: str = "natural", *, experts: int = 896, top_k: int = 16,
             latent: int = 3584, steps: int = 8, seed: int = 0) -> dict:
    """Per-step traffic of one MoE layer (means over `steps`); see the module doc for the columns."""
    import torch

    g = torch.Generator().manual_seed(seed)
    owner = torch.tensor(contiguous(experts, ranks), dtype=torch.int64)
    row_bytes = 2 * latent                  # the hl row (bf16); ids and weights: 8 B per route
    bias = torch.zeros(experts)
    if routing == "skewed":
        bias += torch.roll(torch.linspace(-0.5, 0.5, experts), int(torch.randint(experts, (1,), generator=g)))
    elif routing == "hot":
        bias[torch.randperm(experts, generator=g)[:top_k]] += 4.0
    acc = {"rows": 0.0, "routes": 0.0, "local": 0.0, "links": 0.0, "link_mean": 0.0, "link_max": 0.0, "link_bytes": 0.0,
           "rank_bytes": 0.0, "combine_bytes": 0.0}
    src = torch.arange(ranks).repeat_interleave(batch)                   # each token's home rank
    for _ in range(steps):
        logits = torch.randn(ranks * batch, experts, generator=g)
        ids = torch.topk(torch.sigmoid(logits) + bias, top_k, dim=-1).indices
        dst = owner[ids]                                                # [tokens, k]
        local = (dst == src[:, None]).sum().item()
        # one row per (token, destination rank): a token's experts on one rank share its row
        hit = torch.zeros(ranks * batch, ranks, dtype=torch.bool)
        hit.scatter_(1, dst, True)
        hit[torch.arange(ranks * batch), src] = False
        routes_to = torch.zeros(ranks * batch, ranks)
        routes_to.scatter_add_(1, dst, torch.ones_like(dst, dtype=torch.float32))
        routes_to[torch.arange(ranks * batch), src] = 0
        link_rows = torch.zeros(ranks, ranks).index_add_(0, src, hit.float())         # [src, dst]
        link_routes = torch.zeros(ranks, ranks).index_add_(0, src, routes_to)
        link_bytes = link_rows * row_bytes + link_routes * 8
        used = link_rows > 0
        acc["rows"] += link_rows.sum().item() / ranks
        acc["routes"] += link_routes.sum().item() / ranks
        acc["local"] += local / ranks
        acc["links"] += used.sum().item()
        acc["link_mean"] += link_rows[used].mean().item() if used.any() else 0.0
        acc["link_max"] = max(acc["link_max"], link_rows.max().item())
        acc["link_bytes"] = max(acc["link_bytes"], link_bytes.max().item())
        acc["rank_bytes"] = max(acc["rank_bytes"], link_bytes.sum(1).max().item(), link_bytes.sum(0).max().item())
        back = link_rows * row_bytes                      # combine: one row per (token, rank), reversed
        acc["combine_bytes"] = max(acc["combine_bytes"], back.sum(0).max().item(), back.sum(1).max().item())
    for k in ("rows", "routes", "local", "links", "link_mean"):
        acc[k] /= steps
    return acc


def table(ranks: int, batches, routings, *, steps: int, bandwidth: float, seed: int = 0) -> list[str]:
    c = counts(contiguous(896, ranks), ranks)
    lines = [f"K3 MoE exchange, {ranks} ranks, 896 experts contiguous ({min(c)}..{max(c)} per rank), top-16, "
             f"hl rows r=3584 bf16 (7168 B) + 8 B per route; per step and layer, {steps} steps; "
             f"us@BW at {bandwidth:g} GB/s",
             f"{'batch':>5} {'routing':8} {'rows/rank':>9} {'local':>6} {'links':>11} {'rows/link':>10} "
             f"{'max':>4} {'KiB/link':>8} {'MiB/rank':>8} {'us@BW':>7}"]
    for B in batches:
        for routing in routings:
            s = simulate(ranks, B, routing, steps=steps, seed=seed)
            us = (s["rank_bytes"] + s["combine_bytes"]) / (bandwidth * 1e9) * 1e6    # dispatch + combine
            lines.append(f"{B:5d} {routing:8} {s['rows']:9.1f} {s['local']:6.2f} "
                         f"{s['links']:6.0f}/{ranks * (ranks - 1):<4d} {s['link_mean']:10.2f} {s['link_max']:4.0f} "
                         f"{s['link_bytes'] / 1024:8.1f} {s['rank_bytes'] / 2**20:8.2f} {us:7.2f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m k3diff.tools.ep_sim", description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=72)
    ap.add_argument("--batches", default="1,8,64", help="tokens per rank per step, comma-separated")
    ap.add_argument("--routing", default="natural", help=f"comma-separated, of {', '.join(ROUTINGS)}")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--bandwidth", type=float, default=900.0, help="GB/s per GPU and direction (NVLink 5: 900)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        print(f"ep_sim: --batches expects integers such as 1,8,64, got {args.batches!r}", file=sys.stderr)
        return EXIT_USAGE
    routings = args.routing.split(",")
    bad = [r for r in routings if r not in ROUTINGS]
    problems = ([f"--ranks must lie in 2..896, got {args.ranks}"] if not 2 <= args.ranks <= 896 else []) + \
        ([f"--batches must be >= 1, got {args.batches}"] if min(batches) < 1 else []) + \
        ([f"--steps must be >= 1, got {args.steps}"] if args.steps < 1 else []) + \
        ([f"--bandwidth must be > 0, got {args.bandwidth}"] if not args.bandwidth > 0 else []) + \
        ([f"unknown routing {bad[0]!r} (known: {', '.join(ROUTINGS)})"] if bad else [])
    if problems:
        print(f"ep_sim: {problems[0]}", file=sys.stderr)
        return EXIT_USAGE
    for line in table(args.ranks, batches, routings, steps=args.steps, bandwidth=args.bandwidth, seed=args.seed):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
