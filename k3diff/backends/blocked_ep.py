"""`torch-blocked-ep`: torch-blocked's LatentMoE with expert parallelism.

Each rank holds only its own experts (k3diff/ep_config.py: the case's owners) and is the home of a
block of tokens. Per step, on every rank:

    route + latent down-projection of its home tokens (router and W_down replicated)
    dispatch: each valid route's hl row goes to the owner of its expert (all_to_all_single, the
              counts exchanged first; a rank may send or receive nothing)
    the experts it owns run over every row they received, grouped by expert
    combine: the y rows travel back the same way, reversed; the home rank puts each in its
             (token, slot) place and sums in slot order in f32 (one rounding), as torch-blocked
    latent norm, W_up, the shared experts and the final add on the home rows

bf16 rows travel bit for bit as bytes (an all-to-all is a copy; gloo has no bf16 type). Independence: like torch-blocked, nothing here imports
`reference/`; the per-token math is torch-blocked's helpers (blocked_moe, blocked_ops).

`dispatch_bug=True` (the planted bug of k3diff/mutants.py, `ep_dispatch_off_by_one`): when E is
not divisible by the ranks, a route is sent to rank (id + 1) mod N instead of its expert's owner;
the receiver looks the id up among its own experts (nearest below, as an index kernel would) and
runs a wrong expert, silently.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from k3diff.distributed import candidate
from k3diff.stages import OUTPUTS

from .blocked_moe import _get, glu_mlp, prepare_moe, route
from .blocked_ops import F32, bf16, exact_f32_matmul, gemm, rmsnorm_bf16, situ


def _exchange(send: torch.Tensor, send_counts: list, recv_counts: list, group) -> torch.Tensor:
    """all_to_all_single with uneven splits along dim 0; bf16 rows as their bytes (gloo has no
    16-bit integer or bf16 all-to-all)."""
    wire = send.contiguous().view(torch.uint8) if send.dtype == torch.bfloat16 else send
    recv = wire.new_empty((sum(recv_counts),) + tuple(wire.shape[1:]))
    dist.all_to_all_single(recv, wire.contiguous(), output_split_sizes=recv_counts,
                           input_split_sizes=send_counts, group=group)
    return recv.view(torch.bfloat16) if send.dtype == torch.bfloat16 else recv


class BlockedEPRank:
    """One rank of torch-blocked-ep (the per-rank protocol of k3diff/distributed.py)."""

    stages = ("moe",)
    dispatch_bug = False

    def provides(self, stage):
        return {s.name for s in OUTPUTS[stage]}

    def prepare_rank(self, cfg, stage, shard, ctx):
        ids = shard.pop("expert_ids")
        if _get(shard, "router.weight") is None:          # a dense layer's MLP: nothing to exchange
            return {"dense": (_get(shard, "dense.gate_up"), _get(shard, "dense.down"))}
        p = prepare_moe(cfg, shard)                        # MXFP4: this rank's experts, read per expert as used
        p["ids"] = ids.to(ctx.device)
        p["owner"] = torch.tensor(ctx.layout.owners, dtype=torch.int64, device=ctx.device)
        return p

    def run_rank(self, stage, cfg, p, inputs, ctx):
        a, b = ctx.rows
        x = inputs["x"][a:b]
        with exact_f32_matmul():
            if "dense" in p:
                return {"out": glu_mlp(cfg, x, *p["dense"])}
            forced = inputs.get("forced_ids")
            return self._moe(cfg, p, x, None if forced is None else forced[a:b], ctx)

    def destination(self, ids: torch.Tensor, p: dict, cfg, world: int) -> torch.Tensor:
        if self.dispatch_bug and cfg.n_experts % world:
            return (ids + 1) % world                      # the planted bug: not the owner
        return p["owner"][ids]

    def _moe(self, cfg, p, x, forced, ctx):
        N, group, k = ctx.world, ctx.group, cfg.top_k
        r, I = cfg.latent_dim, cfg.moe_intermediate
        T = x.shape[0]
        logits = gemm(x, p["router"])
        ids, wts = route(cfg, logits, p["bias"], forced)
        hl = bf16(gemm(x, p["down"]))

        # dispatch: valid routes sorted by destination rank (stable: (token, slot) order within)
        flat = ids.reshape(-1)
        routes = torch.nonzero(flat >= 0).squeeze(1)
        dest = self.destination(flat[routes], p, cfg, N)
        order = torch.sort(dest, stable=True).indices
        routes, dest = routes[order], dest[order]
        send_counts = torch.bincount(dest, minlength=N).to(torch.int64)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        got_ids = _exchange(flat[routes], sc, rc, group)
        got_rows = _exchange(hl[routes // k], sc, rc, group)

        # this rank's experts over every row it received
        y = torch.zeros(got_rows.shape[0], r, dtype=torch.bfloat16, device=x.device)
        if got_rows.shape[0]:
            local = torch.searchsorted(p["ids"], got_ids, right=True) - 1    # own id, or nearest below
            if self.dispatch_bug:
                local = local.clamp(0, p["ids"].numel() - 1)
            elif bool((local < 0).any()) or bool((p["ids"][local.clamp(min=0)] != got_ids).any()):
                raise RuntimeError(f"rank {ctx.rank} received a route for an expert it does not own")
            experts, counts = torch.unique(local, return_counts=True)
            grouped = torch.sort(local, stable=True).indices
            start = 0
            for e, c in zip(experts.tolist(), counts.tolist()):
                pos = grouped[start:start + c]
                start += c
                gu = gemm(got_rows[pos], p["w13"][e])
                act = bf16(situ(gu[:, :I], gu[:, I:], cfg.situ_beta, cfg.situ_linear_beta))
                y[pos] = bf16(gemm(act, p["w2"][e]))

        # combine: back to the home ranks, then the weighted sum in slot order
        back = _exchange(y, rc, sc, group)
        y_routes = torch.zeros(T * k, r, dtype=F32, device=x.device)
        y_routes[routes] = back.to(F32)
        y_routes = y_routes.view(T, k, r)
        acc = torch.zeros(T, r, dtype=F32, device=x.device)
        for j in range(k):
            acc = acc + wts[:, j:j + 1] * y_routes[:, j]
        combined = bf16(acc)
        normed = rmsnorm_bf16(combined, p["norm"], cfg.rms_eps)
        routed = bf16(gemm(normed, p["up"]))
        shared = glu_mlp(cfg, x, p["sh_gu"], p["sh_down"]) if p["sh_gu"] is not None else torch.zeros_like(routed)
        out = bf16(routed.to(F32) + shared.to(F32))
        return {"out": out, "router_logits": logits, "topk_ids": ids.to(torch.int32), "topk_weights": wts,
                "latent": hl, "combined": combined, "latent_normed": normed, "routed_out": routed,
                "shared_out": shared}


class BlockedEPRankDispatchBug(BlockedEPRank):
    dispatch_bug = True


# its code changes path where E is not a multiple of the ranks (uneven shards): E is drawn around
# these (15, 17, 31, 33 are divisible by none of 2, 4, 8)
TorchBlockedEP = candidate("torch-blocked-ep", "k3diff.backends.blocked_ep:BlockedEPRank",
                           boundaries={"n_experts": (16, 32)})
TorchBlockedEPDispatchBug = candidate("mutant:ep_dispatch_off_by_one",
                                      "k3diff.backends.blocked_ep:BlockedEPRankDispatchBug")
