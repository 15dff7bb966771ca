"""Experiments kept apart from the shipped path: code never run on a GPU, or measured slower and
off by default. The default path never imports this folder: no module outside it imports it at
module level (tests/megakernel/test_mk_experimental_rule.py), and the one experiment a setting
can select, the persistent MoE launch (MEGAKERNEL_STREAMS=persistent), is imported inside the
functions that run it (moe.LatentMoE.launch, registry.persistent_step). Every experiment compiles
with `python -m megakernel compile --experimental` (kernels(), variants() below); CI runs that at
the full dims for both archs (scripts/test), so the persistent launch keeps building and the
setting works (a first run of it compiles its variants into the disk cache). Each module's
docstring opens with its state: what it is, what was measured, what is next.

  k_persistent.py, launch_persistent.py
                    the MoE step in one persistent launch: the fork-join's bits, slower than it at
                    every batch in both formats (docs/megakernel.md); selectable, off by default
  k_gemv_route.py   gemv_x fused with route + schedule at batch 1: measured slower, off
  k_kda_core_warp.py
                    the KDA core in CTAs of one warp, the shipped core's bits: never run
  task_graph.py, layer_graph.py, task_sim.py
                    a persistent schedule for a whole decode layer, checked on the CPU; no
                    kernel runs it
Measured and deleted (figures in lab/, docs/megakernel.md's rejected designs): the bulk L2
prefetch and the ready-ticket scheduler.
"""


def kernels():
    """name -> constructor(dims, **variant), as registry.KERNELS (imports cutlass)."""
    from megakernel import gemv
    from megakernel.experimental.k_gemv_route import GemvRoute
    from megakernel.experimental.k_kda_core_warp import KdaCoreWarp
    return {
        "gemv_route": lambda dm, forced, **v: GemvRoute(dm, forced, gemv.obj("gemv_x", dm, **v)),
        "kda_core_warp": lambda kd, **v: KdaCoreWarp(kd, **v),
    }


WARP_SPLITS = (16, 32)   # kda_core_warp's splits: tune_attn --splits w16,w32


def variants(settings):
    """(name, variant) for `compile --experimental`: gemv_route at the MoE's dims, kda_core_warp
    at the KDA step's (compile_list.entries picks the dims by name)."""
    from megakernel import compile_list, gemv
    return ([("gemv_route", dict(gemv.variant("gemv_x", 1, settings.gemv, threads=256), forced=f))
             for f in (False, True)]
            + [("kda_core_warp", dict(split=sp)) for sp in WARP_SPLITS]
            + compile_list.persistent(settings))
