"""`torch-blocked`: a second, independent bf16 implementation of one K3 decode step, laid out the
way a fused kernel would be (expert-grouped tokens, split-K GEMMs, split-KV attention with a
log-sum-exp merge). It is the candidate on machines without a GPU.

Independence: nothing here imports `reference/` or shares its math; every formula is written from
docs/k3-decode.md. bf16 roundings happen only at the docs/k3-decode.md §7 points, all accumulation is f32.

Files: blocked_ops.py (helpers), blocked_moe.py (MoE, dense MLP), blocked_attn.py (MLA, KDA), and
this one (AttnRes, the layer wiring, the Backend object).
"""
from __future__ import annotations

import math

import torch

from k3diff.backends.base import Backend

from .blocked_attn import prepare_kda, prepare_mla, run_kda, run_kda_verify, run_mla
from .blocked_moe import _get, glu_mlp, prepare_dense, prepare_moe, run_moe
from .blocked_ops import F32, bf16, exact_f32_matmul, exp, rms_scale


def attn_res(prefix, delta, blocks, w_norm, w_proj, w_out, n: int, write_idx: int, eps: float,
             eps_out: float):
    """AttnRes (docs/k3-decode.md §2.2). Updates `prefix` (add) and `blocks` (write) in place; returns bf16."""
    if delta is not None:
        prefix.copy_(bf16(prefix.to(F32) + delta.to(F32)))     # one rounding, seen by all later steps
    if write_idx >= 0:
        blocks[:, write_idx] = prefix                            # bit copy
    if n == 0:
        mix = prefix.to(F32)                                     # single source: no softmax
    else:
        u = w_norm.to(F32).reshape(-1) * w_proj.to(F32).reshape(-1)
        # online softmax over depth sources blocks[0..n-1], then prefix (kernel order)
        run_max = run_sum = acc = None
        for j in range(n + 1):
            vj = (blocks[:, j] if j < n else prefix).to(F32)
            logit = (vj * u).sum(-1, keepdim=True) * rms_scale(vj, eps)   # key: RMS-normalised, no w_norm
            if run_max is None:
                run_max, run_sum, acc = logit, torch.ones_like(logit), vj
                continue
            new_max = torch.maximum(run_max, logit)
            old_f, new_f = exp(run_max - new_max), exp(logit - new_max)
            run_sum = run_sum * old_f + new_f
            acc = acc * old_f + vj * new_f                       # mix over un-normalised values
            run_max = new_max
        mix = acc / run_sum
    if w_out is None:
        return bf16(mix)
    return bf16(mix * rms_scale(mix, eps_out) * w_out.to(F32).reshape(-1))


def _sub(weights: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


class TorchBlockedBackend(Backend):
    name = "torch-blocked"
    deterministic = True
    batch_invariant = False          # split-KV / expert grouping depend on the batch composition
    graph_safe = False               # host reads (.tolist(), int(max), nonzero) size its loops: a CUDA graph
                                     # cannot hold them; torch-blocked-graph (blocked_graph.py) can be captured
    stages = ("moe", "mla", "kda", "layer")

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        """Every dims and both verify steps and the FP8 cache (k3diff/features.py)."""
        return None

    # ------------------------------------------------------------------ prepare
    def prepare(self, cfg, stage, weights):
        """Fuse/dequantise once; `weights` is only read (new tensors or read-only views)."""
        if stage == "moe":
            # moe with only dense.* weights = layer 0's dense MLP; then only `out` exists
            if _get(weights, "router.weight") is None and _get(weights, "dense.gate_up") is not None:
                return {"dense": prepare_dense(cfg, weights)}
            return {"moe": prepare_moe(cfg, weights)}
        if stage == "mla":
            return {"mla": prepare_mla(cfg, weights)}
        if stage == "kda":
            return {"kda": prepare_kda(cfg, weights)}
        if stage != "layer":
            raise KeyError(f"torch-blocked: unknown stage {stage!r}")
        attn, mlp = _sub(weights, "attn."), _sub(weights, "mlp.")
        p = {k: _get(weights, k) for k in ("attn_res.norm", "attn_res.proj", "input_norm",
                                           "mlp_res.norm", "mlp_res.proj", "post_attn_norm")}
        if _get(attn, "q_a.weight") is not None:
            p["mla"] = prepare_mla(cfg, attn)
        if _get(attn, "q_proj.weight") is not None:
            p["kda"] = prepare_kda(cfg, attn)
        if _get(mlp, "router.weight") is not None:
            p["moe"] = prepare_moe(cfg, mlp)
        if _get(mlp, "dense.gate_up") is not None:
            p["dense"] = prepare_dense(cfg, mlp)
        return p

    # ------------------------------------------------------------------ run
    def run(self, stage, cfg, prepared, inputs, out) -> None:
        with torch.no_grad(), exact_f32_matmul():
            if stage == "moe" and "dense" in prepared:
                d = prepared["dense"]
                res = {"out": glu_mlp(cfg, inputs["x"], d["gu"], d["down"])}
            elif stage == "moe":
                res = run_moe(cfg, prepared["moe"], inputs["x"], inputs.get("forced_ids"))
            elif stage == "mla":
                res = self.run_mla_attention(cfg, prepared["mla"], inputs["x"], inputs["kv_cache"],
                                             inputs["cache_lens"], **_verify_inputs(inputs, "mla"))
            elif stage == "kda":
                res = self.run_kda_attention(cfg, prepared["kda"], inputs["x"], inputs["conv_state"],
                                             inputs["recurrent_state"], inputs["state_idx"],
                                             **_verify_inputs(inputs, "kda"))
            elif stage == "layer":
                res = self._layer(cfg, prepared, inputs)
            else:
                raise KeyError(f"torch-blocked: unknown stage {stage!r}")
            for name, buf in out.items():
                if name in res:          # always true except the dense-MLP moe case above
                    buf.copy_(res[name])

    def _layer(self, cfg, p: dict, inputs: dict) -> dict:
        """One decoder layer, wired as docs/k3-decode.md §2.3."""
        i = int(inputs["layer_idx"])
        prefix, blocks, delta = inputs["prefix"], inputs["blocks"], inputs.get("delta")
        Bk, eps = cfg.attn_res_block_size, cfg.rms_eps
        nb = math.ceil(i / Bk)
        writes = i % Bk == 0
        x_attn = attn_res(prefix, delta, blocks, p["attn_res.norm"], p["attn_res.proj"], p["input_norm"],
                          n=nb, write_idx=i // Bk if writes else -1, eps=eps, eps_out=eps)
        if cfg.is_kda_layer(i):
            a = self.run_kda_attention(cfg, self._need(p, "kda", i), x_attn, inputs["conv_state"],
                                       inputs["recurrent_state"], inputs["state_idx"],
                                       **_verify_inputs(inputs, "kda"))["out"]
        else:
            a = self.run_mla_attention(cfg, self._need(p, "mla", i), x_attn, inputs["kv_cache"],
                                       inputs["cache_lens"], **_verify_inputs(inputs, "mla"))["out"]
        if writes:
            prefix.copy_(a)            # prefix restarts at the attention output
            dlt = None
        else:
            dlt = a                    # added in the next AttnRes call
        x_mlp = attn_res(prefix, dlt, blocks, p["mlp_res.norm"], p["mlp_res.proj"], p["post_attn_norm"],
                         n=nb + int(writes), write_idx=-1, eps=eps, eps_out=eps)
        if cfg.is_moe_layer(i):
            new_delta = run_moe(cfg, self._need(p, "moe", i), x_mlp, inputs.get("forced_ids"))["out"]
        else:
            d = self._need(p, "dense", i)
            new_delta = glu_mlp(cfg, x_mlp, d["gu"], d["down"])
        return {"delta": new_delta, "x_attn": x_attn, "attn_out": a, "x_mlp": x_mlp}

    # the layer's attention, one hook per kind: a backend that composes this layer wiring with
    # another attention implementation (k3diff/backends/fla_kda.py, flashinfer_mla.py) overrides one
    # A verify step (docs/k3-decode.md §14) adds keyword arguments (`_verify_inputs`); a decode
    # step passes none, so an override that serves decode only keeps its old signature.
    def run_kda_attention(self, cfg, p, x, conv_state, rec_state, state_idx, **verify) -> dict:
        if verify:
            return run_kda_verify(cfg, p, x, conv_state, rec_state, state_idx, **verify)
        return run_kda(cfg, p, x, conv_state, rec_state, state_idx)

    def run_mla_attention(self, cfg, p, x, kv_cache, cache_lens, **verify) -> dict:
        return run_mla(cfg, p, x, kv_cache, cache_lens, **verify)

    @staticmethod
    def _need(p: dict, part: str, i: int) -> dict:
        if part not in p:
            raise KeyError(f"torch-blocked: layer {i} needs {part} weights (attn.*/mlp.*), none were given")
        return p[part]


def _verify_inputs(inputs: dict, kind: str) -> dict:
    """A verify step's extra inputs for the attention hooks (none in a decode step)."""
    if "query_lens" not in inputs:
        return {}
    if kind == "mla":
        return {"query_lens": inputs["query_lens"]}
    return {"query_lens": inputs["query_lens"], "accepted": inputs["accepted"],
            "conv_states": inputs["conv_states"], "rec_states": inputs["recurrent_states"]}


BACKEND = TorchBlockedBackend()
