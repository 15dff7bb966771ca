"""megakernel/ep.py's orchestration (`ep_step`: dispatch, the rank's experts, combine) with a
torch engine standing in for the kernels, so the CPU can judge the plumbing the megakernel-ep
backend runs on a GPU (tests/megakernel/test_mk_ep.py), over either exchange (ep_ipc.py's on
the CPU through shared file mappings). The math is torch-blocked's helpers
(k3diff/backends/blocked_moe.py). Also the GPU test's ranks with a fixed exchange and a planted
IPC bug (tests/megakernel/test_mk_ep_gpu.py), and the exchange probe both tests' CPU half runs.
Loaded by name in the ranks ("ep_torch:TorchEngineEPRank"), which get the test's sys.path."""
from types import SimpleNamespace

import torch

from k3diff.backends.blocked_moe import combine, glu_mlp, prepare_moe, route
from k3diff.backends.blocked_ops import F32, bf16, exact_f32_matmul, gemm, rmsnorm_bf16, situ
from k3diff.distributed import candidate
from megakernel import ep_ipc
from megakernel.ep import MegakernelEPRank, exchange


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


TorchEngineEP = candidate("ep-step-torch", "ep_torch:TorchEngineEPRank", boundaries={"n_experts": (16, 32)})
ShiftedOwnersEP = candidate("ep-step-torch-shifted-owners", "ep_torch:ShiftedOwnersRank")
SlotsSwappedEP = candidate("ep-step-torch-slots-swapped", "ep_torch:SlotsSwappedRank")


# ------------------------------------------------------------------ ep_ipc's exchange

class RowsOneOff(ep_ipc.IpcExchange):
    """The planted IPC bug: each block's rows written one row late in the receiver's buffer (its
    last row lost, its first place left stale), the ids where they belong."""

    def _put(self, peer, at, rows, ids):
        peer["ids"][at:at + ids.shape[0]].copy_(ids)
        peer["rows"][at + 1:at + rows.shape[0]].copy_(rows[:-1])


class TorchEngineIpcRank(TorchEngineEPRank):
    """The torch engine's rank over ep_ipc's exchange (on the CPU its buffers are shared file
    mappings: ep_ipc.choose never picks it there, so it is built here directly)."""

    ipc_class = ep_ipc.IpcExchange

    def prepare_rank(self, cfg, stage, shard, ctx):
        p = super().prepare_rank(cfg, stage, shard, ctx)
        p["ipc"] = self.ipc_class(ctx.group, ctx.rank, ctx.world, ctx.device, cfg.latent_dim)
        return p


class RowsOneOffTorchRank(TorchEngineIpcRank):
    ipc_class = RowsOneOff


TorchEngineIpcEP = candidate("ep-step-torch-ipc", "ep_torch:TorchEngineIpcRank", boundaries={"n_experts": (16, 32)})
RowsOneOffTorchEP = candidate("ep-step-torch-ipc-rows-one-off", "ep_torch:RowsOneOffTorchRank")


# the megakernel's rank with its exchange fixed (GPU tests)
class MkIpcRank(MegakernelEPRank):
    exchange = "ipc"                 # raises where IPC cannot run: never silently the other


class MkDistRank(MegakernelEPRank):
    exchange = "dist"


class MkRowsOneOffRank(MkIpcRank):
    ipc_class = RowsOneOff


class MkAutoRank(MegakernelEPRank):
    """The shipped rank (its exchange from the settings), failing a case unless it picked IPC."""

    def run_rank(self, stage, cfg, p, inputs, ctx):
        if p["ipc"] is None:
            raise RuntimeError(f"megakernel-ep picked torch.distributed ({self.exchange_setting()}) "
                               "on ranks sharing a GPU")
        return super().run_rank(stage, cfg, p, inputs, ctx)


MkIpcEP = candidate("megakernel-ep-ipc", "ep_torch:MkIpcRank", ranks_on_gpu=True)
MkDistEP = candidate("megakernel-ep-dist", "ep_torch:MkDistRank", ranks_on_gpu=True)
MkRowsOneOffEP = candidate("megakernel-ep-ipc-rows-one-off", "ep_torch:MkRowsOneOffRank", ranks_on_gpu=True)
MkAutoEP = candidate("megakernel-ep-auto", "ep_torch:MkAutoRank", ranks_on_gpu=True)


def probe_exchanges(rank, world, store, rounds, r, answers):
    """One gloo rank of test_mk_ep's exchange check (a spawned process): for each counts matrix
    of `rounds`, rows and ids sent through all_to_all_single (ep.exchange) and through
    IpcExchange (CPU: shared file mappings), then y = -rows back both ways; puts (rank, None) on
    `answers` when every buffer holds what the all-to-all gave, else (rank, the first mismatch).
    Also: pick() on these CPU ranks (auto: dist; ipc: refused)."""
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        group = dist.group.WORLD
        problems = []
        if ep_ipc.pick("auto", "cpu", group) != "dist":
            problems.append("auto picked ipc on CPU ranks")
        try:
            ep_ipc.pick("ipc", "cpu", group)
            problems.append("ipc was not refused on CPU ranks")
        except ValueError:
            pass
        ipc = ep_ipc.IpcExchange(group, rank, world, "cpu", r)
        for i, C in enumerate(rounds):
            sc, rc = C[rank], [C[s][rank] for s in range(world)]
            g = torch.Generator().manual_seed(1000 * i + rank)
            rows = torch.randn(sum(sc), r, generator=g).to(torch.bfloat16)
            ids = torch.arange(sum(sc), dtype=torch.int64) + 10_000 * rank
            want_rows, want_ids = exchange(rows, sc, rc, group), exchange(ids, sc, rc, group)
            back = exchange(-want_rows, rc, sc, group)
            got_C = ipc.counts(torch.tensor(sc))
            ipc.dispatch(got_C, rows, ids)
            ipc.fence()
            got_rows, got_ids = ipc.received(got_C)
            a = sum(rc[:rank])                     # our own block in the all-to-all's output
            keep = torch.cat([torch.arange(a), torch.arange(a + rc[rank], sum(rc))]).long()
            ipc.combine(got_C, -got_rows)
            ipc.fence()
            s = sum(sc[:rank])
            got_back = torch.cat([ipc.returned(got_C)[:s], -rows[s:s + sc[rank]], ipc.returned(got_C)[s:]])
            for what, ok in (("counts", got_C == [list(c) for c in C]),
                             ("rows", torch.equal(got_rows, want_rows[keep])),
                             ("ids", torch.equal(got_ids, want_ids[keep])),
                             ("y back", torch.equal(got_back, back)),
                             ("capacity", ipc.cap >= max(ep_ipc.remote(C, d, True) for d in range(world)))):
                if not ok:
                    problems.append(f"round {i}: {what} differ")
            dist.barrier(group=group)    # the next round writes the buffers the check read
        cap = ipc.cap
        ipc.close()                      # every rank unmaps before any owner leaves
        if ipc.bufs or ipc.cap:
            problems.append("close() kept the mappings")
        answers.put((rank, "; ".join(problems) or None, cap))
    except BaseException as exc:  # noqa: BLE001 - to the test, which would otherwise wait
        answers.put((rank, f"{type(exc).__name__}: {exc}", 0))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
