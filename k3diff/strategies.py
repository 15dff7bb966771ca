"""Hypothesis strategies that draw Cases: shapes, ragged caches, state slots, routing and values.

Boundary values are favoured the way the vLLM K3 tests choose them (K3_SPEC §9): batch 1, 2, 3,
33, 64, 65, 73 (odd and > 64), 128; cache lengths 0 (first token), 1, 63, 64, 65 and a few long
ones; KDA slots shuffled, distinct, >= 1, with padding rows pointing at the null slot.

Kernel-declared boundaries (issue 12). A backend may publish `boundaries`: {dimension: sizes at
which its code changes path} (k3diff/backends/base.py). `with_boundaries(space, backend)` puts
them in the space, and every dimension named there is drawn on and around each size (n - step, n,
n + step; step 1, or the dimension's granularity, e.g. 32 for MXFP4 K dims) with probability
about 2/3, the rest from the dimension's ordinary range. Dimensions: batch, cache_len, n_experts,
top_k, latent_dim, moe_intermediate, hidden.

Spaces: `tiny` (CPU), `small` (one GPU) and `full` (issue 12, "fuzz where production runs"): moe
cases at the real K3 dims (d 7168, r 3584, I 3072) with E in {896, 256, 257, 512} plus the
declared boundaries, top-k 1..16, both expert formats, routed_scaling_factor 1.0 and 2.5, batch
1..256 -- mixed half and half with `small`-dims cases (E around the same boundaries) for speed.
Full-dims weights are drawn on the device (k3diff.materialize.draw_on) with weight seed 0, so one
weight set per dims is drawn and cached. The other stages of the full space use the small dims.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st

from k3diff.case import EXPERT_FORMATS, ROUTING_MODES, VALUE_DISTS, Case
from k3diff.ep_config import draw_ep
from reference.config import ConfigError, preset

BOUNDARY_BATCHES = (1, 2, 3, 33, 64, 65, 73, 128)
BOUNDARY_LENS = (0, 1, 63, 64, 65)
PRODUCTION_EXPERTS = (256, 257, 512, 896)      # E the full space draws besides the preset's
BOUNDARY_DIMS = ("batch", "cache_len", "n_experts", "top_k", "latent_dim", "moe_intermediate", "hidden")
# the step of "around" a boundary: dims that must stay multiples of the MXFP4 group move by 32
STEP = {"latent_dim": 32, "moe_intermediate": 32, "hidden": 32}


@dataclass(frozen=True)
class Space:
    """How big the drawn cases may get; the profile, the device and the backend choose one."""
    preset: str = "tiny"
    max_batch: int = 256
    long_len: int = 600            # "long" MLA caches (>= 4096 on a GPU)
    vary_dims: bool = True         # draw dims around the preset
    expert_formats: tuple = EXPERT_FORMATS
    max_steps: int = 3
    boundaries: tuple = ()         # ((dimension, (sizes, ...)), ...): the backend's, see with_boundaries
    production: bool = False       # moe/layer dims at the preset's real sizes, E/top-k around boundaries
    mix: str | None = None         # another space's preset drawn for half of the cases (full: small)
    weight_seeds: int = 3          # weight seeds 0 .. n-1 (1 where a weight set is huge)
    ranks: int = 0                 # moe cases on this many ranks (k3diff/ep_config.py); 0: one device

    def around(self, name: str) -> tuple:
        """The declared sizes of `name` (empty when the backend declared none)."""
        return dict(self.boundaries).get(name, ())


CPU_SPACE = Space()
GPU_SPACE = Space(preset="small", long_len=4200, vary_dims=False)
SMALL_MIX = Space(preset="small", long_len=4200, vary_dims=True, production=True, weight_seeds=1)
FULL_SPACE = Space(preset="full", long_len=4200, vary_dims=True, production=True, mix="small",
                   weight_seeds=1)
SPACES = {"tiny": CPU_SPACE, "small": GPU_SPACE, "full": FULL_SPACE}


def normalize_boundaries(declared) -> tuple:
    """A backend's `boundaries` attribute as a frozen, sorted tuple; ValueError on a bad one."""
    if not declared:
        return ()
    if not isinstance(declared, dict):
        raise ValueError(f"backend boundaries must be a dict of dimension -> sizes, got {type(declared).__name__}")
    out = []
    for name, sizes in declared.items():
        if name not in BOUNDARY_DIMS:
            raise ValueError(f"unknown boundary dimension {name!r} (known: {', '.join(BOUNDARY_DIMS)})")
        sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
        if not sizes or not all(isinstance(n, int) and n >= 0 for n in sizes):
            raise ValueError(f"boundary sizes of {name!r} must be non-negative ints, got {sizes!r}")
        out.append((name, tuple(sorted(set(sizes)))))
    return tuple(sorted(out))


def with_boundaries(space: Space, backend) -> Space:
    """The space with the backend's declared boundaries (unchanged if it declares none)."""
    found = normalize_boundaries(getattr(backend, "boundaries", None)) if backend is not None else ()
    return replace(space, boundaries=found) if found else space


def near_values(space: Space, name: str, lo: int, hi: int, ok=lambda n: True) -> list:
    """n - step, n, n + step around each declared size of `name`, kept within [lo, hi] and ok()."""
    step = STEP.get(name, 1)
    vals = {v for n in space.around(name) for v in (n - step, n, n + step)}
    return sorted(v for v in vals if lo <= v <= hi and ok(v))


def _favour(space: Space, name: str, base, lo: int, hi: int, ok=lambda n: True):
    """`base`, or (about 2/3 of the time) a value on or around a declared boundary of `name`."""
    vals = near_values(space, name, lo, hi, ok)
    if not vals:
        return base
    at = st.sampled_from(vals)
    return st.one_of(at, at, base)


def batches(space: Space):
    base = st.one_of(st.sampled_from([b for b in BOUNDARY_BATCHES if b <= space.max_batch]),
                     st.integers(1, space.max_batch))
    return _favour(space, "batch", base, 1, space.max_batch)


def cache_lengths(batch: int, space: Space):
    one = st.one_of(st.sampled_from(BOUNDARY_LENS), st.integers(0, 128),
                    st.integers(space.long_len // 2, space.long_len))
    one = _favour(space, "cache_len", one, 0, space.long_len)
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


def _experts_and_k(draw, space: Space, choices, max_k: int, ov: dict) -> None:
    e = draw(_favour(space, "n_experts", st.sampled_from(list(dict.fromkeys(choices))), 2, 1024))
    ov["n_experts"] = e
    ov["top_k"] = draw(_favour(space, "top_k", st.integers(1, min(max_k, e)), 1, min(max_k, e)))


@st.composite
def dims_around(draw, stage: str, base: str, space: Space = CPU_SPACE):
    """Overrides of the tiny preset within ranges every implementation must handle."""
    cfg = preset(base)
    ov = {}
    if draw(st.booleans()):
        ov["hidden"] = draw(_favour(space, "hidden", st.sampled_from([32, 64, 96, 128]), 32, 256))
    if stage in ("moe", "layer"):
        _experts_and_k(draw, space, [cfg.n_experts, 8, 16, 24, 32], 8, ov)
        e = ov["n_experts"]
        if draw(st.booleans()):
            groups = [g for g in (2, 4) if e % g == 0 and e // g >= 2]
            if groups:
                g = draw(st.sampled_from(groups))
                tg = draw(st.integers(1, g))
                if tg * (e // g) >= ov["top_k"]:
                    ov["n_group"], ov["topk_group"] = g, tg
        ov["latent_dim"] = draw(_favour(space, "latent_dim", st.sampled_from([32, 64, 96]), 32, 256))
        ov["moe_intermediate"] = draw(_favour(space, "moe_intermediate", st.sampled_from([32, 64]), 32, 256))
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
def production_dims(draw, stage: str, base: str, space: Space):
    """moe/layer overrides of a production preset (full, small): the real widths, E in the
    preset's and PRODUCTION_EXPERTS (and around declared boundaries), top-k 1..16, scaling 1 or 2.5.
    The small preset also moves r and I around declared boundaries (the mma path's r, I % 128)."""
    cfg = preset(base)
    ov = {}
    if stage in ("moe", "layer"):
        _experts_and_k(draw, space, (cfg.n_experts,) + PRODUCTION_EXPERTS, 16, ov)
        ov["routed_scaling_factor"] = draw(st.sampled_from([1.0, 2.5]))
        if base != "full":
            for name, width in (("latent_dim", cfg.latent_dim), ("moe_intermediate", cfg.moe_intermediate)):
                v = draw(_favour(space, name, st.just(width), 32, 2 * width))
                if v != width:
                    ov[name] = v
    try:
        cfg.replace(**ov)
    except ConfigError:
        return ()
    return tuple(sorted((k, v) for k, v in ov.items() if getattr(cfg, k) != v))


def _space_of_case(draw, stage: str, space: Space) -> Space:
    if space.mix and (stage not in ("moe",) or draw(st.booleans())):
        # half of the moe cases, and every other stage, at the mixed-in (faster) preset
        return replace(SMALL_MIX if space.mix == "small" else SPACES[space.mix], boundaries=space.boundaries)
    return space


@st.composite
def cases(draw, stage: str, space: Space = CPU_SPACE):
    space = _space_of_case(draw, stage, space)
    if space.production:
        overrides = draw(production_dims(stage, space.preset, space))
    else:
        overrides = (draw(dims_around(stage, space.preset, space))
                     if space.vary_dims and draw(st.booleans()) else ())
    probe = Case(stage=stage, preset=space.preset, overrides=overrides)
    cfg = probe.config()
    batch = draw(batches(space))
    fields = dict(stage=stage, preset=space.preset, overrides=overrides, batch=batch,
                  value_dist=draw(st.sampled_from(VALUE_DISTS)),
                  weight_seed=draw(st.integers(0, space.weight_seeds - 1)),
                  seed=draw(st.integers(0, 2**31 - 1)))
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
    if space.ranks and stage == "moe":       # drawn last: a space without ranks draws as before
        fields.update(draw_ep(draw, fields, cfg, space.ranks))
    return Case(**fields).validate()
