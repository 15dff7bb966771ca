"""python -m megakernel.tools.tune_gemv: the tensor-core GEMV (k_gemv_mma.py) against the CUDA-core
one (k_gemv.py) on every GEMV shape of the MoE, KDA and MLA steps, at several batches, in one run.

Method as bench.py's: R launches captured in one CUDA graph, the replay timed with events, median
of 5; weights rotated over enough copies that a replay never reads them from L2 (60 MB); the
device-copy bandwidth measured in the same run. The K split count KS decides the bits (the order
of the sum), the other knobs (U, RT, MT, PF, PIPE) do not. Checks, every shape and batch: the variants of one KS give
the same bits; the output is close to an f32 matmul of the same operands (rel L2); row t of a
batch equals the same token alone (batch invariance).
Prints a table per shape: per batch, the CUDA-core GEMV and the best GemvMMA variant of each KS
in us, % of copy bandwidth (weight bytes once + activations) and the ratio; then the KS chosen
for the shape (one for every batch); `--json` writes every variant.
"""
import argparse
import itertools
import json
import sys
import zlib

import torch

from megakernel import cache, gemv, registry
from megakernel.config import ALL_GEMVS, KDA_GEMVS, MLA_GEMVS
from megakernel.dims import FULL, SMALL, KDA_FULL, KDA_SMALL, MLA_FULL, MLA_SMALL
from megakernel.tools.bench import no_gpu, copy_bw, time_events

DEV = torch.device("cuda")


def shapes(preset):
    """name -> (N, K, out_bf16, ldx) of each GEMV of the MoE, KDA and MLA steps (gemv.SHAPES;
    each timed into a buffer of its own width: the row stride of a column slice, ldy, changes
    only the store addresses)."""
    dm, kd, md = (FULL, KDA_FULL, MLA_FULL) if preset == "full" else (SMALL, KDA_SMALL, MLA_SMALL)
    fam = dict.fromkeys(KDA_GEMVS, kd) | dict.fromkeys(MLA_GEMVS, md)
    out = {n: gemv.SHAPES[n](fam.get(n, dm))[:4] for n in ALL_GEMVS}
    out["kda_fb"] = out["kda_fb"][:3] + (0,)      # its own compact f_a
    return out


KEYS = ("NTT", "U", "RT", "KS", "MT", "PF", "PIPE", "WG")


def mma_variants(shape, T, grid):
    """The GemvMMA variants tried at batch T (NTT 1 up to 8 tokens, else 8; MT > 1 only then),
    as they compile: KS and U lowered to what the shape allows, duplicates and variants over the
    shared-memory cap dropped."""
    U, RTKS, MT, PF, PIPE, WG = grid
    out = []
    for u, (rt, ks), mt, pf, pipe, wg in itertools.product(U, RTKS, MT if T > 8 else (1,), PF, PIPE, WG):
        v = dict(NTT=1 if T <= 8 else 8, U=u, RT=rt, KS=ks, MT=mt, PF=pf, PIPE=pipe, WG=wg)
        try:
            o = registry.KERNELS["gemv"](shape, **v)
        except AssertionError:
            continue
        v.update(KS=o.KS, U=o.U)
        if v not in out:
            out.append(v)
    return out


def tried(name, shape, T, args):
    """(the CUDA-core GEMV's variant, the GemvMMA variants) timed for GEMV `name` at batch T:
    with --own-ks only those of its own K split (gemv.MMA_GEMV)."""
    own = gemv.MMA_GEMV[name][0]["KS"] if args.own_ks else None
    return (dict(TT=1 if T == 1 else gemv.TT_GEMV, U=gemv.UNROLL),
            [v for v in mma_variants(shape, T, args.grid) if own is None or v["KS"] == own])


def compile_only(names, sh, batches, args):
    """--compile-only: every kernel a run would time, compiled into the kernel cache (no GPU:
    the device's time then goes to timing). The batch-invariance form of every variant, not only
    of the best one a run checks: the best is known only once timed."""
    seen = set()
    for n in names:
        for T in batches:
            core, mma = tried(n, sh[n], T, args)
            for v in [core] + mma + [dict(v, NTT=1, MT=1) for v in mma]:
                key = tuple(sorted(v.items()))
                if (n, key) not in seen:
                    seen.add((n, key))
                    cache.compiled("gemv", sh[n], **v)
    print(f"tune_gemv: {len(seen)} kernels compiled")
    return 0


def run_us(launch, named_list, R, bind=None):
    """us per launch over R launches in a CUDA graph, rotating the named buffers."""
    st = torch.cuda.current_stream().cuda_stream
    for nm in named_list:
        launch(nm, st, bind)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        st = torch.cuda.current_stream().cuda_stream
        for i in range(R):
            launch(named_list[i % len(named_list)], st, bind)
    g.replay()
    torch.cuda.synchronize()
    us = time_events(g.replay) / R
    del g
    return us


def one(name, shape, T, args, bw, log):
    """-> the row of (shape, T): the CUDA-core GEMV and, per K split count, the best GemvMMA."""
    N, K, out_bf16, _ = shape
    wbytes = 2 * N * K
    copies = max(1, min(8, -(-256 * 2 ** 20 // wbytes)))
    g = torch.Generator(DEV).manual_seed(zlib.crc32(f"{name}/{T}".encode()))
    ws = [(torch.randn(N, K, generator=g, device=DEV) / K ** 0.5).to(torch.bfloat16)
          for _ in range(copies)]
    x = torch.randn(T, K, generator=g, device=DEV).to(torch.bfloat16)
    ydt = torch.bfloat16 if out_bf16 else torch.float32
    ys = [torch.empty(T, N, dtype=ydt, device=DEV) for _ in range(copies)]
    named = [dict(w=w, x=x, y=y, T=T, ctas=1 << 30) for w, y in zip(ws, ys)]
    moved = wbytes + 2 * T * K + T * N * (2 if out_bf16 else 4)
    ref = x.float() @ ws[0].float().T
    pct = lambda us: 100 * moved / bw / (us * 1e-6)  # noqa: E731
    st = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    bits_of = lambda t: t.view(torch.int16 if out_bf16 else torch.int32)  # noqa: E731
    row = dict(shape=name, T=T, N=N, K=K, MB=round(moved / 1e6, 1))
    # the CUDA-core GEMV as the steps launch it today (k_gemv.Gemv)
    core, mma = tried(name, shape, T, args)
    lc = cache.compiled("gemv", shape, **core)
    row["core_us"] = run_us(lc, named, args.R)
    by_ks = {}
    for v in mma:
        lm = cache.compiled("gemv", shape, **v)
        us = run_us(lm, named, args.R)
        lm(named[0], st())
        torch.cuda.synchronize()
        # a bits family: the K split, and wgmma or mma.sync (the same order; whether the tensor
        # cores round them alike is measured: row["wg_bits"])
        grp = by_ks.setdefault(f"{v['KS']}{'w' if v['WG'] else ''}",
                               dict(best=None, bits=ys[0].clone(), same=True))
        grp["same"] &= torch.equal(bits_of(ys[0]), bits_of(grp["bits"]))
        if grp["best"] is None or us < grp["best"][1]:
            grp["best"] = (v, us)
        log.append(dict(row, variant=v, us=us))
    row["ks"] = {}
    row["wg_bits"] = {k: torch.equal(bits_of(by_ks[k]["bits"]), bits_of(by_ks[k + "w"]["bits"]))
                      for k in by_ks if k + "w" in by_ks}
    for ks, grp in by_ks.items():
        v, us = grp["best"]
        inv = True              # batch invariance: the first 3 tokens alone, NTT = 1
        lm = cache.compiled("gemv", shape, **dict(v, NTT=1, MT=1))
        for t in range(min(T, 3)):
            y1 = torch.empty(1, N, dtype=ydt, device=DEV)
            lm(dict(w=ws[0], x=x[t:t + 1].contiguous(), y=y1, T=1, ctas=1 << 30), st())
            torch.cuda.synchronize()
            inv &= torch.equal(bits_of(y1[0]), bits_of(grp["bits"][t]))
        err = ((grp["bits"].float() - ref).norm() / ref.norm()).item()
        row["ks"][ks] = dict(variant=v, us=us, pct=pct(us), same_bits=grp["same"], invariant=inv,
                             rel_l2=err)
    row["pct_core"] = pct(row["core_us"])
    return row


def choose(rows):
    """The K split count of one shape (it decides the bits, so one for every batch): the least
    worst-case slowdown against the best variant of each batch."""
    def worst(ks):
        return max(r["ks"][ks]["us"] / min(e["us"] for e in r["ks"].values()) for r in rows)
    return min(set.intersection(*(set(r["ks"]) for r in rows)), key=worst)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_gemv", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=("full", "small"), default="full")
    ap.add_argument("--shapes", default="", help="comma-separated names (default: all)")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--R", type=int, default=20)
    ap.add_argument("--U", default="2,4")
    ap.add_argument("--RTKS", default="4x1,8x1,2x2,4x2,1x4,2x4,1x8",
                    help="warps per CTA as row tiles x K splits")
    ap.add_argument("--MT", default="1,2")
    ap.add_argument("--PF", default="0")
    ap.add_argument("--PIPE", default="0", help="0, 1 or 0,1: the double-buffered weight loads")
    ap.add_argument("--WG", default="0", help="0, 1 or 0,1: mma.sync or wgmma (RT a multiple of 4)")
    ap.add_argument("--own-ks", action="store_true",
                    help="only each GEMV's own K split (gemv.MMA_GEMV): its bits, its variants")
    ap.add_argument("--json", default="")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile every kernel the run would time, no GPU needed, and stop")
    a = ap.parse_args(argv)
    if not a.compile_only and no_gpu("tune_gemv"):
        return 2
    try:
        batches = [int(b) for b in a.batches.split(",")]
        ints = lambda k: tuple(int(v) for v in getattr(a, k).split(","))  # noqa: E731
        rtks = tuple(tuple(int(v) for v in p.split("x")) for p in a.RTKS.split(","))
        assert all(len(p) == 2 for p in rtks)
        a.grid = (ints("U"), rtks, ints("MT"), ints("PF"), ints("PIPE"), ints("WG"))
        assert set(a.grid[4]) | set(a.grid[5]) <= {0, 1}
    except (ValueError, AssertionError):
        print("tune_gemv: --batches/--U/--MT/--PF take comma-separated integers, --PIPE/--WG 0 and/or 1, "
              "--RTKS pairs like 4x1,1x8", file=sys.stderr)
        return 2
    sh = shapes(a.preset)
    names = [n for n in a.shapes.split(",") if n] or list(sh)
    bad = [n for n in names if n not in sh]
    if bad:
        print(f"tune_gemv: unknown shape {bad[0]!r}; known: {', '.join(sh)}", file=sys.stderr)
        return 2
    if a.compile_only:
        return compile_only(names, sh, batches, a)
    bw = copy_bw()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s ({a.preset} dims); us per launch; % of copy bandwidth")
    log, rows, ok = [], [], True
    for n in names:
        srows = [one(n, sh[n], T, a, bw, log) for T in batches]
        ks = choose(srows)
        kss = sorted(srows[0]["ks"])
        print(f"\n{n} (N {sh[n][0]}, K {sh[n][1]}): chosen KS = {ks}")
        print("| T | core us | core % | " + " | ".join(f"KS={k} us" for k in kss) +
              " | chosen % | core / chosen | chosen variant | rel L2 | bits | inv |")
        print("|---" * (7 + len(kss)) + "|")
        for r in srows:
            c = r["ks"][ks]
            print(f"| {r['T']} | {r['core_us']:.1f} | {r['pct_core']:.1f} | " +
                  " | ".join(f"{r['ks'][k]['us']:.1f}" if k in r["ks"] else "-" for k in kss) +
                  f" | {c['pct']:.1f} | {r['core_us'] / c['us']:.2f} | "
                  f"{ {k: c['variant'][k] for k in KEYS} } | {c['rel_l2']:.1e} | "
                  f"{all(e['same_bits'] for e in r['ks'].values())} | "
                  f"{all(e['invariant'] for e in r['ks'].values())} |" +
                  (f" wgmma = mma.sync bits: {r['wg_bits']}" if r["wg_bits"] else ""), flush=True)
            ok &= all(e["same_bits"] and e["invariant"] and e["rel_l2"] < 1e-2
                      for e in r["ks"].values())
        rows += [dict(r, chosen_ks=ks) for r in srows]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(copy_bw=bw, rows=rows, variants=log), f, indent=1, default=str)
    print("checks (bits equal within a K split count, batch invariance, rel L2 < 1e-2):",
          "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
