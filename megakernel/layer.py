"""One K3 decoder layer (docs/k3-decode.md §2.3) as a sequence of launches on the caller's stream:

  x_attn = AttnRes(prefix, delta, blocks, pre weights, n = nb, write wi)      k_attn_res.py
  a      = attention(x_attn)                  KDA (kda.py) or gated MLA (mla.py); a verify step's
                                              or an FP8 cache's through verify.py
  prefix = a (a block-write layer) | delta' = a (else)
  x_mlp  = AttnRes(prefix, delta', blocks, post weights, n = nb + W)          k_attn_res.py
  delta  = LatentMoE(x_mlp) (moe.py) | the dense SiTU MLP (layer 0; DenseMLP below)

nb = ceil(i / Bk), W = (i % Bk == 0), wi = i / Bk when W else -1 (`plan`, the same rule as
k3diff's torch-blocked wiring, written from docs/k3-decode.md). prefix and blocks are updated in place,
the caches and states by the attention step. Every kernel is batch-invariant and deterministic,
so the layer is.
Status: every GPU test and ci case passed at its first H200 run, so the backend
serves `layer` by default. The whole layer in one persistent launch is not written;
its schedule is (experimental/layer_graph.py, checked on the CPU).
"""
from dataclasses import replace

import torch

from megakernel import cache, config, gemv, verify
from megakernel.launch_streams import BIND as MOE_BIND, stream

OUTPUTS = ("delta", "x_attn", "attn_out", "x_mlp")


def plan(i: int, Bk: int):
    """(nb, W, wi) of layer i: the sources before the pre-attention mix, whether the layer writes
    a block (and restarts prefix at the attention output), the block it writes (-1: none)."""
    nb = -(-i // Bk)
    W = i % Bk == 0
    return nb, W, (i // Bk if W else -1)


def _sub(weights: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


class DenseMLP:
    """Layer 0's dense SiTU MLP on the shared-expert kernels (the same math as the MoE's shared
    branch, docs/k3-decode.md §5.4-5.5): s2 = x W_gu^T (f32), act = bf16(SiTU(bf16 gate, bf16 up)),
    out = bf16(act W_down^T)."""

    STAGES = ("gemv_shared", "shared_act", "out_shared")

    def __init__(self, dm, weights: dict, device, settings=None):
        self.settings = settings or config.current()
        self.dm = replace(dm, Is=weights["dense.down"].shape[1])
        bf = lambda t: t.to(device=device, dtype=torch.bfloat16).contiguous()  # noqa: E731
        self._w = dict(w_gu=bf(weights["dense.gate_up"]), w_sd=bf(weights["dense.down"]))

    def launch(self, x, out):
        T, dm = x.shape[0], self.dm
        s2 = torch.empty(T, 2 * dm.Is, dtype=torch.float32, device=x.device)
        acts = torch.empty(T, dm.Is, dtype=torch.bfloat16, device=x.device)
        named = dict(self._w, x=x, s2=s2, acts=acts, so=out, T=T, full_grid=gemv.FULL_GRID,
                     side_grid=gemv.FULL_GRID)
        st = stream()
        for name in self.STAGES:
            v = gemv.variant(name, T, self.settings.gemv) if name in MOE_BIND else {}
            cache.compiled(name, dm, **v)(named, st, MOE_BIND.get(name))


class LayerStep:
    def __init__(self, cfg, weights: dict, device, settings=None):
        """settings: a config.Settings for every step of the layer (None: config.current())."""
        from megakernel.dims import from_cfg, kda_from_cfg, mla_from_cfg
        self.cfg, self.device = cfg, device
        s = self.settings = settings or config.current()
        self.dm = from_cfg(cfg)
        f32 = lambda n: weights[n].to(device=device, dtype=torch.float32).reshape(-1)  # noqa: E731
        bf = lambda n: weights[n].to(device=device, dtype=torch.bfloat16).contiguous()  # noqa: E731
        # u = f32(w_norm) * f32(w_proj): one exact f32 product per element, as the spec asks
        self._pre = dict(u=(f32("attn_res.norm") * f32("attn_res.proj")).contiguous(),
                         w_out=bf("input_norm"))
        self._post = dict(u=(f32("mlp_res.norm") * f32("mlp_res.proj")).contiguous(),
                          w_out=bf("post_attn_norm"))
        attn, mlp = _sub(weights, "attn."), _sub(weights, "mlp.")
        self.kda = self.mla = self.moe = self.dense = None
        if "q_proj.weight" in attn:
            from megakernel.kda import KdaStep
            self.kda = KdaStep(kda_from_cfg(cfg), attn, device, settings=s)
        if "q_a.weight" in attn:
            from megakernel.mla import MlaStep
            self.mla = MlaStep(mla_from_cfg(cfg), attn, device, settings=s)
        if "router.weight" in mlp:
            from megakernel.moe import LatentMoE
            self.moe = LatentMoE(self.dm, mlp, device, settings=s)
        if "dense.gate_up" in mlp:
            self.dense = DenseMLP(self.dm, mlp, device, settings=s)

    def _attn_res(self, w, prefix, delta, blocks, out, n, wi):
        T, NB = prefix.shape[0], blocks.shape[1]
        named = dict(w, prefix=prefix, delta=prefix if delta is None else delta, blocks=blocks,
                     out=out, T=T, NB=NB, n=n, wi=wi, has_delta=int(delta is not None))
        cache.compiled("attn_res", self.dm)(named, stream())

    def launch(self, inputs: dict, out: dict):
        """Enqueue the layer; `out` holds the OUTPUTS buffers ([T, d] bf16, contiguous).
        inputs["max_len"] (optional): a bound on an MLA layer's cache_lens known on the host, so
        that a CUDA graph can hold the step (mla.MlaStep.launch)."""
        from megakernel.k_attn_res import MAX_SOURCES
        cfg = self.cfg
        i = int(inputs["layer_idx"])
        prefix, blocks, delta = inputs["prefix"], inputs["blocks"], inputs.get("delta")
        for t in (prefix, blocks) + (() if delta is None else (delta,)):
            assert t.dtype == torch.bfloat16 and t.is_contiguous()
        nb, W, wi = plan(i, cfg.attn_res_block_size)
        if nb + int(W) + 1 > MAX_SOURCES or nb + int(W) > blocks.shape[1]:
            raise ValueError(f"megakernel layer {i}: {nb + int(W) + 1} AttnRes sources exceed "
                             f"the kernel's {MAX_SOURCES} or the {blocks.shape[1]} block slots")
        self._attn_res(self._pre, prefix, delta, blocks, out["x_attn"], nb, wi)
        if cfg.is_kda_layer(i):
            if self.kda is None:
                raise KeyError(f"megakernel layer {i} is a KDA layer; no attn.* KDA weights given")
            s = verify.kda(self.kda, out["x_attn"], inputs["conv_state"], inputs["recurrent_state"],
                           inputs["state_idx"], inputs.get("query_lens"), inputs.get("accepted"),
                           inputs.get("conv_states"), inputs.get("recurrent_states"))
        else:
            if self.mla is None:
                raise KeyError(f"megakernel layer {i} is an MLA layer; no attn.* MLA weights given")
            s = verify.mla(self.mla, out["x_attn"], inputs["kv_cache"], inputs["cache_lens"],
                           inputs.get("query_lens"), max_len=inputs.get("max_len"))
        out["attn_out"].copy_(s["out"])
        if W:
            prefix.copy_(out["attn_out"])      # prefix restarts at the attention output
        self._attn_res(self._post, prefix, None if W else out["attn_out"], blocks, out["x_mlp"],
                       nb + int(W), -1)
        if cfg.is_moe_layer(i):
            if self.moe is None:
                raise KeyError(f"megakernel layer {i} is a MoE layer; no mlp.* MoE weights given")
            self.moe.launch(out["x_mlp"], forced_ids=inputs.get("forced_ids"), out=out["delta"])
        else:
            if self.dense is None:
                raise KeyError(f"megakernel layer {i} is dense; no mlp.dense.* weights given")
            self.dense.launch(out["x_mlp"], out["delta"])
