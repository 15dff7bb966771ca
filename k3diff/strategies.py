"""Hypothesis strategies that draw Cases: shapes, ragged caches, state slots, routing and values.

Boundary values are favoured the way the vLLM K3 tests choose them (docs/k3-decode.md §9): batch 1, 2, 3,
33, 64, 65, 73 (odd and > 64), 128; cache lengths 0 (first token), 1, 63, 64, 65 and a few long
ones; KDA slots shuffled, distinct, >= 1, with padding rows pointing at the null slot.

Kernel-declared boundaries. A backend may publish `boundaries`: {dimension: sizes at
which its code changes path} (k3diff/backends/base.py). `with_boundaries(space, backend)` puts
them in the space, and every dimension named there is drawn on and around each size (n - step, n,
n + step; step 1, or the dimension's granularity, e.g. 32 for MXFP4 K dims) with probability
about 2/3, the rest from the dimension's ordinary range. Dimensions: batch, cache_len, n_experts,
top_k, latent_dim, moe_intermediate, hidden.

Spaces (the default GPU run reaches production):
  tiny   the CPU default: dims drawn around the tiny preset (E to 513: cheap at tiny widths);
  small  the GPU default: every stage at small dims around the declared boundaries, and one case
         in three at K3's real dims (d 7168; MoE r 3584, I 3072, E 896 and around every declared
         E boundary, top-k 1..16, scaling 1 and 2.5, both formats; MLA's 96 heads and caches to
         32k; KDA's 96 heads), with batches to 256;
  full   the same, half and half (`--k3diff-preset full`).
On a GPU `--k3diff-preset small` alone is the small half (no real-dims case). The MoE dims of the
production spaces come from a short menu (`production_points`): each menu point is one compiled
kernel set of the megakernel (~10 s cold), so independent draws of E, k, r, I and the scaling
would compile a new set nearly every case. The batch x cache capacity of an MLA case and a KDA
case's batch at real dims are capped (`max_cache_rows`, `stage_max_batch`): their inputs are drawn
on the host, and 256 sequences x 32k rows would be 4.8 G numbers (minutes) for one case.
A production space also sweeps (`boundary_plan`): a short list of explicit cases per stage, split
over the run's chunks, that sits on and next to every declared boundary and every menu point, so a
ci run crosses each of them whatever Hypothesis draws (the coverage table checks it).
Full-dims weights are drawn on the device (k3diff.materialize.draw_on) with weight seed 0, so one
weight set per dims is drawn and cached.
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from k3diff.case import EXPERT_FORMATS, ROUTING_MODES, VALUE_DISTS, Case
from k3diff import schedule, verify_draws
from k3diff.ep_config import draw_ep, fit_experts, sweep_layout
from reference.config import ConfigError, preset

BOUNDARY_BATCHES = (1, 2, 3, 33, 64, 65, 73, 128)
BOUNDARY_LENS = (0, 1, 63, 64, 65)
# E a production space draws around when the backend declares no n_experts boundary: K3's own
# edges of 256-expert ranges (one and two experts per thread of a 256-thread route)
PRODUCTION_EXPERTS = (256, 257, 512, 513)
# the CPU's E: 513 is past the route kernels' second 256-expert edge; at tiny widths its draw is
# 6 M numbers, but a candidate loops over active experts, so a wide-E case on the CPU keeps to
# weight seed 0 (one draw per format) and batch <= WIDE_E_BATCH (<= 128 active experts)
CPU_EXPERTS = (8, 16, 24, 32, 513)
WIDE_E, WIDE_E_BATCH = 512, 16
BOUNDARY_DIMS = ("batch", "cache_len", "n_experts", "top_k", "latent_dim", "moe_intermediate", "hidden")
# the step of "around" a boundary: dims that must stay multiples of the MXFP4 group move by 32
STEP = {"latent_dim": 32, "moe_intermediate": 32, "hidden": 32}
SCALINGS = (1.0, 2.5)         # routed_scaling_factor: the published 1.0 and a synthetic config's 2.5


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
    production: bool = False       # moe/layer dims from the preset's menu (production_points)
    mix: str | None = None         # another production space's preset, drawn for a share of the cases
    mix_share: int = 2             # ... one case in mix_share (2: half)
    weight_seeds: int = 3          # weight seeds 0 .. n-1 (1 where a weight set is huge)
    ranks: int = 0                 # moe cases on this many ranks (k3diff/ep_config.py); 0: one device
    max_cache_rows: int = 0        # batch x MLA cache capacity at most (0: no cap): host draw cost
    stage_max_batch: tuple = ()    # ((stage or attention kind, largest batch), ...) where max_batch costs too much
    sweep: bool = False            # explicit boundary cases before the drawn ones (boundary_plan)
    schedules: tuple = ()          # schedules drawn besides eager (k3diff/schedule.py): GPU runs only

    def around(self, name: str) -> tuple:
        """The declared sizes of `name` (empty when the backend declared none)."""
        return dict(self.boundaries).get(name, ())

    def batch_limit(self, stage: str, kind: str | None = None) -> int:
        """The largest batch of a `stage` case whose attention is `kind` (a KDA layer: "kda")."""
        caps = dict(self.stage_max_batch)
        return min([self.max_batch] + [caps[k] for k in (stage, kind) if k in caps])

    def cache_limit(self, batch: int, steps: int) -> int:
        """The longest cache length a row of a batch-`batch` MLA case may get."""
        if not self.max_cache_rows:
            return self.long_len
        return max(1, min(self.long_len, self.max_cache_rows // batch - steps))


CPU_SPACE = Space()
# small dims around the declared boundaries (E, top-k, r and I from the menu)
SMALL_PROD = Space(preset="small", long_len=4200, production=True, weight_seeds=1,
                   max_cache_rows=1 << 16, sweep=True)
# K3's real dims: 2^16 cache rows (a 32k cache at batch 2, 256 rows at batch 256: 38 M numbers);
# KDA's state is 1.7 M numbers a slot at 96 heads, so a KDA case (stage or layer) stops at batch 64
# (107 M numbers; the batches past it are crossed at small dims)
FULL_PROD = Space(preset="full", long_len=32768, production=True, weight_seeds=1,
                  max_cache_rows=1 << 16, stage_max_batch=(("kda", 64),), sweep=True)
PRODUCTION = {"small": SMALL_PROD, "full": FULL_PROD}
GPU_SPACE = replace(SMALL_PROD, mix="full", mix_share=3)      # the GPU default: 1 in 3 at full dims
FULL_SPACE = replace(FULL_PROD, mix="small", mix_share=2)     # --k3diff-preset full: half and half
SPACES = {"tiny": CPU_SPACE, "small": SMALL_PROD, "full": FULL_SPACE}


def normalize_boundaries(declared) -> tuple:
    """A backend's `boundaries` attribute as a frozen, sorted tuple; ValueError on a bad one."""
    if not declared:
        return ()
    if isinstance(declared, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in declared):
        declared = dict(declared)     # already normalised (as isolation's BackendInfo carries it)
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


def cover_values(space: Space, name: str, lo: int, hi: int) -> list:
    """Two sides of each declared size of `name` within [lo, hi]: n and n + step (n - step where
    n + step is out of range) -- what crossing a boundary takes (k3diff.coverage.crossed)."""
    step = STEP.get(name, 1)
    out = []
    for n in space.around(name):
        if lo <= n <= hi:
            out += [n, n + step if n + step <= hi else n - step]
    return [v for v in dict.fromkeys(out) if lo <= v <= hi]


def _favour(space: Space, name: str, base, lo: int, hi: int, ok=lambda n: True):
    """`base`, or (about 2/3 of the time) a value on or around a declared boundary of `name`."""
    vals = near_values(space, name, lo, hi, ok)
    if not vals:
        return base
    at = st.sampled_from(vals)
    # not one_of(at, at, base): Hypothesis (6.155) folds a repeated branch, which made it 1/2 or less
    return st.sampled_from((True, True, False)).flatmap(lambda near: at if near else base)


def batches(space: Space, stage: str | None = None, kind: str | None = None, top: int | None = None):
    top = min(top or space.max_batch, space.batch_limit(stage, kind) if stage else space.max_batch)
    base = st.one_of(st.sampled_from([b for b in BOUNDARY_BATCHES if b <= top]), st.integers(1, top))
    return _favour(space, "batch", base, 1, top)


def cache_lengths(batch: int, space: Space, widths: tuple = ()):
    # a verify step writes W_b rows a step: the capacity keeps room for its widest
    hi = space.cache_limit(batch, space.max_steps * max(widths or (1,)))
    one = st.one_of(st.sampled_from([n for n in BOUNDARY_LENS if n <= hi] or [0]), st.integers(0, min(128, hi)),
                    st.integers(min(space.long_len // 2, hi), hi))
    one = _favour(space, "cache_len", one, 0, hi)
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
        _experts_and_k(draw, space, (cfg.n_experts,) + CPU_EXPERTS, 8, ov)
        e = ov["n_experts"]
        if draw(st.booleans()):
            groups = [g for g in (2, 4) if e % g == 0 and e // g >= 2]
            if groups:
                g = draw(st.sampled_from(groups))
                tg = draw(st.integers(1, g))
                if tg * (e // g) >= ov["top_k"]:
                    ov["n_group"], ov["topk_group"] = g, tg
        if e <= 256:
            # wide E keeps the preset's r and I: one expert draw per weight seed and format, not one
            # per (r, I) as well (each of 640 experts)
            ov["latent_dim"] = draw(_favour(space, "latent_dim", st.sampled_from([32, 64, 96]), 32, 256))
            ov["moe_intermediate"] = draw(_favour(space, "moe_intermediate", st.sampled_from([32, 64]), 32, 256))
        ov["routed_scaling_factor"] = draw(st.sampled_from(list(SCALINGS)))
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


@functools.lru_cache(maxsize=64)
def production_points(base: str, space: Space) -> tuple:
    """The MoE dims a production space draws for preset `base`: ((overrides, formats), ...).

    First the preset itself at both scalings, in both formats; then one point per step of the
    cover lists (`cover_values`: both sides of every declared E, top-k, r and I boundary in range;
    E 256/257/512/513 when the backend declares none), the lists walked side by side (r and I
    from their ends) so that a handful of points crosses every boundary, each point in one format
    (alternating) and one scaling (alternating). At the full preset r and I stay K3's."""
    cfg = preset(base)
    covers = {"n_experts": cover_values(space, "n_experts", cfg.top_k, 1024) or list(PRODUCTION_EXPERTS),
              "top_k": cover_values(space, "top_k", 1, cfg.top_k)}
    if base != "full":
        covers["latent_dim"] = cover_values(space, "latent_dim", 32, 2 * cfg.latent_dim)
        covers["moe_intermediate"] = cover_values(space, "moe_intermediate", 32, 2 * cfg.moe_intermediate)
    points = [((("routed_scaling_factor", s),) if s != cfg.routed_scaling_factor else (), EXPERT_FORMATS)
              for s in SCALINGS]
    n = max(len(v) for v in covers.values())
    for i in range(n):
        # r and I walk backwards: the widest experts go with the fewest (the small preset's
        # experts are drawn on the host; 513 experts at r 544, I 288 would be 241 M numbers)
        ov = {name: vals[(n - 1 - i if name in ("latent_dim", "moe_intermediate") else i) % len(vals)]
              for name, vals in covers.items() if vals}
        ov["top_k"] = min(ov.get("top_k", cfg.top_k), ov["n_experts"])
        ov["routed_scaling_factor"] = SCALINGS[(i + 1) % len(SCALINGS)]
        try:
            cfg.replace(**ov)
        except ConfigError:
            continue
        ov = tuple(sorted((k, v) for k, v in ov.items() if getattr(cfg, k) != v))
        points.append((ov, (EXPERT_FORMATS[i % len(EXPERT_FORMATS)],)))
    return tuple((ov, tuple(f for f in fmts if f in space.expert_formats) or space.expert_formats)
                 for ov, fmts in points)        # a tuple: the cached value is shared


@st.composite
def production_dims(draw, stage: str, base: str, space: Space):
    """(overrides, formats) of a production-space case: a menu point for moe and layer (the
    MoE's dims, `production_points`), the preset's own dims for mla and kda."""
    if stage not in ("moe", "layer"):
        return (), space.expert_formats
    return draw(st.sampled_from(production_points(base, space)))


def _space_of_case(draw, stage: str, space: Space) -> Space:
    if space.mix and draw(st.integers(0, space.mix_share - 1)) == 0:
        # one case in mix_share at the mixed-in preset's production space (on the same ranks:
        # else a distributed run's mixed-in cases would run on one rank, unsharded)
        return replace(PRODUCTION[space.mix], boundaries=space.boundaries, ranks=space.ranks,
                       schedules=space.schedules)
    return space


def _layer_indices(cfg) -> list:
    bk = cfg.attn_res_block_size
    return sorted({0, bk, bk + 1, cfg.n_layers - 1} & set(range(cfg.n_layers)))


@st.composite
def cases(draw, stage: str, space: Space = CPU_SPACE):
    space = _space_of_case(draw, stage, space)
    formats = space.expert_formats
    if space.production:
        overrides, formats = draw(production_dims(stage, space.preset, space))
    else:
        overrides = (draw(dims_around(stage, space.preset, space))
                     if space.vary_dims and draw(st.booleans()) else ())
    if space.ranks and stage == "moe":       # shards travel by value: experts within EP_EXPERT_BYTES
        overrides = fit_experts(Case(stage=stage, preset=space.preset, overrides=overrides).config(),
                                overrides)
    probe = Case(stage=stage, preset=space.preset, overrides=overrides)
    cfg = probe.config()
    fields = dict(stage=stage, preset=space.preset, overrides=overrides)
    if stage == "layer":      # first: a KDA layer may take a smaller batch (stage_max_batch)
        fields["layer_idx"] = draw(st.one_of(st.sampled_from(_layer_indices(cfg)),
                                             st.integers(0, cfg.n_layers - 1)))
    kind = Case(**fields).attention_kind
    wide = not space.production and stage in ("moe", "layer") and cfg.n_experts > WIDE_E
    batch = draw(batches(space, stage, kind, WIDE_E_BATCH if wide else None))
    # a verify step (docs/k3-decode.md §14) in about half the cases: its T = Σ W_b tokens count
    # against the stage's batch limit (the per-token states and rows are what costs)
    widths = ()
    if draw(st.booleans()):
        top = space.batch_limit(stage, kind) if not wide else WIDE_E_BATCH
        batch, widths = draw(verify_draws.widths_for(min(batch, top), space, top))
        fields["widths"] = widths
    fields.update(batch=batch, value_dist=draw(st.sampled_from(VALUE_DISTS)),
                  weight_seed=draw(st.integers(0, 0 if wide else space.weight_seeds - 1)),
                  seed=draw(st.integers(0, 2**31 - 1)))
    if stage in ("moe", "layer"):
        fields["expert_format"] = draw(st.sampled_from(formats))
    if stage == "moe":
        fields["routing"] = draw(st.sampled_from(ROUTING_MODES))
    if kind == "mla":
        fields["cache_lens"] = draw(cache_lengths(batch, space, widths))
        if widths:
            hi = space.cache_limit(batch, space.max_steps * max(widths))
            fields["cache_lens"] = verify_draws.crossing_lens(draw, fields["cache_lens"], widths, space, hi)
        fields["cache_format"] = draw(verify_draws.cache_formats())
        if stage == "mla":
            fields["scores"] = draw(verify_draws.score_modes())
    if kind == "kda":
        fields["n_slots"], fields["state_idx"] = draw(kda_slots(batch))
    if kind is not None:
        fields["steps"] = draw(st.one_of(st.just(1), st.integers(1, space.max_steps)))
        if widths:
            fields["accepted"] = draw(verify_draws.acceptance(widths, fields["steps"]))
    if space.ranks and stage == "moe":       # drawn last: a space without ranks draws as before
        fields.update(draw_ep(draw, fields, cfg, space.ranks))
    if space.schedules:                      # drawn last, and only on a GPU: other spaces as before
        fields["schedule"] = draw(schedule.strategy(space))
    return Case(**fields).validate()


# ------------------------------------------------------------------ the sweep of a production space

def _plan_layers(cfg) -> list:
    """Layer indices a layer sweep walks: MoE layers of both attention kinds first (they carry the
    MoE's and MLA's boundaries), then the dense first layer."""
    moe = [i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)]
    mla = [i for i in moe if cfg.layer_kind(i) == "mla"]
    kda = [i for i in moe if cfg.layer_kind(i) == "kda"]
    walk = [v for pair in zip(mla, kda) for v in pair] + mla[len(kda):] + kda[len(mla):]
    return walk + [i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)]


def _plan_slots(rng: random.Random, batch: int, extra: int):
    n_pad = batch // 5
    n_slots = batch - n_pad + 1 + extra
    rows = rng.sample(range(1, n_slots), batch - n_pad) + [rng.choice((0, -1)) for _ in range(n_pad)]
    rng.shuffle(rows)
    return n_slots, tuple(rows)


def boundary_plan(stage: str, space: Space, seed: int) -> list:
    """Explicit cases of a production space for `stage`. At small dims (the cheap side, whichever
    preset the space is): every declared batch, and for MLA (and MLA layers) cache-length, size
    n - step, n and n + step in some case, every MoE menu point, every routing mode, format and
    value distribution. Where the space has real dims (the GPU default, `full`), a few cases there
    too (`_full_plan`). Their inputs come from `seed` (the run's), so each run sweeps the same
    sizes with other values. Empty outside a production space."""
    if not space.sweep:
        return []
    full = [] if "full" not in (space.preset, space.mix) else _full_plan(
        stage, replace(PRODUCTION["full"], boundaries=space.boundaries), random.Random(seed + 1))
    ranks = space.ranks
    if space.mix == "small":
        space = replace(PRODUCTION["small"], boundaries=space.boundaries)
    plan = _small_plan(stage, space, random.Random(seed)) + full
    if ranks and stage == "moe":             # the same sizes on the run's ranks
        rng = random.Random(seed + 2)
        plan = [sweep_layout(c, ranks, i, rng) for i, c in enumerate(plan)]
    return plan


# batches of the real-dims sweep: one token, a full and a second token tile, a full and a second
# 64-token pass, the most (kept under the stage's limit)
FULL_PLAN_BATCHES = (1, 9, 64, 65, 256, 8)


def _full_plan(stage: str, space: Space, rng: random.Random) -> list:
    """The real-dims part of a sweep: every MoE menu point once (moe, MoE layers of both kinds),
    MLA with a 32k cache and across the split switch, KDA at its largest batch."""
    cfg = preset("full")
    top = space.batch_limit(stage)
    sizes = [b for b in FULL_PLAN_BATCHES if b <= top]
    out = []
    if stage in ("moe", "layer"):
        layers = [i for i in _plan_layers(cfg) if cfg.is_moe_layer(i)]
        for i, (overrides, formats) in enumerate(production_points("full", space)):
            fields = dict(stage=stage, preset="full", overrides=overrides, batch=sizes[i % len(sizes)],
                          expert_format=formats[(i // 2) % len(formats)], seed=rng.randrange(2**31),
                          value_dist=VALUE_DISTS[i % len(VALUE_DISTS)])
            if stage == "moe":
                fields["routing"] = ("high_ids", "natural")[i % 2]
            else:
                fields["layer_idx"] = layers[i % len(layers)]
                kind = Case(**fields).attention_kind
                fields["batch"] = min(fields["batch"], space.batch_limit(stage, kind))
                if kind == "mla":
                    hi = space.cache_limit(fields["batch"], 1)
                    fit = [v for v in (63, 2047, 300) if v <= hi] or [hi]
                    fields["cache_lens"] = tuple(rng.choice(fit) for _ in range(fields["batch"]))
                else:
                    fields["n_slots"], fields["state_idx"] = _plan_slots(rng, fields["batch"], 1)
            out.append(Case(**fields).validate())
    elif stage == "mla":
        longest = space.cache_limit(1, 1)
        for batch, lens in ((1, (longest,)), (2, (2047, 2048)), (64, tuple(63 + (j % 3) for j in range(64)))):
            out.append(Case(stage="mla", preset="full", batch=batch, cache_lens=lens,
                            seed=rng.randrange(2**31)).validate())
    elif stage == "kda":
        for batch in (1, top):
            n_slots, idx = _plan_slots(rng, batch, 2)
            out.append(Case(stage="kda", preset="full", batch=batch, n_slots=n_slots, state_idx=idx,
                            seed=rng.randrange(2**31)).validate())
    # verify steps at real dims: W 2 none accepted with the FP8 cache, T 9 ragged, T 33
    return out + verify_plan(stage, space, rng, "full", which=(1, 3, 7))


def _small_plan(stage: str, space: Space, rng: random.Random) -> list:
    """The small-dims part of a sweep (see boundary_plan)."""
    cfg = preset(space.preset)
    top = space.batch_limit(stage)
    sizes = near_values(space, "batch", 1, top) or [1, top]
    lens = near_values(space, "cache_len", 0, space.long_len) or list(BOUNDARY_LENS)
    points = production_points(space.preset, space) if stage in ("moe", "layer") else [((), space.expert_formats)]
    layers = _plan_layers(cfg)
    n = max(len(sizes), len(points) + 1, len(ROUTING_MODES) if stage == "moe" else 0)
    plan, li = [], 0
    for i in range(n):
        batch = sizes[i % len(sizes)]
        overrides, formats = points[i % len(points)]
        fields = dict(stage=stage, preset=space.preset, overrides=overrides, batch=batch,
                      value_dist=VALUE_DISTS[i % len(VALUE_DISTS)], seed=rng.randrange(2**31),
                      expert_format=formats[(i // len(points)) % len(formats)])
        if stage == "moe":
            fields["routing"] = ROUTING_MODES[i % len(ROUTING_MODES)]
        if stage == "layer":
            fields["layer_idx"] = layers[li % len(layers)]
            li += 1
        kind = Case(**fields).attention_kind
        if kind == "mla":
            hi = space.cache_limit(batch, 1)
            fit = [v for v in lens if v <= hi] or [0, hi]
            fields["cache_lens"] = tuple(fit[(i + j) % len(fit)] for j in range(batch))
        if kind == "kda":
            fields["n_slots"], fields["state_idx"] = _plan_slots(rng, batch, i % 3)
        plan.append(Case(**fields).validate())
    return plan + verify_plan(stage, space, rng, space.preset)


# the verify corners a sweep visits in every stage (docs/k3-decode.md §14): (widths by batch,
# accepted: "all" | "none" | "some", cache format); token counts 8/9, 16/17, 32/33, 64/65 among them
VERIFY_PLAN = (
    ((1, 1, 1), "all", "bf16"),                   # W 1: the verify path at decode's shape
    ((2, 2), "none", "fp8"),                      # W 2, nothing accepted, the FP8 cache
    ((8,), "some", "bf16"),                       # W 8 = T 8
    ((8, 1), "all", "fp8"),                       # T 9, ragged
    ((4, 4, 4, 4), "some", "fp8"),                # T 16
    ((8, 8, 1), "none", "bf16"),                  # T 17
    ((8,) * 4, "all", "bf16"),                    # T 32
    ((3,) * 11, "some", "fp8"),                   # T 33
    ((8,) * 8, "some", "bf16"),                   # T 64
    ((8,) * 8 + (1,), "all", "fp8"),              # T 65
)


def verify_plan(stage: str, space: Space, rng: random.Random, preset_name: str, which=None) -> list:
    """Verify cases of a sweep at `preset_name` (VERIFY_PLAN, or the entries `which` picks):
    each MLA sequence's draft straddles the 64-row tile (L_b = 62); acceptance drawn from `rng`.
    Cases past the space's batch limit for the stage (T counts) are left out."""
    cfg = preset(preset_name)
    out = []
    layers = [i for i in _plan_layers(cfg) if cfg.is_moe_layer(i)]
    for i, (widths, acc, fmt) in enumerate(VERIFY_PLAN if which is None else [VERIFY_PLAN[k] for k in which]):
        fields = dict(stage=stage, preset=preset_name, batch=len(widths), widths=widths,
                      seed=rng.randrange(2**31), value_dist=VALUE_DISTS[i % len(VALUE_DISTS)])
        if stage == "layer":
            fields["layer_idx"] = layers[i % len(layers)]
        kind = Case(**fields).attention_kind
        if sum(widths) > space.batch_limit(stage, kind):
            continue
        if kind == "mla":
            fields["cache_lens"] = tuple(62 if w > 1 else rng.choice((0, 63)) for w in widths)
            fields["cache_format"] = fmt
        if kind == "kda":
            fields["n_slots"], fields["state_idx"] = _plan_slots(rng, len(widths), 1)
        if kind is not None:
            fields["accepted"] = tuple(w if acc == "all" else 0 if acc == "none" else rng.randint(0, w)
                                       for w in widths)
        out.append(Case(**fields).validate())
    return out


def chunk_plan(stage: str, space: Space, seed: int, chunk: int, chunks: int) -> list:
    """The sweep's share of one chunk of a stage (chunk k of n: cases k, k + n, ...)."""
    return boundary_plan(stage, space, seed)[chunk::chunks]
