"""python -m megakernel.tools.mla_ksplit: MLA's tensor-core attentions in their layouts, alone,
side by side, full dims: k_mla_attn_mma.py's on mma.sync and k_mla_attn_wg.py on wgmma
(`wgmma`; `wgmma256` with splits of 256 past SHORT) and k_mla_attn_tma.py (`tma`: the same
products with the tiles by TMA and the scores split between the warpgroups, the default on
sm_90a; SAME_BITS holds its m and acc partials to `wgmma`'s bit for bit, its l, summed in
another order, to within L_RTOL; its query descriptors recomputed per tile, k_mla_attn_wg.MlaAttnWG's
`remat`; `tma_held`: the same kernel with them held across the tile loop, as it was before,
held to `tma`'s bits).

`unsplit` (one head tile per CTA, every warp of a head tile scoring the whole 576-wide row:
NCOL-fold score work) was the default until the whole k3diff check ran with `ksplit+mtc2` (each
warp scores its share of c, the partials summed through shared memory; two head tiles per CTA),
mma.sync's default now. Other sum orders, so the bits differ: each layout's merged latent (softmax over
every split, from the kernel's own partials) is held against a float64 attention over the same
cache and query, in units of max|ref| of the case. A layout faster but less accurate than
`unsplit` is a trade-off, printed as such. Timing as tune_attn.py's (R launches in one CUDA graph,
median of 5). Exit 1 if a layout's error exceeds 2x unsplit's (2^-20 at least) or 2^-12, or
a kernel's m or acc bits differ from the ones SAME_BITS names, or its l by more than L_RTOL."""
import argparse
import sys

import torch

from megakernel import cache
from megakernel.dims import MLA_FULL
from megakernel.launch_streams import stream
from megakernel.tools.bench import no_gpu

DEV = torch.device("cuda")
# explicit, so a row means the same layout whatever the defaults; ksplit+mtc2 is mma.sync's
# default, tma (k_mla_attn_tma.py: k_mla_attn_wg.py's products, splits of 512 past SHORT) on sm_90a
VARIANTS = {"unsplit": dict(ksplit=False, mtc=1), "ksplit": dict(ksplit=True, mtc=1),
            "ksplit+mtc2": dict(ksplit=True, mtc=2), "ksplit+ncol8": dict(ksplit=True, mtc=1, ncol=8),
            "wgmma": dict(wg=True), "wgmma256": dict(wg=True, ch=256), "tma": dict(tma=True),
            "tma_held": dict(tma=True, remat=False)}
BASE = "unsplit"
# the same products by other loads and another split of the scores (k_mla_attn_tma.py): m and acc
# bit for bit, l (each warpgroup's rows summed apart, then added) within L_RTOL
SAME_BITS = {"tma": "wgmma", "tma_held": "tma"}
L_RTOL = 2.0 ** -20
WORST = 2.0 ** -12          # of max|ref|: 8x below the bf16 rounding of the latent it feeds


def compiled(name, md):
    """The compiled attention of variant `name` (a key of VARIANTS) at dims md."""
    v = dict(VARIANTS[name])
    kernel = ("mla_attn_tma" if v.pop("tma", False) else "mla_attn_wg" if v.pop("wg", False)
              else "mla_attn_mma")
    return cache.compiled(kernel, md, **v)


def merged(pm, pl, pa):
    """The latent softmax(z) C from a kernel's split partials (m, l, acc), in float64."""
    pm, pl, pa = pm.double(), pl.double(), pa.double()
    M = pm.max(dim=2, keepdim=True).values
    w = torch.exp(pm - M)                         # an empty split: exp(-inf) = 0
    return (w.unsqueeze(-1) * pa).sum(2) / (w * pl).sum(2, keepdim=True)


def exact(md, s, kv, lens):
    """float64 attention of every token over its cache rows 0..L_t (the row of this step too)."""
    Q = md.NP + md.RP
    out = []
    for t in range(kv.shape[0]):
        n = int(lens[t]) + 1
        rows = kv[t, :n].double()
        ql = s["ql"][t].reshape(md.H, md.R).double()                 # the scratch holds rows flat
        q = torch.cat([ql, s["q"][t].reshape(md.H, Q)[:, md.NP:].double()], 1)   # [H, R + RP]
        z = (q @ rows.T) * float(Q) ** -0.5
        out.append(torch.softmax(z, 1) @ rows[:, :md.R])
    return torch.stack(out)


def row(T, L, names, R=4):
    from megakernel.tools.bench_kda import graph_us
    from megakernel.tools.tune_attn import mla_step_scratch
    md = MLA_FULL
    s, named, kv, lens = mla_step_scratch(T, L, R)
    ref = exact(md, s, kv, lens)
    scale = float(ref.abs().max())
    us, err, out, same = {}, {}, {}, {}
    for name in names:
        launch = compiled(name, md)
        s["pa"].fill_(float("nan"))
        launch(named, stream())
        torch.cuda.synchronize()
        err[name] = float((merged(s["pm"], s["pl"], s["pa"]) - ref).abs().max()) / scale
        out[name] = [s[k].clone() for k in ("pm", "pl", "pa")]
        us[name] = graph_us(lambda i, launch=launch: launch(named, stream()), R)
    for name in names:
        if name in SAME_BITS and SAME_BITS[name] in out:
            (m, l, acc), (m0, l0, acc0) = out[name], out[SAME_BITS[name]]
            same[name] = (all(bool(((a == b) | (a.isnan() & b.isnan())).all())
                              for a, b in ((m, m0), (acc, acc0))),
                          bool(((l - l0).abs() <= L_RTOL * l0.abs()).all()))
    return us, err, same


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.mla_ksplit", description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1x1024,1x32768,8x32768,64x8192,64x32768", help="batch x cache length")
    p.add_argument("--variants", default=",".join(VARIANTS))
    a = p.parse_args(argv)
    names = [v for v in a.variants.split(",") if v]
    try:
        rows = [tuple(int(v) for v in c.split("x")) for c in a.rows.split(",") if c]
        assert rows and all(len(c) == 2 and c[0] >= 1 and c[1] >= 0 for c in rows)
    except (ValueError, AssertionError):
        print("mla_ksplit: --rows takes batch x length pairs like 64x32768", file=sys.stderr)
        return 2
    bad = [v for v in names if v not in VARIANTS]
    if bad or BASE not in names:
        print(f"mla_ksplit: --variants from {','.join(VARIANTS)}, {BASE} among them", file=sys.stderr)
        return 2
    if no_gpu("mla_ksplit"):
        return 2
    names = [BASE] + [v for v in names if v != BASE]
    print(f"MLA attention alone, us (x: {BASE}'s time over the layout's; tma is the default on sm_90a, ksplit+mtc2 "
          "elsewhere) "
          "| max|lat - exact| / max|exact|")
    ok = True
    for T, L in rows:
        us, err, same = row(T, L, names)
        for v in names[1:]:
            ok &= err[v] <= max(2 * err[BASE], 2.0 ** -20) and err[v] <= WORST
        ok &= all(all(e) for e in same.values())
        print(f"  T={T:3d} L={L:6d} " + "  ".join(
            f"{v}: {us[v]:8.1f} (x{us[BASE] / us[v]:.2f})" for v in names) + " | " +
            "  ".join(f"{v} {err[v]:.2e}" for v in names) +
            "".join(f" | {v} m, acc bits {'==' if e[0] else '!='} {SAME_BITS[v]}'s, l within "
                    f"2^-20: {'y' if e[1] else 'n'}" for v, e in same.items()), flush=True)
    print("every variant within its error bound:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
