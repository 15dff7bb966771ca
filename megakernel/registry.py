"""Every kernel by name: name -> constructor(dims, **variant) of its kernel object (each class
declares its arguments: kernel_args.py). The compile cache (cache.py) builds, compiles and keeps
them; the compile list (compile_list.py) names every variant a step can launch. A variant is
everything that decides a kernel's binary besides its dims, so (name, dims, variant) is its key.
"""
from megakernel import gemv
from megakernel.config import MOE_GEMVS, Persist
from megakernel.k_attn_res import AttnRes
from megakernel.k_combine import Combine
from megakernel.k_expert import TT_EXPERT, ExpertDown, ExpertUp
from megakernel.k_expert_mma import ExpertMMA, fits
from megakernel.k_final_sum import FinalSum
from megakernel.k_kda_conv import KdaConv
from megakernel.k_kda_core import KdaCore
from megakernel.k_kda_norm import KdaNorm
from megakernel.k_mla_absorb import MlaAbsorb
from megakernel.k_mla_attn import MlaAttn
from megakernel.k_mla_attn_mma import MlaAttnMMA
from megakernel.k_mla_attn_wg import MlaAttnWG
from megakernel.k_mla_attn_tma import MlaAttnTMA
from megakernel.k_mla_heads import MlaAbsorbMMA, MlaValueMMA
from megakernel.k_mla_merge import MlaMerge
from megakernel.k_mla_norm import MlaNorm
from megakernel.k_route import Route
from megakernel.k_schedule import Schedule
from megakernel.k_shared_act import SharedAct


def persist_experts(persist):
    """The persistent launch's expert variants: 8 warps per expert task (its CTAs are 256
    threads); its up ring (8 warps x 3 stages x 2.5 KB = 60 KB) is the largest shared-memory user
    of its stages, so built for 4 CTAs per SM it keeps 2 stages."""
    return (dict(U=1, WPC=8, PF=128, S=3 if persist.ctas <= 3 else 2),
            dict(U=2, WPC=8, MT=1, PF=128))


def persistent_step(dm, fmt, forced, T1, trace=False, gemv_mma=(), persist=Persist(), only=(),
                    mx_mma=True):
    """The PersistentStep object (not compiled) for these dims / format / batch class; gemv_mma:
    the MoE's GEMVs on the tensor cores (part of the key, so that a process can hold several);
    persist: its build (config.Persist); mx_mma: Settings.moe.mx_mma."""
    from megakernel.config import Gemv
    # experimental (measured slower than the fork-join): imported only when the one launch is asked for
    from megakernel.experimental.k_persistent import PersistentStep
    mma = fmt == "mxfp4" and mx_mma and fits(dm)
    T = 1 if T1 else gemv.TT_GEMV + 1          # a batch of the class
    gemvs = {}
    for g in MOE_GEMVS:
        v = gemv.variant(g, T, Gemv(mma=gemv_mma), threads=256)
        if "TT" in v:
            v["U"] = persist.unroll          # fewer CTAs per SM: more loads in flight per warp
        else:
            v.update(dict(persist.mma_gemv))
        # out_routed and out_shared read what the same launch wrote (yn, act_s)
        gemvs[g] = gemv.obj(g, dm, coherent=g.startswith("out_") and "TT" not in v, **v)
    up, down = persist_experts(persist)
    return PersistentStep(dm, fmt, forced, gemvs, 1 if T1 else TT_EXPERT,
                          up if mma else None, down if mma else None, trace, persist.ctas, only)


def _gemv(name):
    return lambda dm, **v: gemv.obj(name, dm, **v)


KERNELS = {g: _gemv(g) for g in gemv.SHAPES}      # the fourteen GEMVs (gemv.py)
KERNELS.update({
    # the MoE (moe.py; dims.Dims)
    "final_sum": lambda dm: FinalSum(dm),
    "shared_act": lambda dm: SharedAct(dm),
    "route": lambda dm, forced: Route(dm, forced),
    "schedule": lambda dm: Schedule(dm),
    "expert_up": lambda dm, fmt, TT: ExpertUp(dm, fmt, TT),
    "expert_down": lambda dm, fmt, TT: ExpertDown(dm, fmt, TT),
    "expert_up_mma": lambda dm, U, WPC, PF=0, S=0: ExpertMMA(dm, True, U, WPC, PF=PF, S=S),
    "expert_down_mma": lambda dm, U, WPC, MT, PF=0, S=0: ExpertMMA(dm, False, U, WPC, MT, PF, S),
    "combine": lambda dm: Combine(dm),
    "persistent": persistent_step,
    # KDA (kda.py; dims.KdaDims)
    "kda_conv": lambda kd: KdaConv(kd),
    "kda_core": lambda kd, **v: KdaCore(kd, **v),
    "kda_norm": lambda kd: KdaNorm(kd),
    # MLA (mla.py; dims.MlaDims)
    "mla_norm": lambda md: MlaNorm(md),
    "mla_absorb": lambda md, TT: MlaAbsorb(md, TT),
    "mla_attn": lambda md, **v: MlaAttn(md, **v),
    "mla_attn_mma": lambda md, **v: MlaAttnMMA(md, **v),
    "mla_attn_wg": lambda md, **v: MlaAttnWG(md, **v),
    "mla_attn_tma": lambda md, **v: MlaAttnTMA(md, **v),
    "mla_merge": lambda md, **v: MlaMerge(md, **v),
    "mla_absorb_mma": lambda md, **v: MlaAbsorbMMA(md, **v),
    "mla_uv": lambda md, **v: MlaValueMMA(md, **v),
    # the layer (layer.py; dims.Dims)
    "attn_res": lambda dm: AttnRes(dm),
    # a GEMV of any shape (N, K, out_bf16, ldx) from a variant (tools/tune_gemv.py)
    "gemv": lambda shape, **v: gemv.make(*shape, **v),
})
