"""State: selectable (MEGAKERNEL_STREAMS=persistent), judged bit for bit equal to the fork-join,
and slower than it at every batch in both formats (docs/megakernel.md); compiled by
`python -m megakernel compile --experimental` (CI: full dims, both archs) so it keeps building.

The whole step in ONE launch (k_persistent.py): a persistent grid of `ctas_per_sm` CTAs per
SM drawing the 11 stages' tasks from the queues of plan.py (`order`); the same bits as the 11
launches of launch_streams.py."""
import torch

from megakernel import cache, compile_list, gemv, plan, registry


def _variant(moe, forced, T):
    s = moe.settings
    return compile_list.persistent_variant(s, moe.fmt, forced, T == 1, gemv.moe_mma(s.gemv.mma))


def task_table(moe, T, maxU):
    """The launch's task table for this batch and order (plan.py), on the GPU (kept per T, order
    and GEMV kernels: a tensor-core GEMV has other tile counts than a CUDA-core one)."""
    v = _variant(moe, False, T)
    key = (T, moe.order, tuple(sorted(v.items())))
    t = moe._plans.get(key)
    if t is None:
        shape = registry.persistent_step(moe.dm, **v).shape()
        words, _, _ = plan.build(shape, T, maxU, moe.order, moe._nsm)
        t = moe._plans[key] = torch.tensor(words, dtype=torch.int32, device=moe.device)
    return t


def launch(moe, named, T, forced):
    """Enqueue the one launch over the buffers `named` (LatentMoE.buffers) on the caller's
    stream; with moe.trace set (an int64 [tickets, 4] tensor), the tracing variant into it."""
    tr = moe.trace is not None
    fn = cache.compiled("persistent", moe.dm, **_variant(moe, forced, T),
                        **({"trace": True} if tr else {}))
    pl = task_table(moe, T, named["maxU"])
    fn(dict(named, plan=pl, sync=moe._sync, trace=moe.trace if tr else pl,
            ctas=moe._nsm * moe.ctas_per_sm), torch.cuda.current_stream().cuda_stream)
