"""Expert parallelism for the megakernel's LatentMoE: one rank of a distributed
candidate, owning a shard of the experts and the home of a block of the batch's tokens.

Per step, on every rank (the math of docs/k3-decode.md §5, split where the data lives):

    route     gemv_x + route over the rank's home tokens (router and W_down replicated):
              logits, ids, weights, hl
    dispatch  each valid route's hl row to the owner of its expert, with the expert's id (the
              counts first, then the rows: by one of two exchanges, below)
    experts   the rank's own experts over every row it received: the single-GPU step's
              schedule and expert kernels, the received rows taken as tokens of one slot each
              (dims k = 1, ids the experts' local indices), in passes of at most MAX_T rows
    combine   the y rows back to their home ranks, each into its (token, slot) place of the
              home's pair buffer, then the single-GPU step's combine (slot order, one
              rounding), latent norm, W_up, shared experts and final add

Bits: a route's y comes from the same kernels and the same hl row as on one GPU (the expert
kernels are batch-invariant: a row's y does not depend on the rows beside it in a pass), and the
combine sums the slots in the same order, so the step equals the single-GPU launch bit for bit
(tests/megakernel/test_mk_ep_gpu.py checks it on a GPU).

Exchange, one of two (`MegakernelEPRank.exchange`, else MEGAKERNEL_EP_EXCHANGE, config.py):
  ipc   (ep_ipc.py; "auto" picks it for ranks on CUDA devices of one host under a gloo group,
        e.g. ranks sharing one GPU) each rank writes its rows straight into the owners' device
        buffers and the owners write the y rows straight back; the rank's own routes go to its
        experts while its rows are in flight, then the rows it received, a source's block at a
        time, each block's y going back while the next block's experts run.
  dist  torch.distributed's all_to_all_single over the caller's group: NCCL (a GPU per rank)
        moves device tensors; gloo (the CPU, or ranks sharing one GPU) moves host copies;
        nothing overlaps.
Both give the same rows to the same kernels, so the same bits (and the test on the CPU runs
ep_ipc's offsets and fences over shared file mappings, tests/megakernel/test_mk_ep.py).

The compute is an engine with three calls (route, experts, finish: `Engine` below); `ep_step`
is the same for any engine, so tests run it on the CPU with a torch engine
(tests/megakernel/test_mk_ep.py) and the GPU with `MegakernelEngine`. This module imports
neither k3diff nor reference (ARCHITECTURE.md's import rules): the rank context it is handed
(rank, world, layout, device, group) is duck-typed.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist

from megakernel import ep_ipc
from megakernel.backend import MOE_OUTPUTS


class Engine:
    """What ep_step needs of the compute (one rank's; T may be 0, M may be 0).

    route(x [T, d], forced [T, k] or None) -> dict(router_logits, topk_ids [T, k] int (-1:
        dropped), topk_weights, latent (hl [T, r] bf16))
    experts(rows [M, r] bf16, ids [M] int64, the global expert ids) -> y [M, r] bf16; raises
        when an id is not one of the rank's own
    finish(x [T, d], routed dict, y [T * k, r] bf16 in pair order t * k + j) -> dict(combined,
        latent_normed, routed_out, shared_out, out)
    """


def exchange(send: torch.Tensor, send_counts: list, recv_counts: list, group) -> torch.Tensor:
    """all_to_all_single along dim 0 with uneven splits; bf16 rows travel as their bytes (gloo
    has no 16-bit all-to-all), device tensors through host copies unless the group is NCCL."""
    wire = send.contiguous()
    bf = wire.dtype == torch.bfloat16
    if bf:
        wire = wire.view(torch.uint8)
    host = wire.is_cuda and dist.get_backend(group) != "nccl"
    if host:
        wire = wire.cpu()
    recv = wire.new_empty((sum(recv_counts),) + tuple(wire.shape[1:]))
    dist.all_to_all_single(recv, wire, output_split_sizes=recv_counts,
                           input_split_sizes=send_counts, group=group)
    if host:
        recv = recv.to(send.device)
    return recv.view(torch.bfloat16) if bf else recv


def ep_step(engine, x: torch.Tensor, forced, owners: torch.Tensor, world: int, group,
            k: int, r: int, ipc=None, mark=None) -> dict:
    """One MoE step of this rank over its home tokens x (module docstring); `owners` [E] int64
    on x's device: the rank of each expert; `ipc` an ep_ipc.IpcExchange, or None for
    torch.distributed's all-to-all over `group`; `mark(phase)`, if given, is called as each of
    route, dispatch, experts, combine, finish ends (tools/ep_time.py). Returns the stage's
    outputs for the home rows."""
    mark = mark or (lambda phase: None)
    T = x.shape[0]
    routed = engine.route(x, forced) if T else None
    ids = routed["topk_ids"].reshape(-1).to(torch.int64) if T else x.new_zeros(0, dtype=torch.int64)
    hl = routed["latent"] if T else x.new_zeros(0, r)

    # dispatch: the valid routes ordered by destination (stable: (token, slot) order within one)
    routes = torch.nonzero(ids >= 0).squeeze(1)
    dest = owners[ids[routes]]
    order = torch.sort(dest, stable=True).indices
    routes, dest = routes[order], dest[order]
    send_counts = torch.bincount(dest, minlength=world).to(torch.int64)
    send_ids, send_rows = ids[routes], hl[torch.div(routes, k, rounding_mode="floor")]
    mark("route")
    if ipc is None:
        counts = exchange(send_counts, [1] * world, [1] * world, group)
        sc, rc = send_counts.tolist(), counts.tolist()
        got_ids = exchange(send_ids, sc, rc, group)
        got_rows = exchange(send_rows, sc, rc, group)
        mark("dispatch")
        y = engine.experts(got_rows, got_ids) if got_rows.shape[0] else got_rows.new_zeros(0, r)
        mark("experts")
        # combine: back the same way reversed
        back = exchange(y, rc, sc, group)
        mark("combine")
    else:
        back = _through_ipc(engine, ipc, send_counts, send_rows, send_ids, r, mark)
    if not T:
        mark("finish")
        return {}
    # into (token, slot) places; slots of dropped routes stay 0 and the combine skips them (ids -1)
    pairs = torch.zeros(T * k, r, dtype=torch.bfloat16, device=x.device)
    pairs[routes] = back
    done = engine.finish(x, routed, pairs)
    mark("finish")
    return {**routed, **done}


def _through_ipc(engine, ipc, send_counts, rows, ids, r, mark) -> torch.Tensor:
    """Dispatch, experts and combine through peer memory (ep_ipc.py); returns the y rows in the
    send order (rows' order), as the all-to-all back does."""
    C = ipc.counts(send_counts)
    me = ipc.rank
    a = sum(C[me][:me])
    b = a + C[me][me]
    ipc.dispatch(C, rows, ids)
    # the rank's own routes need no exchange: its experts run on them while the copies to the
    # peers are in flight. The expert kernels are batch-invariant per row (a row's y does not
    # depend on the rows beside it in a pass, nor on the pass's size), so two passes, own rows
    # then received, give the bits of one (tests/megakernel/test_mk_ep_gpu.py checks it)
    y_own = engine.experts(rows[a:b], ids[a:b]) if b > a else rows.new_zeros(0, r)
    ipc.fence()
    mark("dispatch")                # with the rank's own experts, which overlap it
    got_rows, got_ids = ipc.received(C)
    # the received rows block by block (one block per source rank), each block's y written back
    # to its home on the side stream while the next block's experts run (the same bits again:
    # a row's y is its own)
    for s, o, n, at in ipc.blocks(C):
        ipc.combine_block(s, at, engine.experts(got_rows[o:o + n], got_ids[o:o + n]))
    mark("experts")                 # with the y of all but the last block on their way back
    ipc.fence()
    mark("combine")
    back = ipc.returned(C)          # the other owners' y, by owner rank: ours go between
    return torch.cat([back[:a], y_own, back[a:]])


class MegakernelEngine:
    """The megakernel's kernels as an Engine: the home step is a LatentMoE of the case's dims
    (only its route and after-combine launches run), the rank's experts a LatentMoE of dims
    k = 1 over its own experts' weights, of which only the schedule and expert launches run."""

    def __init__(self, dims, shard: dict, device, settings=None):
        from megakernel.moe import LatentMoE

        self.ids = shard["expert_ids"].to(device=device, dtype=torch.int64)
        weights = {n: t for n, t in shard.items() if n != "expert_ids"}
        # serial: one stream, the same bits as the fork-join (moe.py)
        self.home = LatentMoE(dims, weights, device, streams="serial", settings=settings)
        self.own = None
        self._forced = None
        if self.ids.numel():
            # only its experts run: the replicated weights go in as empty views, not copies
            own = {n: t if n.startswith("experts.") else t[:0] for n, t in weights.items()}
            # dims k = 1 and the case's E: one compiled set whatever the placement (a local
            # index is below E, so the schedule's E slots hold it; the weights hold only these)
            self.own = LatentMoE(replace(dims, k=1), own, device, streams="serial", settings=settings)

    def route(self, x, forced):
        from megakernel.launch_streams import STAGES

        self._forced = forced           # finish() compiles and runs the same variant
        s = self.home.launch(x, forced_ids=forced, stages={STAGES.index("gemv_x"), STAGES.index("route")})
        out = self.home.debug_outputs(s, x.shape[0])
        return {n: out[n].clone() for n in ("router_logits", "topk_ids", "topk_weights", "latent")}

    def experts(self, rows, ids):
        from megakernel.dims import MAX_T
        from megakernel.launch_streams import launch_experts

        if self.own is None:
            raise RuntimeError("megakernel-ep: a route reached a rank that owns no expert")
        local = torch.searchsorted(self.ids, ids)
        bad = (local >= self.ids.numel()) | (self.ids[local.clamp(max=self.ids.numel() - 1)] != ids)
        if bool(bad.any()):
            e = int(ids[bad][0])
            raise RuntimeError(f"megakernel-ep: received a route for expert {e}, which this rank does not own")
        y = torch.empty_like(rows)
        for a in range(0, rows.shape[0], MAX_T):
            chunk = rows[a:a + MAX_T]
            m = chunk.shape[0]
            s = self.own.scratch(m)
            s["ids"][:m].copy_(local[a:a + m])
            s["hl"].copy_(chunk)
            launch_experts(self.own, self.own.buffers(chunk, s), m)
            y[a:a + m].copy_(s["y"])
        return y

    def finish(self, x, routed, pairs):
        from megakernel.launch_streams import STAGES

        T = x.shape[0]
        s = self.home.scratch(T)
        s["y"].copy_(pairs)
        # the combine and every launch after it in STAGES (the shared experts' three included)
        self.home.launch(x, forced_ids=self._forced, stages=set(range(STAGES.index("combine"), len(STAGES))))
        out = self.home.debug_outputs(s, T)
        return {"combined": out["combined"].clone(), "latent_normed": out["latent_normed"].clone(),
                "routed_out": out["routed_out"].clone(), "shared_out": out["shared_out"].clone(),
                "out": s["out"].clone()}


class MegakernelEPRank:
    """One rank of `megakernel-ep` (the per-rank protocol of k3diff/distributed.py, duck-typed):
    prepare_rank builds the engine from the rank's shard and picks the exchange, run_rank runs
    ep_step on its rows."""

    stages = ("moe",)
    exchange = None                 # "auto" | "ipc" | "dist"; None: MEGAKERNEL_EP_EXCHANGE (config.py)
    ipc_class = ep_ipc.IpcExchange  # tests plant a bug in a subclass

    def provides(self, stage):
        return set(MOE_OUTPUTS)

    def exchange_setting(self) -> str:
        from megakernel import config

        return self.exchange or config.current().ep_exchange

    def ipc_for(self, ctx, r: int):
        """The IPC exchange where it runs, else None (torch.distributed). ep_ipc.pick is a
        collective: every rank calls this in prepare_rank."""
        if ep_ipc.pick(self.exchange_setting(), ctx.device, ctx.group) != "ipc":
            return None
        return self.ipc_class(ctx.group, ctx.rank, ctx.world, ctx.device, r)

    def prepare_rank(self, cfg, stage, shard, ctx):
        from megakernel.dims import from_cfg

        if stage != "moe":
            raise ValueError(f"megakernel-ep implements the moe stage, not {stage!r}")
        if "router.weight" not in shard:
            raise ValueError("megakernel-ep: a dense layer has no experts to shard")
        dims = from_cfg(cfg)
        owners = torch.tensor(ctx.layout.owners, dtype=torch.int64, device=ctx.device)
        return {"engine": MegakernelEngine(dims, shard, ctx.device), "owners": owners, "dims": dims,
                "ipc": self.ipc_for(ctx, dims.r)}

    def run_rank(self, stage, cfg, p, inputs, ctx):
        a, b = ctx.rows
        x = inputs["x"][a:b].contiguous()
        forced = inputs.get("forced_ids")
        dims = p["dims"]
        out = ep_step(p["engine"], x, None if forced is None else forced[a:b], p["owners"], ctx.world,
                      ctx.group, dims.k, dims.r, ipc=p.get("ipc"))
        if not out:                     # no home token: empty rows of each output
            out = _empty(dims, x.device)
        out["topk_ids"] = out["topk_ids"].to(torch.int32)
        return out


def _empty(dims, device) -> dict:
    bf, f32 = torch.bfloat16, torch.float32
    z = lambda *s, dt=bf: torch.empty(0, *s, dtype=dt, device=device)  # noqa: E731
    return {"out": z(dims.d), "router_logits": z(dims.E, dt=f32), "topk_ids": z(dims.k, dt=torch.int32),
            "topk_weights": z(dims.k, dt=f32), "latent": z(dims.r), "combined": z(dims.r),
            "latent_normed": z(dims.r), "routed_out": z(dims.d), "shared_out": z(dims.d)}
