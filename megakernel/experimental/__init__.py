"""Experiments kept apart from the shipped path: code never run on a GPU, or measured slower and
off. Nothing in megakernel/ outside this folder imports it; the backend never does, and
`python -m megakernel compile` builds it only with --experimental (KERNELS, VARIANTS below).
Each module's docstring opens with its state: what it is, what was measured, what is next.

  k_gemv_route.py   gemv_x fused with route + schedule at batch 1: measured slower, off
  (measured and deleted, figures in docs/megakernel-notes.md, eighth session: the bulk L2
  prefetch k_l2_prefetch.py and the ready-ticket scheduler peek.py; last version ca0d4ea)
  task_graph.py, layer_graph.py, task_sim.py
                    a persistent schedule for a whole decode layer, checked on the CPU; no
                    kernel runs it
"""


def kernels():
    """name -> constructor(dims, **variant), as registry.KERNELS (imports cutlass)."""
    from megakernel import gemv
    from megakernel.experimental.k_gemv_route import GemvRoute
    return {
        "gemv_route": lambda dm, forced, **v: GemvRoute(dm, forced, gemv.obj("gemv_x", dm, **v)),
    }


def variants(settings):
    """(name, variant) of the MoE's dims for `compile --experimental`."""
    from megakernel import gemv
    return [("gemv_route", dict(gemv.variant("gemv_x", 1, settings.gemv, threads=256), forced=f))
           for f in (False, True)]
