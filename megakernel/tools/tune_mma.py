"""python -m megakernel.tools.tune_mma [--T 1,8,16,32,64]: the MXFP4 expert launches alone (full
dims), the CUDA-core path against variants of the tensor-core path (k_expert_mma.py).

Every variant must give bitwise the same act (up) and y, out (down) as the default of its batch on
this card (the per-(row, pair) order is the same whatever U / WPC / MT / PF / S), and the CUDA-core
path must agree to bf16 rounding. The up and down variants are timed independently (each launch
alone, R times in one CUDA graph over rotating inputs, median of 5, as in bench.py). Writes
with --out DIR, DIR/tune.txt: per launch a table of us per batch (* the default), the fastest variant at each
batch among those bitwise equal to the default, then the whole fork-join step with the down launch
chosen by each card's table (k_expert_mma.DOWN_BY_CARD and DOWN everywhere) side by side.
"""
import argparse
from dataclasses import replace

import torch

from megakernel import k_expert_mma
from megakernel.tools.bench import draw_weights, out_log, time_events
from megakernel.dims import FULL
from megakernel.moe import LatentMoE

DEV = torch.device("cuda")
# The candidates, compared bitwise with the default launch of each batch on this card
# (k_expert_mma.UP, down_variant(T, card)). Full dims: up K = r = 3584 (28 blocks of 128), down
# K = I = 3072 (24); more bytes in flight per warp from a larger U (registers), a deeper ring S,
# two row tiles per warp (MT, down); more warps per CTA (WPC) share the CTA's activation rows.
UPS = [dict(k_expert_mma.UP), dict(k_expert_mma.ALT_UP), dict(U=1, WPC=4, PF=128, S=4),
       dict(U=1, WPC=2, PF=128, S=4), dict(U=1, WPC=2, PF=128, S=6), dict(U=1, WPC=4, PF=128, S=2),
       dict(U=1, WPC=8, PF=128, S=2), dict(U=2, WPC=8, PF=128)]
DOWNS = k_expert_mma.down_variants() + [dict(U=3, WPC=4, MT=1, PF=128),
         dict(U=1, WPC=4, MT=2, PF=128, S=4), dict(U=1, WPC=4, MT=1, PF=128, S=6),
         dict(U=6, WPC=4, MT=1, PF=128), dict(U=3, WPC=2, MT=1, PF=128),
         dict(U=3, WPC=8, MT=1, PF=128), dict(U=1, WPC=8, MT=1, PF=128, S=4),
         dict(U=4, WPC=8, MT=1, PF=128), dict(U=2, WPC=8, MT=1, PF=256), dict(U=2, WPC=16, MT=1, PF=128)]


# the step timed with each card's down table (k_expert_mma.DOWN_BY_CARD), whatever card runs it
TABLES = [("DOWN everywhere", "")] + [(f"{part}'s table", part) for part in k_expert_mma.DOWN_BY_CARD]


def stage_us(moe, xs, stage, R=20):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for j in range(R):
            moe.launch(xs[j % len(xs)], stages={stage})
    g.replay()
    torch.cuda.synchronize()
    return time_events(g.replay) / R


def _key(v):
    return tuple(sorted(v.items()))


def step_us(moe, xs, R=10):
    """The whole fork-join step, R times in one CUDA graph (bench.py's way)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for j in range(R):
            moe.launch(xs[j % len(xs)])
    g.replay()
    torch.cuda.synchronize()
    return time_events(g.replay) / R


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_mma")
    ap.add_argument("--T", default="1,8,16,32,64", help="batches, comma-separated")
    ap.add_argument("--out", help="a folder: the tables also go to OUT/tune.txt as they come")
    a = ap.parse_args(argv)
    Ts = [int(t) for t in a.T.split(",")]
    log = out_log("tune.txt", a.out)
    dm = FULL
    moe = LatentMoE(dm, draw_weights(dm, "mxfp4", seed=0), DEV)
    base = moe.settings
    with_v = lambda **kw: replace(base, moe=replace(base.moe, **{k: _key(v) for k, v in kw.items()}))  # noqa: E731
    torch.cuda.synchronize()
    res = {"up": {}, "down": {}}     # res[launch][variant index][T] = (bits of the default, us)
    steps = {}                       # T -> {label: step us}
    for T in Ts:
        xs = [torch.randn(T, dm.d, device=DEV).to(torch.bfloat16) for _ in range(8)]
        moe.settings = replace(base, moe=replace(base.moe, mx_mma=False))
        s = moe.launch(xs[0])
        torch.cuda.synchronize()
        out_cc, y_cc = s["out"].clone(), s["y"].clone()
        nexp = int(s["nact"][0])
        mb = {"up": nexp * (2 * dm.I * dm.r) * (1 / 2 + 1 / 32) / 1e6,
              "down": nexp * dm.r * dm.I * (17 / 32) / 1e6}
        log(f"T={T}: {nexp} experts, up {mb['up']:.1f} MB, down {mb['down']:.1f} MB; default down "
            f"{k_expert_mma.down_variant(T)}")
        log(f"  cuda-core path   up {stage_us(moe, xs, 3):7.1f} us  down {stage_us(moe, xs, 4):7.1f} us")
        moe.settings = base
        s = moe.launch(xs[0])
        torch.cuda.synchronize()
        ref = s["act"].clone(), s["y"].clone(), s["out"].clone()
        rel = ((ref[2].float() - out_cc.float()).norm() / out_cc.float().norm()).item()
        rely = ((ref[1].float() - y_cc.float()).norm() / y_cc.float().norm()).item()
        log(f"  mma vs cuda-core: out rel-L2 {rel:.2e}, y rel-L2 {rely:.2e}, "
            f"finite {bool(torch.isfinite(ref[2].float()).all())}")
        for name, lst, stage in (("up", UPS, 3), ("down", DOWNS, 4)):
            for vi, v in enumerate(lst):
                moe.settings = with_v(**{name: v})
                sc = moe.scratch(T)
                for n in ("act", "y", "out"):       # poison: a row left unwritten cannot match
                    sc[n].fill_(float("nan"))
                s = moe.launch(xs[0])
                torch.cuda.synchronize()
                same = all(torch.equal(s[n], r) for n, r in zip(("act", "y", "out"), ref))
                t = stage_us(moe, xs, stage)
                res[name].setdefault(vi, {})[T] = (same, t)
                log(f"  {name:4s} {vi:2d} {str(v):48s} {t:8.1f} us ({mb[name] / t:.2f} TB/s) "
                    f"bits of the default: {same}")
        steps[T] = {}
        for label, card in TABLES:
            moe.settings = with_v(down=k_expert_mma.down_variant(T, card))
            steps[T][label] = step_us(moe, xs)
        moe.settings = base
        log("  step (fork-join) us: " + ", ".join(f"{k} {v:.1f}" for k, v in steps[T].items()))
    dflt = {"up": {T: 0 for T in Ts},
            "down": {T: DOWNS.index(k_expert_mma.down_variant(T, moe.card)) for T in Ts}}
    for name, lst in (("up", UPS), ("down", DOWNS)):
        r = res[name]
        ok = [vi for vi in r if all(r[vi][T][0] for T in Ts)]
        log(f"{name}: us per T " + " / ".join(f"T={T}" for T in Ts) + "  (* the default)")
        for vi in sorted(r):
            log(f"  {vi:2d} {str(lst[vi]):48s} " + " / ".join(
                f"{r[vi][T][1]:8.1f}{'*' if dflt[name][T] == vi else ' '}" for T in Ts)
                + ("" if vi in ok else "  NOT BITWISE EQUAL"))
        for T in Ts:
            b, d = min(ok, key=lambda vi: r[vi][T][1]), dflt[name][T]
            log(f"  fastest at T={T}: {b} {lst[b]} {r[b][T][1]:.1f} us "
                f"({r[d][T][1] / r[b][T][1]:.3f}x the default)")
    log(f"step (fork-join) us on {moe.card}, the down launch by each card's table: T / "
        + " / ".join(label for label, _ in TABLES) + " / ratio of the first two")
    for T in Ts:
        a, b = (steps[T][label] for label, _ in TABLES[:2])
        log(f"  {T:3d} " + " ".join(f"{steps[T][label]:9.1f}" for label, _ in TABLES) + f" {a / b:.3f}x")


if __name__ == "__main__":
    main()
