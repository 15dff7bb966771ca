"""One whole K3 decoder layer, decode step (docs/k3-decode.md §2.3).

    x_attn = AttnRes(prefix, delta, blocks, attn_res.*, input_norm, n = ceil(i/Bk), write = i/Bk if i%Bk==0)
    a      = KDA or MLA (cfg.is_kda_layer(i))(x_attn)
    if i % Bk == 0: prefix = a (the prefix restarts at the attention output), dlt = None
    else:           dlt = a   (added by the next AttnRes)
    x_mlp  = AttnRes(prefix, dlt, blocks, mlp_res.*, post_attn_norm, n = ceil(i/Bk) + [i%Bk==0])
    delta  = dense MLP (i < first_k_dense_replace) or LatentMoE (x_mlp)

Weights: attn_res.norm, attn_res.proj, input_norm, mlp_res.norm, mlp_res.proj, post_attn_norm,
then attn.<mla|kda names> and mlp.<moe|dense names> (k3diff/stages.py).
"""
from __future__ import annotations

from .attn_res import attn_res
from .kda import kda, kda_verify
from .mla import mla
from .moe import dense_mlp, latent_moe
from .numerics import Numerics


def sub(weights: dict, prefix: str) -> dict:
    """The weights under `prefix.`, with the prefix stripped."""
    p = prefix + "."
    return {k[len(p):]: v for k, v in weights.items() if k.startswith(p)}


def block_schedule(cfg, i: int) -> tuple[int, bool, int]:
    """(n sources before prefix for the pre-attention mix, is block-write layer, write slot)."""
    Bk = cfg.attn_res_block_size
    write = i % Bk == 0
    return -(-i // Bk), write, (i // Bk if write else -1)


def layer(inputs: dict, weights: dict, cfg, num: Numerics) -> dict:
    i = int(inputs["layer_idx"])
    nb, write, wi = block_schedule(cfg, i)
    eps = cfg.rms_eps
    prefix = num.load(inputs["prefix"])
    delta = inputs.get("delta")
    delta = None if delta is None else num.load(delta)
    blocks = num.load(inputs["blocks"])

    x_attn, prefix, blocks = attn_res(prefix, delta, blocks, weights["attn_res.norm"], weights["attn_res.proj"],
                                      weights["input_norm"], nb, wi, num, eps, eps)
    aw = sub(weights, "attn")
    verify = inputs.get("query_lens")           # a verify step (docs/k3-decode.md §14.5): T = Σ W_b tokens
    if cfg.is_kda_layer(i) and verify is not None:
        att = kda_verify(x_attn, inputs["conv_state"], inputs["recurrent_state"], inputs["state_idx"], verify,
                         inputs["accepted"], inputs["conv_states"], inputs["recurrent_states"], aw, cfg, num)
        state = {k: att.pop(k) for k in ("conv_state", "recurrent_state", "conv_states", "recurrent_states")}
    elif cfg.is_kda_layer(i):
        att = kda(x_attn, inputs["conv_state"], inputs["recurrent_state"], inputs["state_idx"], aw, cfg, num)
        state = {"conv_state": att.pop("conv_state"), "recurrent_state": att.pop("recurrent_state")}
    else:
        att = mla(x_attn, inputs["kv_cache"], inputs["cache_lens"], aw, cfg, num, verify)
        state = {"kv_cache": att.pop("kv_cache")}
    a = att["out"]
    if write:
        prefix, dlt = a, None
    else:
        dlt = a
    x_mlp, prefix, blocks = attn_res(prefix, dlt, blocks, weights["mlp_res.norm"], weights["mlp_res.proj"],
                                     weights["post_attn_norm"], nb + int(write), -1, num, eps, eps)
    mw = sub(weights, "mlp")
    if cfg.is_moe_layer(i):
        mlp = latent_moe(x_mlp, mw, cfg, num, inputs.get("forced_ids"))
    else:
        mlp = dense_mlp(x_mlp, mw, cfg, num)

    res = {"delta": mlp["out"], "x_attn": x_attn, "attn_out": a, "x_mlp": x_mlp,
           "prefix": prefix, "blocks": blocks, **state}
    # the state magnitudes keep the state rules' names (abs.kv_cache.new, abs.recurrent_state, ...)
    res.update({k: att.pop(k) for k in ("abs.kv_cache.new", "abs.conv_state.new", "abs.recurrent_state",
                                         "abs.conv_states.new", "abs.recurrent_states") if k in att})
    res.update({_inner("attn", k): v for k, v in att.items() if k != "out"})
    res.update({_inner("mlp", k): v for k, v in mlp.items() if k != "out"})
    if num.magnitudes:   # the layer's tensors by their layer names; the AttnRes outputs are norms
        res.update({"abs.delta": mlp["abs.out"], "abs.attn_out": att["abs.out"], "abs.x_attn": x_attn.abs(),
                    "abs.x_mlp": x_mlp.abs()})
    return res


def _inner(part: str, name: str) -> str:
    """A sub-block's tensor under the layer's name for it: attn.q_c, and abs.attn.q_c for its magnitude."""
    return f"abs.{part}.{name[4:]}" if name.startswith("abs.") else f"{part}.{name}"
