"""Experiments kept apart from the shipped path: code never run on a GPU, or measured slower and
off. Nothing in megakernel/ outside this folder imports it; the backend never does, and
`python -m megakernel compile` builds it only with --experimental (KERNELS, VARIANTS below).
Each module's docstring opens with its state: what it is, what was measured, what is next.

  k_gemv_route.py   gemv_x fused with route + schedule at batch 1: measured slower, off
  k_l2_prefetch.py  a later GEMV's weights into L2 (bulk prefetch): never run on a GPU
  peek.py           the persistent launch's ready-ticket scheduler: never run on a GPU
  measure.py        their first GPU run: `python -m megakernel.experimental.measure peek|prefetch`
  task_graph.py, layer_graph.py, task_sim.py
                    a persistent schedule for a whole decode layer, checked on the CPU; no
                    kernel runs it
"""


def kernels():
    """name -> constructor(dims, **variant), as registry.KERNELS (imports cutlass)."""
    from megakernel import gemv, registry
    from megakernel.experimental.k_gemv_route import GemvRoute
    from megakernel.experimental.k_l2_prefetch import L2Prefetch
    from megakernel.experimental.peek import PeekPersistentStep
    return {
        "gemv_route": lambda dm, forced, **v: GemvRoute(dm, forced, gemv.obj("gemv_x", dm, **v)),
        "l2_prefetch": lambda dm, **v: L2Prefetch(dm, **v),
        "persistent_peek": lambda dm, **v: registry.persistent_step(dm, cls=PeekPersistentStep,
                                                                    **v),
    }


def variants(settings):
    """(name, variant) of the MoE's dims for `compile --experimental`."""
    from megakernel import gemv
    m = gemv.moe_mma(settings.gemv.mma)
    out = [("gemv_route", dict(gemv.variant("gemv_x", 1, settings.gemv, threads=256), forced=f))
           for f in (False, True)]
    out += [("l2_prefetch", dict(ctas=132, last=False))]
    out += [("persistent_peek", dict(fmt=fmt, forced=False, T1=t1, gemv_mma=m))
            for fmt in ("bf16", "mxfp4") for t1 in (True, False)]
    return out
