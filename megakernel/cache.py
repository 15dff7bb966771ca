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

BF, F32, I32, U8 = BFloat16, Float32, Int32, Uint8

TT_GEMV = 8     # tokens per pass over a weight row when T > 1 (T == 1 uses 1)
# K chunks per lane whose loads each GEMV issues together (device.dot_rows; 0 = the compiler's
# choice). 4 everywhere: on par with 0 at batch 1 and a little faster at batch 8 in
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


def mma_ok(dm):
    return dm.r % 128 == 0 and dm.I % 128 == 0


# name -> constructor(dims, **variant); each kernel class declares its arguments (ARGS,
# kernel_args.py)
KERNELS = {
    "gemv_x": lambda dm, TT, U=0: Gemv(dm.E + dm.r, dm.d, TT, False, U),
    "gemv_shared": lambda dm, TT, U=0: Gemv(2 * dm.Is, dm.d, TT, False, U),
    "out_shared": lambda dm, TT, U=0: Gemv(dm.d, dm.Is, TT, True, U),
    "out_routed": lambda dm, TT, U=0: Gemv(dm.d, dm.r, TT, True, U),
    "final_sum": lambda dm: FinalSum(dm),
    "shared_act": lambda dm: SharedAct(dm),
    "route": lambda dm, forced: Route(dm, forced),
    "schedule": lambda dm: Schedule(dm),
    "expert_up": lambda dm, fmt, TT: ExpertUp(dm, fmt, TT),
    "expert_down": lambda dm, fmt, TT: ExpertDown(dm, fmt, TT),
    "expert_up_mma": lambda dm, U, WPC, PF=0, S=0: ExpertMMA(dm, True, U, WPC, PF=PF, S=S),
    "expert_down_mma": lambda dm, U, WPC, MT, PF=0, S=0: ExpertMMA(dm, False, U, WPC, MT, PF, S),
    "combine": lambda dm: Combine(dm),
    "gemv_route": lambda dm, forced, U: GemvRoute(dm, forced, U),
    "persistent": lambda dm, fmt, forced, T1, trace=False: persistent_step(dm, fmt, forced, T1,
                                                                            trace),
    # KDA (kda.py; `dm` is then a dims.KdaDims): in-projection, f_b over the f_a columns, the
    # conv, the core, the gated norm, o_proj
    "kda_in": lambda kd, TT, U=0: Gemv(kd.N, kd.d, TT, True, U),
    "kda_fb": lambda kd, TT, U=0: Gemv(kd.P, kd.D, TT, True, U, ldx=kd.N),
    "kda_conv": lambda kd: KdaConv(kd),
    "kda_core": lambda kd: KdaCore(kd),
    "kda_norm": lambda kd: KdaNorm(kd),
    "kda_out": lambda kd, TT, U=0: Gemv(kd.d, kd.P, TT, True, U),
}
KDA_GEMVS = ("kda_in", "kda_fb", "kda_out")


def persistent_step(dm, fmt, forced, T1, trace=False):
    """The PersistentStep object (not compiled) for these dims / format / batch class."""
    mma = fmt == "mxfp4" and MX_MMA and mma_ok(dm)
    return PersistentStep(dm, fmt, forced, 1 if T1 else TT_GEMV, 1 if T1 else TT_EXPERT,
                          PERSIST_UNROLL, PERSIST_UP if mma else None,
                          PERSIST_DOWN if mma else None, trace, PERSIST_CTAS)


def variants():
    """Every (name, variant) the launch sequence can use."""
    out = [(g, dict(TT=TT, U=GEMV_UNROLL[g])) for g in GEMV_UNROLL for TT in (1, TT_GEMV)]
    out += [("route", dict(forced=False)), ("route", dict(forced=True)), ("schedule", {}),
            ("combine", {}), ("shared_act", {}), ("final_sum", {})]
    for fmt in ("bf16", "mxfp4"):
        for TT in (1, TT_EXPERT):
            out += [("expert_up", dict(fmt=fmt, TT=TT)), ("expert_down", dict(fmt=fmt, TT=TT))]
    out += [("expert_up_mma", dict(MMA_UP)), ("expert_down_mma", dict(MMA_DOWN)),
            ("expert_up_mma", dict(ALT_UP)), ("expert_down_mma", dict(ALT_DOWN))]
    out += [("gemv_route", dict(forced=f, U=GEMV_UNROLL["gemv_x"])) for f in (False, True)]
    out += [("persistent", dict(fmt=fmt, forced=forced, T1=T1)) for fmt in ("bf16", "mxfp4")
            for T1 in (True, False) for forced in (False, True)]
    return out


def kda_variants():
    """Every (name, variant) of the KDA step (compiled for a dims.KdaDims)."""
    return [(g, dict(TT=TT, U=GEMV_UNROLL["gemv_x"])) for g in KDA_GEMVS for TT in (1, TT_GEMV)] + \
        [("kda_conv", {}), ("kda_core", {}), ("kda_norm", {})]


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
