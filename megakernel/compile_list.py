"""Every (kernel, variant) a step can launch under a Settings: what `python -m megakernel compile`
builds for each set of dims (and warms the disk cache with), and what the PTX check dumps
(tools/ptx_dump.py). The steps choose from the same functions, so the list cannot drift from
what runs.
"""
from dataclasses import replace

from megakernel import (gemv, k_expert_mma, k_kda_core, k_mla_attn_tma, k_mla_attn_wg, k_mla_heads,
                        k_mla_merge)
from megakernel.config import KDA_GEMVS, MLA_GEMVS, MOE_GEMVS
from megakernel.k_expert import TT_EXPERT

_CLASSES = (1, gemv.TT_GEMV + 1)      # a batch of each GEMV batch class


def _gemvs(names, s):
    return [(g, gemv.variant(g, T, s.gemv)) for g in names for T in _CLASSES]


def moe(s):
    """The MoE step's (dims.Dims): the fork-join launches and the one launch."""
    m = gemv.moe_mma(s.gemv.mma)
    out = _gemvs(MOE_GEMVS, s)
    out += [("route", dict(forced=False)), ("route", dict(forced=True)), ("schedule", {}),
            ("combine", {}), ("shared_act", {}), ("final_sum", {})]
    for fmt in ("bf16", "mxfp4"):
        for TT in (1, TT_EXPERT):
            out += [("expert_up", dict(fmt=fmt, TT=TT)), ("expert_down", dict(fmt=fmt, TT=TT))]
    out += [("expert_up_mma", dict(s.moe.up or k_expert_mma.UP)),
            ("expert_up_mma", dict(k_expert_mma.ALT_UP))]
    out += [("expert_down_mma", v) for v in ([dict(s.moe.down)] if s.moe.down else k_expert_mma.down_variants())]
    return out


def persistent(s):
    """The experimental one-launch MoE step (megakernel/experimental/k_persistent.py), every variant
    MEGAKERNEL_STREAMS=persistent can launch: built by `compile --experimental` (CI builds it at
    the full dims for both archs), not with the shipped kernels: it is off the default path, and
    its eight variants were 40% of each (arch, dims) compile's time."""
    m = gemv.moe_mma(s.gemv.mma)
    return [("persistent", persistent_variant(s, fmt, forced, T1, m))
            for fmt in ("bf16", "mxfp4") for T1 in (True, False) for forced in (False, True)]


def ep(s):
    """A megakernel-ep rank's own experts (ep.py), compiled for the MoE's dims with k = 1: the
    schedule and the expert launches the fork-join would choose."""
    out = [("schedule", {})]
    for fmt in ("bf16", "mxfp4"):
        for TT in (1, TT_EXPERT):
            out += [("expert_up", dict(fmt=fmt, TT=TT)), ("expert_down", dict(fmt=fmt, TT=TT))]
    return out + [("expert_up_mma", dict(s.moe.up or k_expert_mma.UP))] + [
        ("expert_down_mma", v) for v in ([dict(s.moe.down)] if s.moe.down else k_expert_mma.down_variants())]


def persistent_variant(s, fmt, forced, T1, gemv_mma):
    """The one launch's key: its build (Settings.moe.persist) only when not the default, so the
    default's key stays (fmt, forced, T1, gemv_mma)."""
    from megakernel.config import Persist
    v = dict(fmt=fmt, forced=forced, T1=T1, gemv_mma=gemv_mma)
    if s.moe.persist != Persist():
        v["persist"] = s.moe.persist
    if not s.moe.mx_mma:
        v["mx_mma"] = False
    return v


def kda(s):
    """The KDA step's (dims.KdaDims)."""
    return _gemvs(KDA_GEMVS, s) + [
        ("kda_conv", {}), ("kda_core", k_kda_core.variant(1)), ("kda_core", k_kda_core.variant(2)),
        ("kda_norm", {})]


def mla(s, md):
    """The MLA step's (dims.MlaDims): both paths (MK_MLA_MMA picks one: mla.MlaStep.kernel)."""
    heads = [(n, k_mla_heads.variant(n, T)) for n in k_mla_heads.VARIANT for T in (1, 9)]
    return _gemvs(MLA_GEMVS, s) + [
        ("mla_absorb", dict(TT=1)), ("mla_absorb", dict(TT=gemv.TT_GEMV)), ("mla_norm", {}),
        ("mla_attn", {}), ("mla_attn_mma", {})] + (
        [("mla_attn_wg", {})] if k_mla_attn_wg.fits(md) else []) + (
        [("mla_attn_tma", {})] if k_mla_attn_tma.fits(md) else []) + [
        ("mla_merge", k_mla_merge.variant(T)) for T in (1, 2)] + (
        heads + [("mla_merge", k_mla_merge.variant(T, md, value=False)) for T in (1, 9)]
        if k_mla_heads.fits(md) else [])


def layer(s):
    """The layer's own kernels (dims.Dims; the rest of the layer is the three steps')."""
    return [("attn_res", {})]


def entries(dims_names, s, extra=None):
    """(dims name, kernel, variant, dims) for `compile`: each set of dims' MoE, KDA, MLA and layer
    kernels; extra(s): more (name, variant) (`compile --experimental`), at the KDA or MLA step's
    dims when the name starts with kda_ or mla_, else the MoE's."""
    from megakernel.dims import FULL, KDA_FULL, KDA_SMALL, MLA_FULL, MLA_SMALL, SMALL
    table = {"full": (FULL, KDA_FULL, MLA_FULL), "small": (SMALL, KDA_SMALL, MLA_SMALL)}
    out = []
    for dn in dims_names:
        dm, kd, md = table[dn]
        out += [(dn, n, v, dm) for n, v in moe(s)]
        out += [(dn, n, v, kd) for n, v in kda(s)]
        out += [(dn, n, v, md) for n, v in mla(s, md)]
        out += [(dn, n, v, dm) for n, v in layer(s)]
        # under a label of their own: ptx_dump names its files by (label, kernel, variant)
        out += [(f"{dn}-ep", n, v, replace(dm, k=1)) for n, v in ep(s)]
        if extra is not None:
            out += [(dn, n, v, {"kda": kd, "mla": md}.get(n.split("_")[0], dm)) for n, v in extra(s)]
    return out
