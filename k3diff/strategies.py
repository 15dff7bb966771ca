"""Hypothesis strategies that draw Cases: shapes, ragged caches, state slots, routing and values.

Boundary values are favoured the way the vLLM K3 tests choose them (K3_SPEC §9): batch 1, 2, 3,
33, 64, 65, 73 (odd and > 64), 128; cache lengths 0 (first token), 1, 63, 64, 65 and a few long
ones; KDA slots shuffled, distinct, >= 1, with padding rows pointing at the null slot.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from k3diff.case import EXPERT_FORMATS, ROUTING_MODES, VALUE_DISTS, Case
from reference.config import ConfigError, preset

BOUNDARY_BATCHES = (1, 2, 3, 33, 64, 65, 73, 128)
BOUNDARY_LENS = (0, 1, 63, 64, 65)


@dataclass(frozen=True)
class Space:
    """How big the drawn cases may get; the profile and the device choose one."""
    preset: str = "tiny"
    max_batch: int = 256
    long_len: int = 600            # "long" MLA caches (>= 4096 on a GPU)
    vary_dims: bool = True         # draw dims around the preset
    expert_formats: tuple = EXPERT_FORMATS
    max_steps: int = 3


CPU_SPACE = Space()
GPU_SPACE = Space(preset="small", long_len=4200, vary_dims=False)


def batches(space: Space):
    return st.one_of(st.sampled_from([b for b in BOUNDARY_BATCHES if b <= space.max_batch]),
                     st.integers(1, space.max_batch))


def cache_lengths(batch: int, space: Space):
    one = st.one_of(st.sampled_from(BOUNDARY_LENS), st.integers(0, 128),
                    st.integers(space.long_len // 2, space.long_len))
    return st.lists(one, min_size=batch, max_size=batch).map(tuple)


@st.composite
def kda_slots(draw, batch: int):
    """(n_slots, state_idx): distinct live slots >= 1, shuffled, some rows padding (<= 0)."""
    n_pad = draw(st.integers(0, max(0, batch // 4)))
    extra = draw(st.integers(0, 3))
    n_slots = batch - n_pad + 1 + extra
    live = draw(st.permutations(range(1, n_slots)))[: batch - n_pad]
    pads = [draw(st.sampled_from([0, -1])) for _ in range(n_pad)]
    rows = list(live) + pads
    order = draw(st.permutations(range(batch)))
    return n_slots, tuple(rows[i] for i in order)


@st.composite
def dims_around(draw, stage: str, base: str):
    """Overrides of the tiny preset within ranges every implementation must handle."""
    cfg = preset(base)
    ov = {}
    if draw(st.booleans()):
        ov["hidden"] = draw(st.sampled_from([32, 64, 96, 128]))
    if stage in ("moe", "layer"):
        e = draw(st.sampled_from([cfg.n_experts, 8, 16, 24, 32]))
        ov["n_experts"] = e
        ov["top_k"] = draw(st.integers(1, min(8, e)))
        if draw(st.booleans()):
            groups = [g for g in (2, 4) if e % g == 0 and e // g >= 2]
            if groups:
                g = draw(st.sampled_from(groups))
                tg = draw(st.integers(1, g))
                if tg * (e // g) >= ov["top_k"]:
                    ov["n_group"], ov["topk_group"] = g, tg
        ov["latent_dim"] = draw(st.sampled_from([32, 64, 96]))
        ov["moe_intermediate"] = draw(st.sampled_from([32, 64]))
        ov["routed_scaling_factor"] = draw(st.sampled_from([1.0, 2.5]))
    if stage in ("mla", "layer"):
        ov["mla_heads"] = draw(st.sampled_from([1, 2, 3]))
        ov["kv_lora_rank"] = draw(st.sampled_from([16, 32, 48]))
    if stage in ("kda", "layer"):
        ov["kda_heads"] = draw(st.sampled_from([1, 2, 3]))
        ov["kda_head_dim"] = draw(st.sampled_from([8, 16, 32]))
    try:
        cfg.replace(**ov)
    except ConfigError:
        return ()
    return tuple(sorted(ov.items()))


@st.composite
def cases(draw, stage: str, space: Space = CPU_SPACE):
    overrides = draw(dims_around(stage, space.preset)) if space.vary_dims and draw(st.booleans()) else ()
    probe = Case(stage=stage, preset=space.preset, overrides=overrides)
    cfg = probe.config()
    batch = draw(batches(space))
    fields = dict(stage=stage, preset=space.preset, overrides=overrides, batch=batch,
                  value_dist=draw(st.sampled_from(VALUE_DISTS)),
                  weight_seed=draw(st.integers(0, 2)), seed=draw(st.integers(0, 2**31 - 1)))
    if stage == "layer":
        bk = cfg.attn_res_block_size
        fields["layer_idx"] = draw(st.one_of(
            st.sampled_from(sorted({0, bk, bk + 1, cfg.n_layers - 1} & set(range(cfg.n_layers)))),
            st.integers(0, cfg.n_layers - 1)))
    kind = Case(**fields).attention_kind
    if stage in ("moe", "layer"):
        fields["expert_format"] = draw(st.sampled_from(space.expert_formats))
    if stage == "moe":
        fields["routing"] = draw(st.sampled_from(ROUTING_MODES))
    if kind == "mla":
        fields["cache_lens"] = draw(cache_lengths(batch, space))
    if kind == "kda":
        fields["n_slots"], fields["state_idx"] = draw(kda_slots(batch))
    if kind is not None:
        fields["steps"] = draw(st.one_of(st.just(1), st.integers(1, space.max_steps)))
    return Case(**fields).validate()
