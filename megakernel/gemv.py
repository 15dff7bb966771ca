"""The GEMVs of the three steps (the MoE's four, KDA's five, MLA's five): each one's shape, the
measured choice of kernel and variant per GEMV and batch class, and its kernel object.

Two kernels: k_gemv_mma.py on the tensor cores (each weight row streamed once per pass of up to
GEMV_PASS tokens) for the GEMVs in Settings.gemv.mma (all of them by default), k_gemv.py on the
CUDA cores (one warp per row, token tiles of 1 or TT_GEMV, the row re-read per tile) for the
others. The tensor-core variant's K split KS decides the bits, so each GEMV has one KS for every
batch (batch invariance); its other knobs are per batch class: T <= 8 (one token tile) and T > 8
(NTT = 8 tiles per pass). One kernel per GEMV for every batch, never one per batch size.
The table is `python -m megakernel.tools.tune_gemv`'s choice on the H200; the timings behind
it are in lab/gemv/ (the MoE's and MLA's GEMVs, --PIPE 0,1).
"""
from megakernel.config import KDA_GEMVS, MLA_GEMVS, MOE_GEMVS
from megakernel.k_gemv import Gemv
from megakernel.k_gemv_mma import GemvMMA, wgmma_arch

GEMV_PASS = 64
FULL_GRID = 1 << 30        # the `ctas` argument (a cap on a GEMV's grid) that no GEMV reaches
_SMALL_T = dict(NTT=1, MT=1, PF=0)
# batch <= 8: double-buffered weight loads (same bits; at batch 64 PIPE = 1 was slower)
_PIPED = dict(_SMALL_T, PIPE=1)
_LARGE_T = dict(NTT=GEMV_PASS // 8, PF=0)
# batch > 8 where wgmma runs (k_gemv_mma.wgmma_arch): laid over each GEMV's batch > 8 variant,
# 4 row warps per split so that they make a warpgroup (config.Gemv.wgmma; the same bits as the
# mma.sync variant under it, measured on every shape and split; 1.1-1.5x faster at batch 16, 32
# and 64: lab/gemv/)
WGMMA = dict(WG=1, RT=4)
# ... for the attention steps' GEMVs only. In the MoE's fork-join at batch 64 wgmma's larger CTAs
# beside the expert launches cost more than they gain: MXFP4 3855.7 against 3695.5 µs on
# mma.sync, bf16 10610.6 against 10657.4 (`megakernel bench`, side by side). The KDA step
# at batch 64 gained 1.24x and MLA's at 64 / 1k 1.17x in the same run.
WGMMA_GEMVS = KDA_GEMVS + MLA_GEMVS
# the attention steps' x-side projections (kda_x, mla_x) and their rows launched apart (kda_in /
# kda_g, mla_a / mla_g: side_stream.py): one K split, so the same bits in both stream modes
_X_SIDE = (dict(_SMALL_T, KS=4, U=2, RT=1), dict(_LARGE_T, KS=4, U=2, RT=2, MT=1))
# ... at batch <= 8 the narrow ones double-buffered, and the output projections one block in
# flight per buffer, each the fastest of its K split at batch 1 and 8 (the same bits:
# `tune_gemv --batches 1,8 --own-ks --U 1,2,4,8 --PIPE 0,1`, lab/gemv/): mla_a 12.5 against
# 19.5 us, mla_out 44.1 against 47.0, kda_out 44.1 against 45.7,
# kda_in 128.7 against 131.0 at batch 1
_X_PIPED = (dict(_PIPED, KS=4, U=2, RT=1), _X_SIDE[1])
_OUT_PIPED = dict(_PIPED, KS=4, U=1, RT=1)
MMA_GEMV = {   # name -> (variant at T <= 8, variant at T > 8 on mma.sync)
    "gemv_x": (dict(_PIPED, KS=4, U=2, RT=1), dict(_LARGE_T, KS=4, U=2, RT=1, MT=1)),
    "gemv_shared": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "out_shared": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "out_routed": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "kda_x": _X_SIDE, "kda_in": _X_PIPED, "kda_g": _X_SIDE,
    "kda_fb": (dict(_SMALL_T, KS=2, U=1, RT=2), dict(_LARGE_T, KS=2, U=1, RT=2, MT=1)),
    "kda_out": (_OUT_PIPED, dict(_LARGE_T, KS=4, U=2, RT=2, MT=1)),
    "mla_x": _X_SIDE, "mla_a": _X_PIPED, "mla_g": _X_SIDE,
    "mla_qb": (dict(_PIPED, KS=2, U=2, RT=2), dict(_LARGE_T, KS=2, U=2, RT=2, MT=1)),
    "mla_out": (_OUT_PIPED, dict(_LARGE_T, KS=4, U=2, RT=2, MT=1)),
}
TT_GEMV = 8     # the CUDA-core GEMV: tokens per pass over a weight row when T > 1
# K chunks per lane whose loads each CUDA-core GEMV issues together (device.dot_rows; 0 = the
# compiler's choice): 4 everywhere, on par with 0 at batch 1 and a little faster at batch 8
# (tune_streams); every choice gives the same bits
UNROLL = 4

# name -> (N, K, out_bf16, ldx[, ldy]) of the dims (Dims, KdaDims or MlaDims); ldy: the GEMV
# writes a column slice of a wider buffer (the attention steps' x-side projections)
SHAPES = {
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


def variant(name, T, g, threads=0):
    """The variant of GEMV `name` at batch T under g (a config.Gemv: which GEMVs are on the
    tensor cores, unroll overrides); threads: a fixed CTA size (the persistent launch: 256; the tensor-core
    kernel's row tiles per CTA then fill it)."""
    if name not in g.mma:
        return dict(TT=1 if T == 1 else TT_GEMV, U=dict(g.unroll).get(name, UNROLL))
    v = dict(MMA_GEMV[name][T > 8])
    if threads:         # a task of the persistent launch: 8 warps, too few for wgmma's splits
        v["threads"] = threads
    elif T > 8 and g.wgmma and name in WGMMA_GEMVS and wgmma_arch():
        v.update(WGMMA)
    return v


def make(N, K, out_bf16, ldx=0, ldy=0, coherent=False, TT=None, U=0, **mma):
    """A GEMV object from a variant: CUDA-core when it names TT, else tensor-core. `coherent`
    (the tensor-core kernel): X is written by the same launch."""
    if TT is not None:
        return Gemv(N, K, TT, out_bf16, U, ldx, ldy)
    return GemvMMA(N, K, out_bf16=out_bf16, U=U, ldx=ldx, ldy=ldy, coherent=coherent, **mma)


def obj(name, dm, coherent=False, **v):
    return make(*SHAPES[name](dm), coherent=coherent, **v)


def moe_mma(mma):
    """The MoE's GEMVs among `mma`, in MOE_GEMVS order (the persistent launch's key)."""
    return tuple(g for g in MOE_GEMVS if g in mma)
