"""python -m megakernel.tools.tune_attn: the attention kernels' layout knobs, each alone on the H200.

- kda_core (k_kda_core.py): `split`, CTAs per (token, head), against FLA's fused recurrent KDA
  when fla-core is installed (bench_kda.fla_core_us); `wS`: the experiment
  megakernel/experimental/k_kda_core_warp.py (CTAs of one warp) at split S;
- mla_attn (k_mla_attn.py, the CUDA-core attention): `hg`, heads (warps) per CTA;
- mla_merge (k_mla_merge.py): `TT` tokens per CTA x `VQ` slices of a head's output columns (the
  CUDA-core path's merge, value projection included); `--lat-merges`: the tensor-core path's
  (lat only, the step's default on sm_90a) as `vNxU` (CTAs of N threads, 4 columns a thread by
  16-byte loads, U splits' loads in flight), on the partials of the step's own attention.

No knob changes a sum, so every variant must give the bits of the default (checked: the
readout, the gates and the updated state for kda_core, every token live and one null; the split
partials for mla_attn; the latent, the value projection and the gated output for mla_merge).
Method as bench_kda.py's: R launches in one CUDA graph over fresh state slots, the replay timed
with events, median of 5; full dims.
"""
import argparse
import sys

import torch

from megakernel.tools.bench import no_gpu

from megakernel import cache, registry
from megakernel.dims import KDA_FULL, MLA_FULL
from megakernel.launch_streams import stream

DEV = torch.device("cuda")


def core_kernel(label):
    """(kernel name, split) of a --splits label: 'S' the shipped core at split S, 'wS' the
    one-warp experiment at split S (its constructor then in the registry); ValueError on neither."""
    if label.startswith("w"):
        from megakernel import experimental as X
        registry.KERNELS.update(X.kernels())
        return "kda_core_warp", int(label[1:])
    return "kda_core", int(label)


def core_launch(label, kd):
    """The compiled KDA core of a --splits label."""
    name, split = core_kernel(label)
    return cache.compiled(name, kd, split=split)


def kda_rows(T, splits, R=8):
    from megakernel.k_kda_core import SPLIT
    from megakernel.kda import KdaStep
    from megakernel.tools.bench_kda import draw_weights, fla_core_us, graph_us, step_inputs
    kd = KDA_FULL
    step = KdaStep(kd, draw_weights(kd), DEV)
    x, conv, rec0, idx = step_inputs(kd, T, R)
    step.launch(x, conv.clone(), rec0.clone(), idx[0])        # the core's inputs, in scratch
    s = step.scratch(T)
    out, bits = {}, {}
    for sp in splits:
        rec = rec0.clone()
        named = dict(s, **step._weights, x=x, conv_state=conv, rec=rec, T=T, S=rec0.shape[0])
        launch = core_launch(sp, kd)
        bits[sp] = ()
        # every token live, then token 0 null (slot 0: zeros out, no state touched)
        for sidx in (idx[0], torch.cat([idx[0][:1] * 0, idx[0][1:]])):
            s["sidx"].copy_(sidx.to(torch.int32))
            launch(named, stream())
            torch.cuda.synchronize()
            bits[sp] += tuple(s[n].clone() for n in ("core", "decay", "beta")) + (rec[idx[0]].clone(),)
            rec.copy_(rec0)

        def one(i, launch=launch, named=named):
            s["sidx"].copy_(idx[i].to(torch.int32))
            launch(named, stream())
        out[sp] = graph_us(one, R)
    same = {sp: all(torch.equal(a, b) for a, b in zip(bits[sp], bits[str(SPLIT)])) for sp in splits}
    return out, same, fla_core_us(kd, T, R)


def mla_step_scratch(T, L, R=4, default_attn=False):
    """One full-dims MLA step run once at batch T over L cache rows each: (its scratch, every
    buffer by kernel argument name, the cache, the lengths), the inputs of any one launch.
    default_attn: the step's own attention (its splits, its partials), else mma.sync's."""
    from dataclasses import replace

    from megakernel import config
    from megakernel.mla import MlaStep
    from megakernel.tools.bench_mla import draw_weights
    md = MLA_FULL
    # the step on the mma.sync attention: its splits of 256 give the larger split count, which
    # every attention kernel takes (the wgmma one writes the splits past its own empty)
    base = config.current()
    step = MlaStep(md, draw_weights(md), DEV, settings=base if default_attn else
                   replace(base, attn=replace(base.attn, mla_wg=False)))
    kv = torch.randn(T, L + R + 1, md.C, device=DEV).to(torch.bfloat16)
    x = torch.randn(T, md.d, device=DEV).to(torch.bfloat16)
    lens = torch.full((T,), L, dtype=torch.int64, device=DEV)
    s = step.launch(x, kv, lens, max_len=L + R)                 # every launch once: the inputs
    named = dict(s, **step._weights, x=x, kv_cache=kv, T=T, Lcap=kv.shape[1], NS=s["pm"].shape[2])
    return s, named, kv, lens


def mla_variant_rows(T, L, name, variants, ref, outputs, R=4, default_attn=False):
    """us of MLA kernel `name` in each variant (dicts) on one step's scratch at batch T with L
    cache rows, and whether its `outputs` equal those of variant `ref` bit for bit."""
    from megakernel.tools.bench_kda import graph_us
    md = MLA_FULL
    s, named, _, _ = mla_step_scratch(T, L, R, default_attn)
    out, bits = {}, {}
    for v in [ref] + [v for v in variants if v != ref]:
        key = tuple(v.values())
        launch = cache.compiled(name, md, **v)
        launch(named, stream())
        torch.cuda.synchronize()
        bits[key] = tuple(s[k].clone() for k in outputs)
        out[key] = graph_us(lambda i, launch=launch: launch(named, stream()), R)
    r = tuple(ref.values())
    same = {k: all(torch.equal(a, b) for a, b in zip(bits[k], bits[r])) for k in bits}
    return out, same


def mla_rows(T, L, hgs):
    from megakernel.k_mla_attn import HG
    out, same = mla_variant_rows(T, L, "mla_attn", [dict(hg=hg) for hg in hgs], dict(hg=HG),
                                 ("pm", "pl", "pa"))
    return {k[0]: u for k, u in out.items()}, {k[0]: e for k, e in same.items()}


def merge_rows(T, L, variants):
    return mla_variant_rows(T, L, "mla_merge", [dict(TT=t, VQ=q) for t, q in variants],
                            dict(TT=variants[0][0], VQ=variants[0][1]), ("lat", "o", "gated"))


def lat_merge(code):
    """A --lat-merges entry -> the mla_merge variant: vNxU (module docstring)."""
    if code[0] != "v":
        raise ValueError(code)
    n, u = (int(v) for v in code[1:].split("x"))
    return dict(value=False, vec=n, unroll=u)


def lat_merge_rows(T, L, codes):
    vs = [lat_merge(c) for c in codes]
    out, same = mla_variant_rows(T, L, "mla_merge", vs, vs[0], ("lat",), default_attn=True)
    key = {c: tuple(v.values()) for c, v in zip(codes, vs)}
    return {c: out[key[c]] for c in codes}, {c: same[key[c]] for c in codes}


def table(title, rows, measure, variants, label) -> bool:
    """One block of rows (batch x cache length): each variant's us and whether its bits equal
    the yardstick's; the title only when there are rows. Returns: every variant's bits equal."""
    ok = True
    if rows:
        print(title)
    for T, L in rows:
        us, same = measure(T, L, variants)
        ok &= all(same.values())
        print(f"  T={T:3d} L={L:6d} " + " ".join(f"{label(v)}: {us[v]:8.1f} {'y' if same[v] else 'n'}"
                                                 for v in variants), flush=True)
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.tune_attn", description=__doc__.splitlines()[0])
    p.add_argument("--splits", default="4,8,16", help="kda_core CTAs per (token, head); wS: the "
                   "one-warp experiment at split S")
    p.add_argument("--hgs", default="4,8", help="mla_attn heads per CTA")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--mla", default="1x32768,8x8192,64x1024", help="batch x cache length")
    p.add_argument("--merges", default="1x1,1x4,2x4,4x4,8x4,2x1,4x1,8x1",
                   help="mla_merge variants, TTxVQ (the first is the bits' yardstick)")
    p.add_argument("--merge-rows", default="1x1024,1x32768,8x1024,8x32768,64x1024,64x32768",
                   help="batch x cache length for mla_merge")
    p.add_argument("--lat-merges", default="v32x8,v64x8,v128x4",
                   help="the tensor-core path's mla_merge variants, vNxU (the first is the bits' "
                        "yardstick); '' for none")
    p.add_argument("--lat-rows", default="1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768",
                   help="batch x cache length for --lat-merges")
    a = p.parse_args(argv)
    if no_gpu("tune_attn"):
        return 2
    try:
        from megakernel.k_kda_core import SPLIT
        splits = [v for v in a.splits.split(",") if v]
        if str(SPLIT) not in splits:
            splits.insert(0, str(SPLIT))             # the bits' yardstick
        hgs = [int(v) for v in a.hgs.split(",") if v]
        merges = [tuple(int(v) for v in c.split("x")) for c in a.merges.split(",") if c]
        mrows = [tuple(int(v) for v in c.split("x")) for c in a.merge_rows.split(",") if c]
        assert all(len(c) == 2 for c in merges + mrows)
        for v in merges:
            registry.KERNELS["mla_merge"](MLA_FULL, TT=v[0], VQ=v[1])
        lats = [c for c in a.lat_merges.split(",") if c]
        lrows = [tuple(int(v) for v in c.split("x")) for c in a.lat_rows.split(",") if c]
        assert all(len(c) == 2 for c in lrows)
        for c in lats:
            registry.KERNELS["mla_merge"](MLA_FULL, **lat_merge(c))
        batches = [int(v) for v in a.batches.split(",") if v]
        mla = [tuple(int(v) for v in c.split("x")) for c in a.mla.split(",")]
        assert all(len(c) == 2 for c in mla)
        for sp in splits:
            name, split = core_kernel(sp)
            registry.KERNELS[name](KDA_FULL, split=split)
    except (ValueError, AssertionError):
        print("tune_attn: --splits / --hgs / --batches take integers (a split must give every warp "
              "whole state rows: 1, 2, 4, 8, 16 at D = 128; wS: S dividing D), --mla / "
              "--merge-rows pairs like 1x32768, --merges pairs TTxVQ with VQ dividing 32, "
              "--lat-merges vNxU", file=sys.stderr)
        return 2
    ok = True
    print("kda_core us (bits equal to the default split: y/n)" + " | FLA fused recurrent us")
    for T in batches:
        us, same, fla = kda_rows(T, splits)
        ok &= all(same.values())
        print(f"  T={T:3d} " + " ".join(f"split {sp}: {us[sp]:7.1f} {'y' if same[sp] else 'n'}"
                                      for sp in splits) + ("" if fla is None else f" | FLA {fla:.1f}"),
              flush=True)
    ok &= table("mla_attn us (bits equal to the default: y/n)", mla if hgs else [], mla_rows,
                hgs, lambda hg: f"hg {hg}")
    ok &= table(f"mla_merge us (bits equal to {'x'.join(map(str, merges[0])) if merges else ''}: y/n)",
                mrows if merges else [], merge_rows, merges, lambda v: f"{v[0]}x{v[1]}")
    ok &= table(f"mla_merge, lat only, us (bits equal to {lats[0] if lats else ''}: y/n)",
                lrows if lats else [], lat_merge_rows, lats, str)
    print("bits equal across every variant:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
