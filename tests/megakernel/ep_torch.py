"""megakernel/ep.py's orchestration (`ep_step`: dispatch, the rank's experts, combine) with a
torch engine standing in for the kernels, so the CPU can judge the plumbing the megakernel-ep
backend runs on a GPU (tests/megakernel/test_mk_ep.py). The math is torch-blocked's helpers
(k3diff/backends/blocked_moe.py); loaded by name in the ranks ("ep_torch:TorchEngineEPRank"),
which get the test's sys.path."""
from types import SimpleNamespace

import torch

from k3diff.backends.blocked_moe import combine, glu_mlp, prepare_moe, route
from k3diff.backends.blocked_ops import F32, bf16, exact_f32_matmul, gemm, rmsnorm_bf16, situ
from k3diff.distributed import DistributedCandidate
from megakernel.ep import MegakernelEPRank


class TorchEngine:
    """The Engine of megakernel/ep.py in torch (torch-blocked's rounding points)."""

    def __init__(self, cfg, shard):
        self.cfg = cfg
        self.ids = shard.pop("expert_ids").to(torch.int64)
        self.p = prepare_moe(cfg, shard)

    def route(self, x, forced):
        p = self.p
        with exact_f32_matmul():
            logits = gemm(x, p["router"])
            ids, wts = route(self.cfg, logits, p["bias"], forced)
            return {"router_logits": logits, "topk_ids": ids, "topk_weights": wts,
                    "latent": bf16(gemm(x, p["down"]))}

    def experts(self, rows, ids):
        cfg, I = self.cfg, self.cfg.moe_intermediate
        local = torch.searchsorted(self.ids, ids)
        if bool((local >= self.ids.numel()).any()) or bool((self.ids[local.clamp(max=self.ids.numel() - 1)] != ids).any()):
            raise RuntimeError("ep_torch: received a route for an expert this rank does not own")
        y = torch.empty_like(rows)
        with exact_f32_matmul():
            for e in torch.unique(local).tolist():
                pos = torch.nonzero(local == e).squeeze(1)
                gu = gemm(rows[pos], self.p["w13"][e])
                act = bf16(situ(gu[:, :I], gu[:, I:], cfg.situ_beta, cfg.situ_linear_beta))
                y[pos] = bf16(gemm(act, self.p["w2"][e]))
        return y

    def finish(self, x, routed, pairs):
        cfg, p = self.cfg, self.p
        T = x.shape[0]
        with exact_f32_matmul():
            combined = bf16(combine(routed["topk_weights"], pairs.view(T, cfg.top_k, -1).to(F32)))
            normed = rmsnorm_bf16(combined, p["norm"], cfg.rms_eps)
            routed_out = bf16(gemm(normed, p["up"]))
            shared = (glu_mlp(cfg, x, p["sh_gu"], p["sh_down"]) if p["sh_gu"] is not None
                      else torch.zeros_like(routed_out))
        out = bf16(routed_out.to(F32) + shared.to(F32))
        return {"combined": combined, "latent_normed": normed, "routed_out": routed_out,
                "shared_out": shared, "out": out}


class TorchEngineEPRank(MegakernelEPRank):
    """megakernel-ep's rank with the torch engine."""

    shift = 0          # the planted dispatch bug below: owners moved by one rank

    def prepare_rank(self, cfg, stage, shard, ctx):
        dims = SimpleNamespace(d=cfg.hidden, E=cfg.n_experts, k=cfg.top_k, r=cfg.latent_dim)
        owners = torch.tensor(ctx.layout.owners, dtype=torch.int64, device=ctx.device)
        if self.shift and cfg.n_experts % ctx.world:
            owners = (owners + self.shift) % ctx.world
        return {"engine": TorchEngine(cfg, shard), "owners": owners, "dims": dims}


class ShiftedOwnersRank(TorchEngineEPRank):
    shift = 1


class _SlotsSwapped(TorchEngine):
    def finish(self, x, routed, pairs):
        k = self.cfg.top_k
        p = pairs.view(x.shape[0], k, -1)
        return super().finish(x, routed, p[:, [1, 0] + list(range(2, k))].reshape(pairs.shape))


class SlotsSwappedRank(TorchEngineEPRank):
    """Each token's y rows of slots 0 and 1 combined with each other's weights: the mistake of a
    combine that puts returned rows back in arrival order instead of their (token, slot) place."""

    def prepare_rank(self, cfg, stage, shard, ctx):
        p = super().prepare_rank(cfg, stage, shard, ctx)
        p["engine"].__class__ = _SlotsSwapped
        return p


class TorchEngineEP(DistributedCandidate):
    name = "ep-step-torch"
    boundaries = {"n_experts": (16, 32)}
    rank_impl = "ep_torch:TorchEngineEPRank"


class ShiftedOwnersEP(DistributedCandidate):
    name = "ep-step-torch-shifted-owners"
    rank_impl = "ep_torch:ShiftedOwnersRank"


class SlotsSwappedEP(DistributedCandidate):
    name = "ep-step-torch-slots-swapped"
    rank_impl = "ep_torch:SlotsSwappedRank"
