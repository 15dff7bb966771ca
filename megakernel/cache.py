"""Compile caching, in one place: every kernel and its variants (each kernel class declares its
arguments: kernel_args.py).

Kernels take raw global pointers (16-byte aligned) and the batch T as a run-time Int32; every model
dimension is a compile-time constant of the Dims the kernel set is built for. `compile_kernel`
needs no GPU (a placeholder address and a fake stream), so the same code builds every kernel on a
CPU-only machine (`python -m megakernel compile`). Compiled functions are kept per process in
_CACHE; `cute.compile` is not thread-safe, so callers compile from one thread.

A disk cache (kernel_store.py) keeps every compiled kernel as an exported object file, so a new
process (an isolated k3diff child, an xdist worker, the next nightly run) loads in milliseconds
what it would otherwise compile again (0.1-3 s a kernel, ~10 s per new set of dims).
"""
import ast
import contextlib
import os
import time

from megakernel.cute_env import import_cutlass

import_cutlass()
import cutlass.cute as cute  # noqa: E402
from cutlass import BFloat16, Float32, Int32, Int64, Uint8  # noqa: E402
from cutlass.cute.runtime import make_ptr, make_fake_stream  # noqa: E402

from megakernel.device import GMEM  # noqa: E402
from megakernel import kernel_store  # noqa: E402
from megakernel import fast_call  # noqa: E402
from megakernel.kernel_args import INT, call_values, dtypes, placeholders  # noqa: E402
from megakernel.k_gemv import Gemv  # noqa: E402
from megakernel.k_gemv_mma import GemvMMA  # noqa: E402
from megakernel.k_route import Route  # noqa: E402
from megakernel.k_schedule import Schedule  # noqa: E402
from megakernel.k_expert import ExpertUp, ExpertDown  # noqa: E402
from megakernel.k_expert_mma import ExpertMMA  # noqa: E402
from megakernel.k_combine import Combine  # noqa: E402
from megakernel.k_shared_act import SharedAct  # noqa: E402
from megakernel.k_final_sum import FinalSum  # noqa: E402
from megakernel.k_persistent import PersistentStep  # noqa: E402
from megakernel.k_gemv_route import GemvRoute  # noqa: E402
from megakernel.k_kda_conv import KdaConv  # noqa: E402
from megakernel.k_kda_core import KdaCore  # noqa: E402
from megakernel.k_kda_norm import KdaNorm  # noqa: E402
from megakernel.k_mla_norm import MlaNorm  # noqa: E402
from megakernel.k_mla_absorb import MlaAbsorb  # noqa: E402
from megakernel.k_mla_attn import MlaAttn  # noqa: E402
from megakernel.k_mla_attn_mma import MlaAttnMMA  # noqa: E402
from megakernel.k_attn_res import AttnRes  # noqa: E402
from megakernel.k_mla_merge import MlaMerge  # noqa: E402
from megakernel.k_l2_prefetch import L2Prefetch  # noqa: E402
from megakernel.side_stream import PF_VARIANT  # noqa: E402

BF, F32, I32, U8 = BFloat16, Float32, Int32, Uint8

# The GEMVs (the MoE's four, KDA's three, MLA's three). Those named in GEMV_MMA run the tensor-core kernel of
# k_gemv_mma.py at every batch, each weight row streamed once per pass of up to GEMV_PASS tokens,
# with the variant `python -m megakernel.tools.tune_gemv` chose per GEMV on the H200 (NOTES.md).
# Its K split count KS decides the bits, so each GEMV has one KS for every batch (batch
# invariance); the other knobs are per batch class: T <= 8 (one token tile) and T > 8 (NTT = 8
# tiles per pass). The others run the CUDA-core kernel of k_gemv.py: one warp per row, token tiles
# of 1 (T == 1) or TT_GEMV, the row re-read per tile. One kernel per GEMV for every batch (never
# one per batch size: the bits differ, batch invariance would break). MK_GEMV_MMA overrides the
# set: "0" none, "1" all, or a comma-separated list of names (`python -m megakernel.tools.gemv_choice`).
ALL_GEMVS = ("gemv_x", "gemv_shared", "out_shared", "out_routed", "kda_x", "kda_in", "kda_g",
             "kda_fb", "kda_out", "mla_x", "mla_a", "mla_g", "mla_qb", "mla_out")
# The default: all of them. Alone (`python -m megakernel.tools.tune_gemv`, H200, NOTES.md) the
# tensor-core kernel is 7-11x faster at batch 64 and 2-28% slower at batch 1 (its work comes in
# tiles of 16 rows, the CUDA-core one's in single rows; PIPE = 1, the next blocks' weight loads
# issued under the current blocks' mma, closed most of that gap on the MoE's GEMVs). Whole MoE
# steps, fork-join, against the same step with every GEMV on the CUDA cores (`bench`'s
# "other-GEMV us", one run, 2026-12-01 fourth session): bf16 1.06x / 1.13x faster at batch 8 /
# 64 and 0.97x at batch 1; MXFP4 1.16x / 1.41x and 0.89x at batch 1 (a step that measured +-10%
# between runs before). KDA's step: 1.9x / 6.3x at batch 8 / 64, 0.91x at 1 (`bench_kda`).
# MK_GEMV_MMA=kda_x,kda_in,kda_g,kda_fb,kda_out,mla_x,mla_a,mla_g,mla_qb,mla_out keeps the MoE's
# on the CUDA cores.
DEFAULT_MMA = ALL_GEMVS


@contextlib.contextmanager
def other_gemv_kernel(names):
    """For the benches' side-by-side columns: within the block every GEMV runs on the kernel that
    `names` do not use now (all on the CUDA cores if any of them is on the tensor cores, else all
    on the tensor cores). Yields whether they were on the tensor cores."""
    global GEMV_MMA
    mma_now = any(g in GEMV_MMA for g in names)
    was, GEMV_MMA = GEMV_MMA, (() if mma_now else ALL_GEMVS)
    try:
        yield mma_now
    finally:
        GEMV_MMA = was


def _mma_set(v):
    if v in (None, ""):
        return DEFAULT_MMA
    if v in ("0", "1"):
        return ALL_GEMVS if v == "1" else ()
    names = tuple(n for n in ALL_GEMVS if n in v.split(","))
    if len(names) != len([n for n in v.split(",") if n]):
        raise ValueError(f"MK_GEMV_MMA: names among {', '.join(ALL_GEMVS)}, or 0 / 1; got {v!r}")
    return names


GEMV_MMA = _mma_set(os.environ.get("MK_GEMV_MMA"))
GEMV_PASS = 64
_SMALL_T = dict(NTT=1, MT=1, PF=0)
_PIPED = dict(_SMALL_T, PIPE=1)   # batch <= 8: double-buffered weight loads (same bits; at batch
                                  # 64 PIPE = 1 was 1.1-2.6x slower in tune_gemv, so not there)
_LARGE_T = dict(NTT=GEMV_PASS // 8, PF=0)
# the attention steps' x-side projections (kda_x, mla_x) and their rows launched apart (kda_in /
# kda_g, mla_a / mla_g: side_stream.py): one variant, so one K split, so the same bits in both
# stream modes
_X_SIDE = (dict(_SMALL_T, KS=4, U=2, RT=1), dict(_LARGE_T, KS=4, U=2, RT=2, MT=1))
MMA_GEMV = {   # name -> (variant at T <= 8, variant at T > 8)
    # the MoE's: tune_gemv --PIPE 0,1 (fourth session; us at T = 1 / 64 in the comment above)
    "gemv_x": (dict(_PIPED, KS=4, U=2, RT=1), dict(_LARGE_T, KS=4, U=2, RT=1, MT=1)),
    "gemv_shared": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "out_shared": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "out_routed": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "kda_x": _X_SIDE, "kda_in": _X_SIDE, "kda_g": _X_SIDE,
    "kda_fb": (dict(_SMALL_T, KS=2, U=1, RT=2), dict(_LARGE_T, KS=2, U=1, RT=2, MT=1)),
    "kda_out": (dict(_SMALL_T, KS=4, U=2, RT=2), dict(_LARGE_T, KS=4, U=2, RT=2, MT=1)),
    # MLA's: tune_gemv --PIPE 0,1 (fourth session): us at T = 1 / 64, CUDA-core kernel in
    # brackets: mla_a 50.4 / 108.9 (48.1 / 962.7), mla_qb 19.4 / 38.0 (15.1 / 296.7), mla_out
    # 46.3 / 89.4 (45.2 / 1008.1)
    "mla_x": _X_SIDE, "mla_a": _X_SIDE, "mla_g": _X_SIDE,
    "mla_qb": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "mla_out": (dict(_SMALL_T, KS=4, U=2, RT=1), dict(_LARGE_T, KS=4, U=2, RT=2, MT=1)),
}
TT_GEMV = 8     # the CUDA-core GEMV: tokens per pass over a weight row when T > 1
# K chunks per lane whose loads each CUDA-core GEMV issues together (device.dot_rows; 0 = the
# compiler's choice). 4 everywhere: on par with 0 at batch 1 and a little faster at batch 8 in
# `python -m megakernel.tools.tune_streams` (NOTES.md); every choice gives the same bits.
GEMV_UNROLL = dict(gemv_x=4, out_routed=4, gemv_shared=4, out_shared=4)
TT_EXPERT = 4

# MXFP4 experts: True -> the tensor-core kernels of k_expert_mma.py (nibbles decoded into mma.sync
# A fragments, pairs as N = 8); False -> the CUDA-core kernels of k_expert.py (the v2 path).
# The mma path needs r % 128 == 0 and I % 128 == 0 (else the CUDA-core path is used).
MX_MMA = True
# U: K blocks of 128 whose loads are issued together; WPC: warps per CTA; MT: 16-row tiles per
# warp (down); PF: L2 prefetch bytes on the weight loads (0 = none); S: stages of a per-warp
# cp.async shared-memory ring (0 = loads into registers). Chosen from `python -m
# megakernel.tools.tune_mma` on the H200 (see NOTES.md): every variant gives bitwise the same
# result.
# MK_MMA_UP / MK_MMA_DOWN (a dict literal) override the defaults, for tuning runs.


def _env_variant(name, default):
    v = os.environ.get(name)
    return dict(ast.literal_eval(v)) if v else default


# Defaults (H200, tune_mma, full dims): up = 3-stage cp.async ring (T=1 58.9 us vs 85.0 us with
# register loads), down = register loads (29.7 us vs 37.5 us with a 4-stage ring).
MMA_UP = _env_variant("MK_MMA_UP", dict(U=1, WPC=4, PF=128, S=3))
MMA_DOWN = _env_variant("MK_MMA_DOWN", dict(U=2, WPC=4, MT=1, PF=128))
ALT_UP = dict(U=2, WPC=4, PF=128)                  # the other load scheme of each, compiled too
ALT_DOWN = dict(U=1, WPC=4, MT=1, PF=128, S=4)


# The persistent launch runs every stage on CTAs of 256 threads: 8 warps per expert task. Its up
# ring (8 warps x 3 stages x 2.5 KB = 60 KB) is the largest shared-memory user of its stages.
# MK_PERSIST_CTAS=4 (tuning runs) builds it for 4 CTAs per SM instead: registers capped at 64 and
# a 2-stage ring, so that 4 x 256 threads and 4 x ~44 KB fit an SM.
PERSIST_CTAS = int(os.environ.get("MK_PERSIST_CTAS", 3))
PERSIST_UP = dict(U=1, WPC=8, PF=128, S=3 if PERSIST_CTAS <= 3 else 2)
PERSIST_DOWN = dict(U=2, WPC=8, MT=1, PF=128)
# GEMV unroll inside the persistent launch (its CTAs are fewer per SM: 3 by registers, against up
# to 8 for the standalone GEMVs, so each warp keeps more loads in flight). MK_PERSIST_UNROLL (an
# int) overrides, for tuning runs; every value gives the same bits.
PERSIST_UNROLL = {g: int(os.environ.get("MK_PERSIST_UNROLL", 8)) for g in GEMV_UNROLL}
# Knobs laid over the tensor-core GEMVs' variants inside the persistent launch (MK_PERSIST_MMA_GEMV,
# a dict literal, e.g. "{'PIPE': 0}"), for tuning runs (tools/persistent_regs.py: at T = 1 the
# double-buffered PIPE = 1 GEMV tasks spill at the launch's 80 registers). Never KS: it decides
# the bits; PIPE, U and RT do not.
PERSIST_MMA_GEMV = _env_variant("MK_PERSIST_MMA_GEMV", {})
assert "KS" not in PERSIST_MMA_GEMV, "MK_PERSIST_MMA_GEMV must not change KS (the bits)"


def mma_ok(dm):
    return dm.r % 128 == 0 and dm.I % 128 == 0


def gemv_variant(name, T, threads=0, mma=None):
    """The variant of GEMV `name` at batch T. threads: a fixed CTA size (the persistent launch,
    the fused route: 256; the tensor-core kernel's row tiles per CTA then fill it); mma: the
    names on the tensor cores (None: GEMV_MMA)."""
    if name not in (GEMV_MMA if mma is None else mma):
        return dict(TT=1 if T == 1 else TT_GEMV, U=GEMV_UNROLL.get(name, GEMV_UNROLL["gemv_x"]))
    v = dict(MMA_GEMV[name][T > 8])
    if threads:
        v["threads"] = threads
    return v


def _gemv(N, K, out_bf16, ldx=0, ldy=0, coherent=False, TT=None, U=0, **mma):
    """A GEMV object from a variant (gemv_variant): CUDA-core when it names TT, else tensor-core.
    `coherent` (the tensor-core kernel): X is written by the same launch."""
    if TT is not None:
        return Gemv(N, K, TT, out_bf16, U, ldx, ldy)
    return GemvMMA(N, K, out_bf16=out_bf16, U=U, ldx=ldx, ldy=ldy, coherent=coherent, **mma)


# name -> (N, K, out_bf16, ldx[, ldy]) of the dims (Dims, KdaDims or MlaDims); ldy: the GEMV
# writes a column slice of a wider buffer (the attention steps' x-side projections: kda.py, mla.py)
GEMVS = {
    "gemv_x": lambda dm: (dm.E + dm.r, dm.d, False, 0),
    "gemv_shared": lambda dm: (2 * dm.Is, dm.d, False, 0),
    "out_shared": lambda dm: (dm.d, dm.Is, True, 0),
    "out_routed": lambda dm: (dm.d, dm.r, True, 0),
    "kda_x": lambda kd: (kd.N, kd.d, True, 0),             # all of z
    "kda_in": lambda kd: (kd.NM, kd.d, True, 0, kd.N),     # z[:, :NM]
    "kda_g": lambda kd: (kd.P, kd.d, True, 0, kd.N),       # z[:, G0:]
    "kda_fb": lambda kd: (kd.P, kd.D, True, kd.N),     # over f_a, a column slice of kda_in's out
    "kda_out": lambda kd: (kd.d, kd.P, True, 0),
    "mla_x": lambda md: (md.NA, md.d, True, 0),                 # all of z
    "mla_a": lambda md: (md.G0, md.d, True, 0, md.NA),          # z[:, :G0]
    "mla_g": lambda md: (md.H * md.V, md.d, True, 0, md.NA),    # z[:, G0:]
    "mla_qb": lambda md: (md.H * (md.NP + md.RP), md.QL, True, 0),
    "mla_out": lambda md: (md.d, md.H * md.V, True, 0),
}


def gemv_obj(name, dm, coherent=False, **variant):
    return _gemv(*GEMVS[name](dm), coherent=coherent, **variant)


# name -> constructor(dims, **variant); each kernel class declares its arguments (ARGS,
# kernel_args.py)
KERNELS = {
    "gemv_x": lambda dm, **v: gemv_obj("gemv_x", dm, **v),
    "gemv_shared": lambda dm, **v: gemv_obj("gemv_shared", dm, **v),
    "out_shared": lambda dm, **v: gemv_obj("out_shared", dm, **v),
    "out_routed": lambda dm, **v: gemv_obj("out_routed", dm, **v),
    "final_sum": lambda dm: FinalSum(dm),
    "shared_act": lambda dm: SharedAct(dm),
    "route": lambda dm, forced: Route(dm, forced),
    "schedule": lambda dm: Schedule(dm),
    "expert_up": lambda dm, fmt, TT: ExpertUp(dm, fmt, TT),
    "expert_down": lambda dm, fmt, TT: ExpertDown(dm, fmt, TT),
    "expert_up_mma": lambda dm, U, WPC, PF=0, S=0: ExpertMMA(dm, True, U, WPC, PF=PF, S=S),
    "expert_down_mma": lambda dm, U, WPC, MT, PF=0, S=0: ExpertMMA(dm, False, U, WPC, MT, PF, S),
    "combine": lambda dm: Combine(dm),
    "gemv_route": lambda dm, forced, **v: GemvRoute(dm, forced, gemv_obj("gemv_x", dm, **v)),
    "persistent": lambda dm, fmt, forced, T1, trace=False, gemv_mma=(), peek=False, only=(): (
        persistent_step(dm, fmt, forced, T1, trace, gemv_mma, peek, only)),
    # KDA (kda.py; `dm` is then a dims.KdaDims): in-projection, f_b over the f_a columns, the
    # conv, the core, the gated norm, o_proj
    "kda_x": lambda kd, **v: gemv_obj("kda_x", kd, **v),
    "kda_in": lambda kd, **v: gemv_obj("kda_in", kd, **v),
    "kda_g": lambda kd, **v: gemv_obj("kda_g", kd, **v),
    "kda_fb": lambda kd, **v: gemv_obj("kda_fb", kd, **v),
    "kda_conv": lambda kd: KdaConv(kd),
    "kda_core": lambda kd, **v: KdaCore(kd, **v),
    "kda_norm": lambda kd: KdaNorm(kd),
    "kda_out": lambda kd, **v: gemv_obj("kda_out", kd, **v),
    # MLA (mla.py; `dm` is then a dims.MlaDims)
    "mla_x": lambda md, **v: gemv_obj("mla_x", md, **v),
    "mla_a": lambda md, **v: gemv_obj("mla_a", md, **v),
    "mla_g": lambda md, **v: gemv_obj("mla_g", md, **v),
    "mla_norm": lambda md: MlaNorm(md),
    "mla_qb": lambda md, **v: gemv_obj("mla_qb", md, **v),
    "mla_absorb": lambda md, TT: MlaAbsorb(md, TT),
    "mla_attn": lambda md, **v: MlaAttn(md, **v),
    "mla_attn_mma": lambda md, **v: MlaAttnMMA(md, **v),
    "attn_res": lambda dm: AttnRes(dm),
    "mla_merge": lambda md, **v: MlaMerge(md, **v),
    "mla_out": lambda md, **v: gemv_obj("mla_out", md, **v),
    # a later launch's weights into L2 (the attention steps' prefetch stages, side_stream.py)
    "l2_prefetch": lambda dm, **v: L2Prefetch(dm, **v),
    # a GEMV of any shape (N, K, out_bf16, ldx) from a variant (tools/tune_gemv.py)
    "gemv": lambda shape, **v: _gemv(*shape, **v),
}
KDA_GEMVS = ("kda_x", "kda_in", "kda_g", "kda_fb", "kda_out")
MLA_GEMVS = ("mla_x", "mla_a", "mla_g", "mla_qb", "mla_out")


def persistent_step(dm, fmt, forced, T1, trace=False, gemv_mma=None, peek=False, only=()):
    """The PersistentStep object (not compiled) for these dims / format / batch class; gemv_mma:
    the names of its GEMVs on the tensor cores (None: GEMV_MMA's; part of the compile key, so
    that a process can hold several)."""
    mma = fmt == "mxfp4" and MX_MMA and mma_ok(dm)
    T = 1 if T1 else TT_GEMV + 1          # a batch of the class
    gemvs = {}
    for g in GEMV_UNROLL:
        v = gemv_variant(g, T, threads=256, mma=gemv_mma)
        if "TT" in v:
            v["U"] = PERSIST_UNROLL[g]
        else:
            v.update(PERSIST_MMA_GEMV)
        # out_routed and out_shared read what the same launch wrote (yn, act_s)
        gemvs[g] = gemv_obj(g, dm, coherent=g.startswith("out_") and "TT" not in v, **v)
    return PersistentStep(dm, fmt, forced, gemvs, 1 if T1 else TT_EXPERT,
                          PERSIST_UP if mma else None, PERSIST_DOWN if mma else None, trace,
                          PERSIST_CTAS, peek, only)


def moe_mma(gemv_mma=None):
    """The MoE's GEMVs among `gemv_mma` (None: GEMV_MMA), as the persistent launch's key."""
    return tuple(g for g in GEMV_UNROLL if g in (GEMV_MMA if gemv_mma is None else gemv_mma))


def variants(gemv_mma=None):
    """Every (name, variant) the launch sequence can use (gemv_mma: the GEMVs on the tensor
    cores; None: GEMV_MMA)."""
    m = moe_mma(gemv_mma)
    out = [(g, gemv_variant(g, T, mma=m)) for g in GEMV_UNROLL for T in (1, TT_GEMV + 1)]
    out += [("route", dict(forced=False)), ("route", dict(forced=True)), ("schedule", {}),
            ("combine", {}), ("shared_act", {}), ("final_sum", {})]
    for fmt in ("bf16", "mxfp4"):
        for TT in (1, TT_EXPERT):
            out += [("expert_up", dict(fmt=fmt, TT=TT)), ("expert_down", dict(fmt=fmt, TT=TT))]
    out += [("expert_up_mma", dict(MMA_UP)), ("expert_down_mma", dict(MMA_DOWN)),
            ("expert_up_mma", dict(ALT_UP)), ("expert_down_mma", dict(ALT_DOWN))]
    out += [("gemv_route", dict(gemv_variant("gemv_x", 1, threads=256, mma=m), forced=f))
            for f in (False, True)]
    out += [("persistent", dict(fmt=fmt, forced=forced, T1=T1, gemv_mma=m))
            for fmt in ("bf16", "mxfp4")
            for T1 in (True, False) for forced in (False, True)]
    out += [("l2_prefetch", dict(PF_VARIANT))]          # W_up beside expert_down (prefetch_up)
    # the scheduler that takes only ready tickets (plan.Order(peek=1)): one batch class
    out += [("persistent", dict(fmt=fmt, forced=False, T1=False, gemv_mma=m, peek=True))
            for fmt in ("bf16", "mxfp4")]
    return out


def kda_core_variant(T):
    """kda_core's CTAs per (token, head) at batch T (k_kda_core.py: the bits do not depend on
    it). `python -m megakernel.tools.tune_attn` (H200, 2026-12-01 fourth session; bits equal
    across splits), us at T = 1 / 8 / 64: split 4 8.0 / 32.0 / 223.8, split 8 7.5 / 32.4 / 236.9,
    split 16 7.6 / 32.9 / 244.1; FLA's fused recurrent KDA 8.0 / 33.3 / 225.6."""
    return dict(split=8 if T == 1 else 4)


def kda_variants(gemv_mma=None):
    """Every (name, variant) of the KDA step (compiled for a dims.KdaDims)."""
    return [(g, gemv_variant(g, T, mma=gemv_mma)) for g in KDA_GEMVS for T in (1, TT_GEMV + 1)] + \
        [("kda_conv", {}), ("kda_core", kda_core_variant(1)), ("kda_core", kda_core_variant(2)),
         ("kda_norm", {}), ("l2_prefetch", dict(PF_VARIANT))]


def mla_variants(gemv_mma=None):
    """Every (name, variant) of the MLA step (compiled for a dims.MlaDims)."""
    return [(g, gemv_variant(g, T, mma=gemv_mma)) for g in MLA_GEMVS for T in (1, TT_GEMV + 1)] + \
        [("mla_absorb", dict(TT=1)), ("mla_absorb", dict(TT=TT_GEMV)), ("mla_norm", {}),
         ("mla_attn", {}), ("mla_attn_mma", {})] + \
        [("mla_merge", mla_merge_variant(T)) for T in (1, 2)] + [("l2_prefetch", dict(PF_VARIANT))]


def mla_merge_variant(T):
    """mla_merge's tile of tokens and slices of a head's output columns at batch T
    (k_mla_merge.py: the bits depend on neither). `python -m megakernel.tools.tune_attn` (H200,
    fifth session), us at 1k / 32k cache rows, TTxVQ: batch 1: 1x1 16.4 / 44.7, 1x4 9.1 / 34.4,
    2x4 11.3 / 40.6, 8x1 55.1 / 111.3; batch 8: 1x1 24.1 / 77.8, 1x4 38.6 / 148.1, 2x1 34.8 /
    108.8; batch 64: 1x1 159.7 / 504.9, 2x1 173.4 / 529.8, 8x1 316.0 / 734.3. Merging the splits
    is the cost, and a token tile merges its tokens' splits in one CTA, so tiles never paid;
    slices pay only while the heads alone leave SMs idle."""
    return dict(TT=1, VQ=4 if T == 1 else 1)


def layer_variants():
    """Every (name, variant) of the layer's own kernels (compiled for a dims.Dims; the rest of
    the layer is the MoE's, KDA's and MLA's)."""
    return [("attn_res", {})]


# MLA's attention on the tensor cores (k_mla_attn_mma.py) unless MK_MLA_MMA=0 (the CUDA-core
# k_mla_attn.py). The two kernels round differently, so one of them serves every batch. First run
# on the H200 (2026-12-01, fifth session): every GPU test and ci case passed, and the step was
# 1.05-3.3x faster with it (bench_mla; NOTES.md).
MLA_MMA = os.environ.get("MK_MLA_MMA") != "0"


@contextlib.contextmanager
def other_mla_attention():
    """Within the block MLA's attention runs on the other kernel (k_mla_attn.py /
    k_mla_attn_mma.py). Yields whether the tensor-core one was selected before."""
    global MLA_MMA
    was = MLA_MMA
    MLA_MMA = not was
    try:
        yield was
    finally:
        MLA_MMA = was


def mla_attn_kernel(md):
    """The name of the attention kernel the MLA step launches for these dims."""
    ok = (md.R + md.RP) % 64 == 0 and md.R % 64 == 0
    return "mla_attn_mma" if MLA_MMA and ok else "mla_attn"


_CACHE = {}
COMPILE_SECONDS = {}       # key -> seconds, for kernels compiled by this process
LOADED = {}                # key -> seconds, for kernels loaded from the disk cache


def ptr(dtype, addr):
    return make_ptr(dtype, addr, GMEM, assumed_align=16)


class Launch:
    """A compiled kernel with its object: `launch(named, stream, bind)` passes the arguments its
    class declares (ARGS) by name from `named` (kernel_args.call_values); `stream` is a handle
    (int) or a CUstream. After the first call through CuTe DSL, calls go through a checked
    FastCall (fast_call.py) when it can be built."""

    def __init__(self, fn, obj, module=None):
        self.fn, self.obj = fn, obj
        self.module = module      # a loaded object file: must live as long as fn
        self.args = dtypes(obj)
        self.fast = None
        self._tried = not fast_call.enabled()

    def __call__(self, named, stream, bind=None):
        values = call_values(self.args, named, bind)
        if self.fast is not None:
            self.fast(values, int(stream))
            return
        args = [v if t == INT else ptr(t, v) for v, (_, t) in zip(values, self.args)]
        cs = fast_call.cu_stream(stream)
        self.fn(*args, cs)
        if not self._tried:
            self._tried = True
            kinds = ["int" if t == INT else "ptr" for _, t in self.args]
            self.fast = fast_call.FastCall.attach(self.fn, kinds, values, args, cs)


def compiled(name, dims, fresh=False, **variant):
    """The Launch of kernel `name`: from this process's cache, else the disk cache, else compiled
    (and then stored on disk). fresh=True compiles even when the disk holds it."""
    key = (name, dims, tuple(sorted(variant.items())))
    hit = _CACHE.get(key)
    if hit is None:
        obj = KERNELS[name](dims, **variant)
        t0 = time.time()
        stored = None if fresh else kernel_store.load(key)
        if stored is not None:
            LOADED[key] = time.time() - t0
            hit = Launch(stored[0], obj, stored[1])
        else:
            fn = cute.compile(obj, *placeholders(obj, ptr), make_fake_stream())
            COMPILE_SECONDS[key] = time.time() - t0
            kernel_store.store(key, fn)
            hit = Launch(fn, obj)
        _CACHE[key] = hit
    return hit


def compile_kernel(name, dims, fresh=False, **variant):
    """The compiled function of kernel `name` (positional arguments: its ARGS, then a stream)."""
    return compiled(name, dims, fresh, **variant).fn
