"""`run_stage`: the one entry point k3diff's reference backend calls.

    run_stage(stage, cfg, weights, inputs, mode="exact") -> dict[str, Tensor]

Returns every output k3diff/stages.py names for the stage, the updated state tensors under their
input names (kv_cache; conv_state, recurrent_state; prefix, blocks), and cheap diagnostics:
moe -> sel_gap [T] float64 (always float64); layer -> the attention and MLP intermediates as
"attn.<name>" / "mlp.<name>". Inputs and weights are never modified (every stage works on private
copies). It runs on the inputs' device (weights are moved there if needed).

`mode` is "exact", "faithful" or a Numerics; Numerics("exact", magnitudes=True) also returns, for
each accumulated output, its contraction over absolute values as "abs.<name>" (float64; the
state rules' "abs.kv_cache.new", "abs.conv_state.new" [S, 3P] by slot, "abs.recurrent_state"), for
k3diff's accumulation floor; every other output is bit for bit the same as without.

Dtypes: exact mode returns float64 for every float tensor; faithful mode returns the contract
dtype (bf16 or f32). Integer tensors (topk_ids int32) are returned as such.
"""
from __future__ import annotations

import math
import operator

import torch

from .config import ConfigError, K3Config, check_cache_lens
from . import fp8_cache
from .kda import check_state_idx, kda, kda_verify
from .layer import layer
from .materialize import weight_shapes
from .mla import mla
from .moe import dense_mlp, expert_format, latent_moe
from .numerics import Numerics, get

BF, F32, F64 = torch.bfloat16, torch.float32, torch.float64
OUT_DTYPES = {
    "moe": {"out": BF, "router_logits": F32, "topk_weights": F32, "latent": BF, "combined": BF,
            "latent_normed": BF, "routed_out": BF, "shared_out": BF, "sel_gap": F64, "dense_act": BF},
    "mla": {"out": BF, "q_c": BF, "kv_c": BF, "k_pe": BF, "ql": BF, "attn_latent": BF, "attn_out": BF,
            "gated": BF, "kv_cache": BF},
    "kda": {"out": BF, "conv_out": BF, "decay": F32, "beta": F32, "core": F32, "normed": BF,
            "conv_state": BF, "recurrent_state": F32, "conv_states": BF, "recurrent_states": F32},
    "layer": {"delta": BF, "x_attn": BF, "attn_out": BF, "x_mlp": BF, "prefix": BF, "blocks": BF,
              "kv_cache": BF, "conv_state": BF, "recurrent_state": F32, "conv_states": BF,
              "recurrent_states": F32},
}
STATE_NAMES = {"moe": (), "mla": ("kv_cache",),
               "kda": ("conv_state", "recurrent_state", "conv_states", "recurrent_states"),
               "layer": ("prefix", "blocks", "kv_cache", "conv_state", "recurrent_state", "conv_states",
                         "recurrent_states")}


def _dtype_of(stage: str, name: str) -> torch.dtype:
    if stage == "layer" and "." in name:                       # attn.<x> / mlp.<x> diagnostics
        head, rest = name.split(".", 1)
        table = OUT_DTYPES["moe"] if head == "mlp" else {**OUT_DTYPES["mla"], **OUT_DTYPES["kda"]}
        return table.get(rest, BF)
    return OUT_DTYPES[stage].get(name, BF)


def _expect(t, shape, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"input {name} is missing or not a tensor")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"input {name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def _check_weights(cfg, stage, weights, layer_idx):
    fmt = "mxfp4" if any(k.endswith("experts.w13_packed") for k in weights) else "bf16"
    if stage == "moe" and layer_idx == "dense":
        Id = cfg.dense_intermediate
        expected = {"dense.gate_up": ((2 * Id, cfg.hidden), None), "dense.down": ((cfg.hidden, Id), None)}
    else:
        expected = weight_shapes(cfg, stage, fmt, layer_idx)
    for name, (shape, _) in expected.items():
        if name not in weights:
            raise ValueError(f"weight {name} is missing for stage {stage}")
        t = weights[name]
        ok = tuple(t.shape) == tuple(shape) or (
            name.endswith(("A_log", "res.proj", "conv.weight")) and t.numel() >= _numel(shape))
        if not ok:
            raise ValueError(f"weight {name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def _numel(shape):
    return math.prod(shape)


def _check_verify(inputs, T) -> int:
    """The number of sequences B: T for a decode step; for a verify step (query_lens [B] given),
    B, after checking the widths (each >= 1) sum to the T rows."""
    w = inputs.get("query_lens")
    if w is None:
        return T
    if not isinstance(w, torch.Tensor) or w.dim() != 1:
        raise ValueError("input query_lens must be a [B] integer tensor")
    if w.numel() and int(w.min()) < 1:
        raise ValueError("query_lens must be >= 1 for every sequence")
    if int(w.sum()) != T:
        raise ValueError(f"query_lens sum to {int(w.sum())}, but the step has {T} token rows")
    return w.numel()


def _check_attention_inputs(cfg, kind, inputs, T):
    B = _check_verify(inputs, T)
    if kind == "mla":
        cache = inputs.get("kv_cache")
        if not isinstance(cache, torch.Tensor) or cache.dim() != 3:
            raise ValueError("input kv_cache must be a [B, Lcap, R+rope] tensor")
        fp8 = cache.dtype == torch.uint8
        if fp8 and fp8_cache.check(cfg):
            raise ValueError(fp8_cache.check(cfg))
        _expect(cache, (B, cache.shape[1], fp8_cache.row_bytes(cfg) if fp8 else cfg.mla_cache_dim), "kv_cache")
        _expect(inputs.get("cache_lens"), (B,), "cache_lens")
        w = inputs.get("query_lens")
        ends = inputs["cache_lens"] if w is None else inputs["cache_lens"] + w.to(torch.int64) - 1
        check_cache_lens(cfg, ends.tolist(), cache.shape[1])
    else:
        conv, rec = inputs.get("conv_state"), inputs.get("recurrent_state")
        if not isinstance(conv, torch.Tensor) or conv.dim() != 3:
            raise ValueError("input conv_state must be a [S, 3P, W-1] tensor")
        S = conv.shape[0]
        _expect(conv, (S, 3 * cfg.kda_proj, cfg.conv_width - 1), "conv_state")
        _expect(rec, (S, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim), "recurrent_state")
        _expect(inputs.get("state_idx"), (B,), "state_idx")
        check_state_idx(inputs["state_idx"], S)
        if "query_lens" in inputs:
            _expect(inputs.get("accepted"), (B,), "accepted")
            acc, w = inputs["accepted"].to(torch.int64), inputs["query_lens"].to(torch.int64)
            if bool(((acc < 0) | (acc > w)).any()):
                raise ValueError("accepted must lie in [0, query_lens] for every sequence")
            _expect(inputs.get("conv_states"), (T, 3 * cfg.kda_proj, cfg.conv_width - 1), "conv_states")
            _expect(inputs.get("recurrent_states"), (T, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim),
                    "recurrent_states")


def run_stage(stage: str, cfg: K3Config, weights: dict, inputs: dict, mode="exact") -> dict:
    """One decode step of `stage` ('moe', 'mla', 'kda', 'layer'); see the module docstring.

    moe: weights with dense.* keys run the dense MLP (layer 0) and return `out` (+ dense_act);
    inputs may hold forced_ids [T, k] (-1 = dropped route, see reference.router), also for a
    'layer' stage whose MLP is a MoE (to re-run downstream with a candidate's routing)."""
    num: Numerics = get(mode)
    cfg.validate()
    if stage not in OUT_DTYPES:
        raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(OUT_DTYPES)}")
    lead = inputs["prefix"] if stage == "layer" else inputs.get("x")
    if not isinstance(lead, torch.Tensor) or lead.dim() != 2 or lead.shape[1] != cfg.hidden:
        what = "prefix" if stage == "layer" else "x"
        raise ValueError(f"input {what} must be a [T, {cfg.hidden}] tensor")
    T, device = lead.shape[0], lead.device
    weights = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in weights.items()}
    inputs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}

    if stage == "moe":
        dense = "dense.gate_up" in weights
        _check_weights(cfg, "moe", weights, "dense" if dense else None)
        x = num.load(inputs["x"])
        if dense:
            res = dense_mlp(x, weights, cfg, num)
        else:
            expert_format(weights)
            res = latent_moe(x, weights, cfg, num, inputs.get("forced_ids"))
    elif stage in ("mla", "kda"):
        _check_weights(cfg, stage, weights, None)
        _check_attention_inputs(cfg, stage, inputs, T)
        x = num.load(inputs["x"])
        if stage == "mla":
            res = mla(x, inputs["kv_cache"], inputs["cache_lens"], weights, cfg, num, inputs.get("query_lens"))
        elif "query_lens" in inputs:
            res = kda_verify(x, inputs["conv_state"], inputs["recurrent_state"], inputs["state_idx"],
                             inputs["query_lens"], inputs["accepted"], inputs["conv_states"],
                             inputs["recurrent_states"], weights, cfg, num)
        else:
            res = kda(x, inputs["conv_state"], inputs["recurrent_state"], inputs["state_idx"], weights, cfg, num)
    else:
        i = inputs.get("layer_idx")
        try:
            i = operator.index(i)          # int, numpy or 0-d torch integer
        except TypeError:
            i = None
        if i is None or not 0 <= i < cfg.n_layers:
            raise ConfigError(f"layer_idx must be an int in [0, {cfg.n_layers}), got {inputs.get('layer_idx')!r}")
        inputs["layer_idx"] = i
        _check_weights(cfg, "layer", weights, i)
        _check_attention_inputs(cfg, cfg.layer_kind(i), inputs, T)
        _expect(inputs["blocks"], (T, cfg.n_blocks, cfg.hidden), "blocks")
        if inputs.get("delta") is not None:
            _expect(inputs["delta"], (T, cfg.hidden), "delta")
        res = layer(inputs, weights, cfg, num)

    out = {}
    for name, t in res.items():
        dt = _dtype_of(stage, name)
        # an FP8 cache stays the bytes it is (fp8_cache), in either mode
        out[name] = t if dt == F64 or t.dtype == torch.uint8 else num.out(t, dt)
        if name in STATE_NAMES[stage] and name not in _KEPT_BY_CONSTRUCTION and not num.exact:
            out[name] = _keep_bits(out[name], inputs.get(name))
    return out


# faithful `mla` copies the caller's cache in its own dtype and writes only the new rows (bf16
# values): every other bit is the caller's already, and the search for differing bits (a compare
# and a nonzero over the whole cache) was a third of a large faithful MLA call
_KEPT_BY_CONSTRUCTION = frozenset({"kv_cache"})


def _keep_bits(new: torch.Tensor, orig) -> torch.Tensor:
    """State elements whose value did not change keep the caller's exact bits.

    The working copy goes bf16 -> f32 -> bf16, which canonicalises NaN payloads (CPU turns 0x7FC0
    into 0xFFFF); a kernel never touches the rows it does not write, so "bitwise untouched" checks
    (NaN-filled free cache rows, unread block slots) must see the original bits."""
    if not isinstance(orig, torch.Tensor) or orig.dtype != new.dtype or orig.shape != new.shape:
        return new
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[new.element_size()]
    differ = (new.view(ints) != orig.view(ints)).nonzero(as_tuple=True)   # few, unless NaNs changed
    n, o = new[differ], orig[differ]
    new = new.clone()
    new[differ] = torch.where((n == o) | (torch.isnan(n) & torch.isnan(o)), o, n)
    return new
