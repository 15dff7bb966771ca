"""The decode layer's task graph for one persistent launch: AttnRes -> attention (KDA or
gated MLA) -> AttnRes -> LatentMoE as the stages of task_graph.py, each stage's tasks the CTAs
of its launch today (the grids of the k_*.py kernels, the GEMVs' row tiles at 256 threads as in
the MoE's one launch), its dependencies the buffers it reads (layer.py, kda.py, mla.py, moe.py).
The layer's kernel is not written; this is its schedule, checked on the CPU (task_graph.check,
task_sim.run in tests/megakernel/experimental/test_mk_task_graph.py), and `moe` is the MoE launch's own
schedule (plan.py) in the same terms, so the two planners are tested against each other.

Critical queue: the chain every output waits on. Filler queue: the attention's output-gate
GEMV (read only by MLA's merge / KDA's gated norm, as on the side stream today: side_stream.py)
and the MoE's shared experts (read only by the final sum). Unlike in the MoE alone, each
filler stage waits on a critical one (the gate on the first AttnRes, the shared experts on the
second), which is why the layer needs the protocol of task_graph.py.
"""
from megakernel import config, gemv, registry
from megakernel.plan import Order
from megakernel.experimental.task_graph import CRIT, FILL, Dep, Graph, Stage


def _gemv_tiles(name, dims, T):
    return gemv.obj(name, dims, **gemv.variant(name, T, config.Gemv(), threads=256)).tiles


def moe(g: Graph, dm, fmt: str, T: int, after: str | None, order: Order = Order()):
    """The MoE's stages appended to `g` (its input x_mlp ready after stage `after`, or from the
    start), in plan.build's order: expert groups, GEMV tasks of order.gemv_tiles tiles."""
    sh = registry.persistent_step(dm, fmt, False, T == 1, gemv_mma=gemv.moe_mma(config.ALL_GEMVS)).shape()
    maxU = min(dm.E, T * dm.k)
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    ub = cdiv(maxU, min(order.groups, maxU))
    groups = cdiv(maxU, ub)
    gt = order.gemv_tiles
    inp = (Dep(after),) if after else ()
    g.add(Stage("gemv_x", cdiv(sh.tiles_x, gt), CRIT, inp))
    g.add(Stage("route", T * sh.route_per_token, CRIT, (Dep("gemv_x"),)))
    g.add(Stage("schedule", 1, CRIT, (Dep("route"),)))
    g.add(Stage("expert_up", groups * sh.up_tiles, CRIT, (Dep("schedule"),)))
    g.add(Stage("expert_down", groups * sh.down_tiles, CRIT,
                (Dep("expert_up", sh.down_tiles, sh.up_tiles),)))
    g.add(Stage("combine", T, CRIT, (Dep("expert_down"),)))
    g.add(Stage("out_routed", cdiv(sh.tiles_routed, gt), CRIT, (Dep("combine"),)))
    g.add(Stage("gemv_shared", cdiv(sh.tiles_shared, gt), FILL, inp))
    g.add(Stage("shared_act", T * sh.act_per_token, FILL, (Dep("gemv_shared"),)))
    g.add(Stage("out_shared", cdiv(sh.tiles_sdown, gt), FILL, (Dep("shared_act"),)))
    g.add(Stage("final_sum", T * sh.sum_per_token, CRIT, (Dep("out_routed"), Dep("out_shared"))))
    return g


def _mla(g, md, T, NS):
    """The shipped MLA chain (mla.MlaStep.kernel): absorb and value projection on the tensor
    cores where the dims fit (k_mla_heads.py), else the CUDA-core absorb and a merge that does the
    value projection itself."""
    from megakernel import k_mla_heads, k_mla_merge
    from megakernel.k_mla_absorb import MlaAbsorb
    from megakernel.k_mla_attn_mma import attention_kernel
    mma = k_mla_heads.fits(md)
    attn = registry.KERNELS[attention_kernel(md, config.Attn())](md)
    mv = k_mla_merge.variant(T, md, value=not mma)
    pre = (Dep("attn_res_pre"),)
    g.add(Stage("mla_a", _gemv_tiles("mla_a", md, T), CRIT, pre))
    g.add(Stage("mla_g", _gemv_tiles("mla_g", md, T), FILL, pre))
    g.add(Stage("mla_norm", T, CRIT, (Dep("mla_a"),)))
    g.add(Stage("mla_qb", _gemv_tiles("mla_qb", md, T), CRIT, (Dep("mla_norm"),)))
    if mma:
        absorb = k_mla_heads.MlaAbsorbMMA(md, **k_mla_heads.variant("mla_absorb_mma", T))
        g.add(Stage("mla_absorb", md.H * absorb.tiles, CRIT, (Dep("mla_qb"),)))
    else:
        absorb = MlaAbsorb(md, 1 if T == 1 else gemv.TT_GEMV)
        g.add(Stage("mla_absorb", md.H * absorb.ctas * -(-T // absorb.TT), CRIT, (Dep("mla_qb"),)))
    g.add(Stage("mla_attn", T * attn.groups * NS, CRIT, (Dep("mla_absorb"), Dep("mla_norm"))))
    merge = (Dep("mla_attn"),) if mma else (Dep("mla_attn"), Dep("mla_g"))
    g.add(Stage("mla_merge", registry.KERNELS["mla_merge"](md, **mv).ctas(T), CRIT, merge))
    last = "mla_merge"
    if mma:
        uv = k_mla_heads.MlaValueMMA(md, **k_mla_heads.variant("mla_uv", T))
        g.add(Stage("mla_uv", md.H * uv.tiles, CRIT, (Dep("mla_merge"), Dep("mla_g"))))
        last = "mla_uv"
    g.add(Stage("mla_out", _gemv_tiles("mla_out", md, T), CRIT, (Dep(last),)))
    return "mla_out"


def _kda(g, kd, T):
    from megakernel import k_kda_core
    from megakernel.k_kda_conv import KdaConv
    pre = (Dep("attn_res_pre"),)
    g.add(Stage("kda_in", _gemv_tiles("kda_in", kd, T), CRIT, pre))
    g.add(Stage("kda_g", _gemv_tiles("kda_g", kd, T), FILL, pre))
    g.add(Stage("kda_fb", _gemv_tiles("kda_fb", kd, T), CRIT, (Dep("kda_in"),)))
    g.add(Stage("kda_conv", T * KdaConv(kd).ctas, CRIT, (Dep("kda_in"),)))
    g.add(Stage("kda_core", T * kd.H * k_kda_core.variant(T)["split"], CRIT,
                (Dep("kda_conv"), Dep("kda_fb"))))
    g.add(Stage("kda_norm", T * kd.H, CRIT, (Dep("kda_core"), Dep("kda_g"))))
    g.add(Stage("kda_out", _gemv_tiles("kda_out", kd, T), CRIT, (Dep("kda_norm"),)))
    return "kda_out"


def layer(cfg, kind: str, T: int, fmt: str = "bf16", NS: int = 1, order: Order = Order()):
    """The graph of one `kind` ("kda" or "mla") layer with its LatentMoE at batch T; NS: MLA's
    cache splits (k_mla_attn.max_splits of the longest sequence)."""
    from megakernel.dims import from_cfg, kda_from_cfg, mla_from_cfg
    if kind not in ("kda", "mla") or T < 1 or NS < 1:
        raise ValueError(f"layer graph: kind kda or mla, T >= 1, NS >= 1; got {kind}, {T}, {NS}")
    g = Graph()
    g.add(Stage("attn_res_pre", T, CRIT))
    last = _mla(g, mla_from_cfg(cfg), T, NS) if kind == "mla" else _kda(g, kda_from_cfg(cfg), T)
    # the attention's output is the residual stream's new source; its AttnRes reads it
    g.add(Stage("attn_res_post", T, CRIT, (Dep(last),)))
    return moe(g, from_cfg(cfg), fmt, T, "attn_res_post", order)
