"""The four stages k3diff compares, and the named tensors each one produces.

This table is the contract between k3diff and every backend. For each stage it lists
- the outputs a backend writes into buffers the framework allocates (poisoned with NaN, or holding
  a previous case's results, before every launch), with their shapes and dtypes, and
- the inputs the stage updates in place (its state); every other input must come back bitwise
  unchanged.

Inputs, by stage (all tensors; T = tokens = sequences in a decode step, Σ W_b in a verify step):
  moe:   x [T, d] bf16; optional forced_ids [T, k] int32 (-1 = dropped route)
  mla:   x [T, d] bf16; kv_cache [T, Lcap, R + rope] bf16 (in place: row L_b is written);
         cache_lens [T] int64 (L_b, entries cached before this step)
  kda:   x [T, d] bf16; conv_state [S, 3P, W-1] bf16 and recurrent_state [S, H, D, D] f32
         (both in place; recurrent layout [slot][head][v][k]); state_idx [T] int64 (<= 0: null row)
  layer: prefix [T, d] bf16 (in place); delta [T, d] bf16 (absent at layer 0);
         blocks [T, NB, d] bf16 (in place); layer_idx (int, in `inputs`);
         plus the mla or kda inputs above for that layer's attention.

Verify steps (docs/k3-decode.md §14; the case's `widths`): sequence b brings W_b tokens, rows laid
out sequence by sequence, T = Σ W_b (every [T, ...] above and every output holds T rows). Extra
inputs of the mla, kda and layer stages (absent in a decode step, which is bit for bit as above):
  query_lens [B] int64   W_b per sequence (>= 1); cache_lens, state_idx and the caches are per
                         sequence: kv_cache [B, Lcap, ...], cache_lens [B], state_idx [B]
  mla:   the W_b entries are written at rows L_b .. L_b+W_b-1; token j attends rows 0 .. L_b+j
  kda:   accepted [B] int64 (0 <= a_b <= W_b); conv_states [T, 3P, W-1] bf16 and
         recurrent_states [T, H, D, D] f32, in place: the state after each token at its row (a null
         sequence's rows untouched); the slot ends holding the state after token a_b - 1
         (a_b = 0: unchanged)
The moe stage takes no extra input: its T rows are the step's tokens.
FP8 latent cache (§15; the case's `cache_format` "fp8"): kv_cache is uint8 [B, Lcap, R + 4·R/t +
2·rope] in reference.fp8_cache's layout (e4m3 kv_c, float32 scale per tile of t, bf16 k_pe); a
kernel tells the formats apart by the dtype.

Weights, by stage (names under `weights`; shapes as in docs/k3-decode.md §1.3, checkpoint order W[out, in]):
  moe:   router.weight [E, d] bf16, router.bias [E] f32, down.weight [r, d], latent_norm.weight [r],
         up.weight [d, r], shared.gate_up [2*Is, d] ([gate | up] rows), shared.down [d, Is];
         experts as bf16: experts.w13 [E, 2I, r] ([w1 gate | w3 up] rows), experts.w2 [E, r, I];
         or as MXFP4: experts.w13_packed [E, 2I, r/2] u8, experts.w13_scale [E, 2I, r/32] u8,
         experts.w2_packed [E, r, I/2] u8, experts.w2_scale [E, r, I/32] u8.
         Dense MLP (layer 0 only): dense.gate_up [2*Id, d], dense.down [d, Id].
  mla:   q_a.weight [q_lora, d], kv_a.weight [R + rope, d], q_a_norm.weight [q_lora],
         kv_a_norm.weight [R], q_b.weight [H*(nope+rope), q_lora], kv_b.weight [H*(nope+v), R],
         g.weight [H*v, d], o.weight [d, H*v]  (all bf16)
  kda:   q_proj / k_proj / v_proj / g_proj .weight [P, d], f_a.weight [D, d], f_b.weight [P, D],
         b_proj.weight [H, d], o_proj.weight [d, P], o_norm.weight [D] (bf16);
         conv.weight [3P, W] f32 (q, k, v channels), A_log [H] f32, dt_bias [P] f32
  layer: attn_res.norm / attn_res.proj / input_norm / mlp_res.norm / mlp_res.proj /
         post_attn_norm [d] bf16, then attn.<mla or kda names> and mlp.<moe or dense names>.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

STAGES = ("moe", "mla", "kda", "layer")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    shape: tuple          # of ints or names resolved by `resolve_shape`
    doc: str
    final: bool = False   # the stage's production output (always written, also without debug)


def _moe_outputs():
    return [
        TensorSpec("out", torch.bfloat16, ("T", "d"), "MoE output delta = bf16(yu + ys)", final=True),
        TensorSpec("router_logits", torch.float32, ("T", "E"), "x W_r^T, f32, not rounded"),
        TensorSpec("topk_ids", torch.int32, ("T", "k"), "selected experts (order free; -1 dropped)"),
        TensorSpec("topk_weights", torch.float32, ("T", "k"), "renormalised unbiased scores x rsf"),
        TensorSpec("latent", torch.bfloat16, ("T", "r"), "hl = bf16(x W_down^T)"),
        TensorSpec("combined", torch.bfloat16, ("T", "r"), "yc = bf16(sum_j w_j y_j)"),
        TensorSpec("latent_normed", torch.bfloat16, ("T", "r"), "RMSNorm(yc)"),
        TensorSpec("routed_out", torch.bfloat16, ("T", "d"), "yu = bf16(yn W_up^T)"),
        TensorSpec("shared_out", torch.bfloat16, ("T", "d"), "ys, merged shared experts"),
    ]


def _mla_outputs():
    return [
        TensorSpec("out", torch.bfloat16, ("T", "d"), "a = bf16(y W_o^T)", final=True),
        TensorSpec("q_c", torch.bfloat16, ("T", "q_lora"), "normed q latent"),
        TensorSpec("kv_c", torch.bfloat16, ("T", "R"), "normed kv latent (new cache entry, first part)"),
        TensorSpec("k_pe", torch.bfloat16, ("T", "rope"), "new cache entry, second part"),
        TensorSpec("ql", torch.bfloat16, ("T", "H", "R"), "absorbed query latent"),
        TensorSpec("attn_latent", torch.bfloat16, ("T", "H", "R"), "lat = bf16(sum_t p_t C_t)"),
        TensorSpec("attn_out", torch.bfloat16, ("T", "H", "v"), "o = bf16(lat W_UV^T)"),
        TensorSpec("gated", torch.bfloat16, ("T", "Hv"), "y = bf16(o * sigmoid(gz))"),
    ]


def _kda_outputs():
    return [
        TensorSpec("out", torch.bfloat16, ("T", "d"), "a = bf16(n W_o^T); null rows exactly 0", final=True),
        TensorSpec("conv_out", torch.bfloat16, ("T", "3P"), "y = bf16(silu(conv)), q|k|v"),
        TensorSpec("decay", torch.float32, ("T", "Hk", "D"), "gk = lb * sigmoid(a_h (graw + dt_bias))"),
        TensorSpec("beta", torch.float32, ("T", "Hk"), "sigmoid(beta_raw)"),
        TensorSpec("core", torch.float32, ("T", "Hk", "D"), "o = S_new q_hat (before the gated norm)"),
        TensorSpec("normed", torch.bfloat16, ("T", "P"), "n = gated RMSNorm(o)"),
    ]


def _layer_outputs():
    return [
        TensorSpec("delta", torch.bfloat16, ("T", "d"), "the layer's MLP/MoE output", final=True),
        TensorSpec("x_attn", torch.bfloat16, ("T", "d"), "pre-attention AttnRes output"),
        TensorSpec("attn_out", torch.bfloat16, ("T", "d"), "attention output a"),
        TensorSpec("x_mlp", torch.bfloat16, ("T", "d"), "post-attention AttnRes output"),
    ]


OUTPUTS = {"moe": _moe_outputs(), "mla": _mla_outputs(), "kda": _kda_outputs(),
           "layer": _layer_outputs()}

# inputs each stage updates in place; anything else must come back bitwise unchanged
# (conv_states and recurrent_states, the per-token states, exist in verify steps only)
STATE = {"moe": (), "mla": ("kv_cache",),
         "kda": ("conv_state", "recurrent_state", "conv_states", "recurrent_states"),
         "layer": ("prefix", "blocks", "kv_cache", "conv_state", "recurrent_state", "conv_states",
                   "recurrent_states")}


def dims(cfg, stage: str, inputs: dict) -> dict:
    """Name -> size for the symbolic shapes above."""
    T = inputs["x"].shape[0] if "x" in inputs else inputs["prefix"].shape[0]
    return {
        "T": T, "d": cfg.hidden, "E": cfg.n_experts, "k": cfg.top_k, "r": cfg.latent_dim,
        "q_lora": cfg.q_lora_rank, "R": cfg.kv_lora_rank, "rope": cfg.qk_rope_dim, "H": cfg.mla_heads,
        "v": cfg.v_head_dim, "Hv": cfg.mla_heads * cfg.v_head_dim, "3P": 3 * cfg.kda_proj,
        "P": cfg.kda_proj, "Hk": cfg.kda_heads, "D": cfg.kda_head_dim,
    }


def resolve_shape(spec: TensorSpec, sizes: dict) -> tuple[int, ...]:
    return tuple(sizes[s] if isinstance(s, str) else int(s) for s in spec.shape)


def output_specs(stage: str, names=None) -> list[TensorSpec]:
    if stage not in OUTPUTS:
        raise KeyError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
    specs = OUTPUTS[stage]
    return specs if names is None else [s for s in specs if s.name in names]
