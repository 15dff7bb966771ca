"""Deterministic weights and inputs from (config, seed), with realistic magnitudes (docs/k3-decode.md §9).

Determinism: every tensor is drawn from its own torch.Generator seeded by a hash of
(seed, tensor name), on the CPU by default, then moved to `device` -- so the same arguments give
bit-identical tensors on every machine and device, and adding a tensor never shifts the others.
Layer weights reuse the stage draws (``layer``'s ``attn.q_a.weight`` is the ``mla`` stage's
``q_a.weight`` for the same seed), so a layer failure can be replayed stage by stage.

Weights depend only on (cfg, stage, seed, expert_format, layer_idx) -- callers may cache them.
Scales, chosen to look like a trained model: projections randn/sqrt(fan_in) in bf16; norm weights
1 + 0.1 randn; AttnRes proj randn/sqrt(d) (depth logits O(1)); router bias 0.05 randn f32 (enough
to move a few selections, "natural" routing); A_log 0.5 randn; dt_bias 0.3 randn; conv 0.5 randn
f32; MXFP4 experts are the SAME float draws as the bf16 experts, quantised with per-group scales
from the group amax (E8M0 codes 120-124 for tiny/small, about 118-122 at full size, cf. §9).

Full size: the MoE stage of the 'full' preset has 896 experts x 33 M weights (~30 G numbers). Drawn
expert by expert, on the CPU this takes many minutes (and bf16 experts need ~60 GB; use
expert_format="mxfp4", ~15 GB). ``draw_on="device"`` draws with a generator on `device` (e.g.
CUDA) instead: fast, deterministic on that device type, but NOT bit-identical to the CPU draws --
record it in the case. ``draw_on="counter"`` draws on `device` with reference.counter_draw: the
same bits on every device (a GPU's draw replays on the CPU), at the device's speed (on the CPU about
5x a torch.Generator's time). The same argument of `make_inputs` draws a case's caches and states
(the MLA cache, the KDA conv and recurrent states, and with "counter" a verify step's per-token
state buffers: the bulk of a case's fresh numbers, ~0.1-0.3 s a case on the CPU at full dims) on
`device`; the small inputs stay CPU draws.

Inputs (activations RMS ~ 1): plain, outliers (a few fixed channels x100), large (x30),
tiny (x1e-3). The value distribution reaches every input a stage reads: x / prefix / delta / blocks,
and also the MLA cache contents (kv_c | k_pe rows < L_b), the KDA conv state (raw q/k/v history)
and the KDA recurrent state, all scaled by the same factor (`VALUE_DISTS`; outliers keeps states
and caches at scale 1). So "tiny" gives the KDA q/k L2 norms sums of squares comparable to their
epsilon (where its placement matters) and "large" gives large cached keys and values.

Untouched memory holds sentinels drawn from the seed (`nan_sentinels`), never plain NaN: MLA
caches in every row >= L_b (the row the step writes and the free rows; made from the bits of the
cache draw there, which no row uses), layer blocks in the slots the layer must not read. They
are quiet NaNs with random non-canonical payloads: a NaN poisons every read (even one a softmax
weights by 0, where 0 * NaN is still NaN, while a huge finite value could vanish behind a -inf
score), and the random payload makes a write show bitwise, a canonical NaN included (a kernel
"clearing" the rows with NaN no longer passes the bitwise check).
KDA slots no row owns get `finite_sentinels` instead (k3diff.materialize; see there why).
KDA slot 0 is the null slot; state_idx defaults to a shuffled distinct set of slots >= 1.
"""
from __future__ import annotations

import collections
import hashlib
import math
import os
from concurrent.futures import ThreadPoolExecutor

import torch

from . import counter_draw, fp8_cache, mxfp4
from .config import ConfigError, K3Config, check_cache_lens

VALUE_DISTS = {"plain": 1.0, "outliers": 1.0, "large": 30.0, "tiny": 1e-3}
OUTLIER_GAIN = 100.0
EXPERT_FORMATS = ("bf16", "mxfp4")

# kind of each weight: ("linear", fan_in) | "norm" | "proj" | "bias" | "A_log" | "dt_bias" | "conv"
def _stage_weights(cfg: K3Config, stage: str, layer_idx: int | None, fmt: str) -> dict:
    d = cfg.hidden
    if stage == "mla":
        H, R, rope, nope, v = cfg.mla_heads, cfg.kv_lora_rank, cfg.qk_rope_dim, cfg.qk_nope_dim, cfg.v_head_dim
        return {"q_a.weight": ((cfg.q_lora_rank, d), "linear"), "kv_a.weight": ((R + rope, d), "linear"),
                "q_a_norm.weight": ((cfg.q_lora_rank,), "norm"), "kv_a_norm.weight": ((R,), "norm"),
                "q_b.weight": ((H * (nope + rope), cfg.q_lora_rank), "linear"),
                "kv_b.weight": ((H * (nope + v), R), "linear"), "g.weight": ((H * v, d), "linear"),
                "o.weight": ((d, H * v), "linear")}
    if stage == "kda":
        H, D, P, W = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj, cfg.conv_width
        return {"q_proj.weight": ((P, d), "linear"), "k_proj.weight": ((P, d), "linear"),
                "v_proj.weight": ((P, d), "linear"), "g_proj.weight": ((P, d), "linear"),
                "f_a.weight": ((D, d), "linear"), "f_b.weight": ((P, D), "linear"),
                "b_proj.weight": ((H, d), "linear"), "o_proj.weight": ((d, P), "linear"),
                "o_norm.weight": ((D,), "norm"), "conv.weight": ((3 * P, W), "conv"),
                "A_log": ((H,), "A_log"), "dt_bias": ((P,), "dt_bias")}
    if stage == "moe":
        if layer_idx is not None and not cfg.is_moe_layer(layer_idx):
            Id = cfg.dense_intermediate
            return {"dense.gate_up": ((2 * Id, d), "linear"), "dense.down": ((d, Id), "linear")}
        E, I, r, Is = cfg.n_experts, cfg.moe_intermediate, cfg.latent_dim, cfg.shared_intermediate
        w = {"router.weight": ((E, d), "linear"), "router.bias": ((E,), "bias"),
             "down.weight": ((r, d), "linear"), "latent_norm.weight": ((r,), "norm"),
             "up.weight": ((d, r), "linear"), "shared.gate_up": ((2 * Is, d), "linear"),
             "shared.down": ((d, Is), "linear")}
        if fmt == "bf16":
            w.update({"experts.w13": ((E, 2 * I, r), "expert"), "experts.w2": ((E, r, I), "expert")})
        else:
            g = mxfp4.GROUP
            w.update({"experts.w13_packed": ((E, 2 * I, r // 2), "packed"),
                      "experts.w13_scale": ((E, 2 * I, r // g), "scale"),
                      "experts.w2_packed": ((E, r, I // 2), "packed"),
                      "experts.w2_scale": ((E, r, I // g), "scale")})
        return w
    if stage == "layer":
        if layer_idx is None or not 0 <= layer_idx < cfg.n_layers:
            raise ConfigError(f"layer_idx must lie in [0, {cfg.n_layers}) for the layer stage, got {layer_idx}")
        w = {n: ((d,), "norm") for n in ("attn_res.norm", "input_norm", "mlp_res.norm", "post_attn_norm")}
        w.update({n: ((d,), "proj") for n in ("attn_res.proj", "mlp_res.proj")})
        w.update({f"attn.{k}": v for k, v in _stage_weights(cfg, cfg.layer_kind(layer_idx), None, fmt).items()})
        w.update({f"mlp.{k}": v for k, v in _stage_weights(cfg, "moe", layer_idx, fmt).items()})
        return w
    raise ValueError(f"unknown stage {stage!r}; stages are moe, mla, kda, layer")


_DTYPES = {"linear": torch.bfloat16, "norm": torch.bfloat16, "proj": torch.bfloat16,
           "bias": torch.float32, "A_log": torch.float32, "dt_bias": torch.float32,
           "conv": torch.float32, "expert": torch.bfloat16, "packed": torch.uint8, "scale": torch.uint8}


def weight_shapes(cfg: K3Config, stage: str, expert_format: str = "bf16",
                  layer_idx: int | None = None) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """name -> (shape, dtype) of every weight of a stage (the layout of k3diff/stages.py)."""
    if expert_format not in EXPERT_FORMATS:
        raise ValueError(f"expert_format must be one of {EXPERT_FORMATS}, got {expert_format!r}")
    return {n: (s, _DTYPES[k]) for n, (s, k) in _stage_weights(cfg, stage, layer_idx, expert_format).items()}


def _seed(seed: int, *parts) -> int:
    h = hashlib.sha256(repr((int(seed),) + parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


DRAWS = ("cpu", "device", "counter")


def _gen(seed: int, *parts, device="cpu", counter: bool = False):
    """The generator of one tensor: a torch.Generator on `device`, or with `counter` the
    device-independent stream of reference.counter_draw (the same bits on any device)."""
    if counter:
        return counter_draw.Stream(_seed(seed, *parts), device)
    return torch.Generator(device=device).manual_seed(_seed(seed, *parts))


def _source(draw_on: str, device) -> tuple:
    """(device the bulk draws are made on, whether by counter_draw) of a `draw_on`: "cpu" a CPU
    generator's bits, copied to `device`; "device" a generator on `device` (its own bits);
    "counter" counter_draw on `device` (the CPU's bits, at the device's speed)."""
    if draw_on not in DRAWS:
        raise ValueError(f"draw_on must be one of {', '.join(DRAWS)}, got {draw_on!r}")
    return torch.device("cpu" if draw_on == "cpu" else device), draw_on == "counter"


def _randn(shape, gen) -> torch.Tensor:
    if isinstance(gen, counter_draw.Stream):
        return gen.normal(shape)
    return torch.randn(shape, generator=gen, dtype=torch.float32, device=gen.device)


EXPERT_KINDS = ("expert", "packed", "scale")      # the routed experts' tensors, [E, ...]


def make_weights(cfg: K3Config, stage: str, seed: int, *, expert_format: str = "bf16",
                 layer_idx: int | None = None, device="cpu", draw_on: str = "cpu",
                 experts: bool = True) -> dict:
    """All weights of `stage` (for 'layer': of layer `layer_idx`; for 'moe' with a dense layer_idx:
    the dense MLP). draw_on="cpu" (default, bit-identical everywhere), "device" or "counter" (see
    module doc). experts=False leaves out the routed experts' tensors (`make_experts` draws them)."""
    cfg.validate()
    if expert_format not in EXPERT_FORMATS:
        raise ValueError(f"expert_format must be one of {EXPERT_FORMATS}, got {expert_format!r}")
    gdev, counter = _source(draw_on, device)
    shapes = _stage_weights(cfg, stage, layer_idx, expert_format)
    out = {}
    for name, (shape, kind) in shapes.items():
        if kind in EXPERT_KINDS:
            continue
        g = _gen(seed, "w", _base(stage, name), device=gdev, counter=counter)
        fan_in = shape[-1]
        t = {"linear": lambda: _randn(shape, g) / math.sqrt(fan_in),
             "norm": lambda: 1.0 + 0.1 * _randn(shape, g),
             "proj": lambda: _randn(shape, g) / math.sqrt(shape[0]),
             "bias": lambda: 0.05 * _randn(shape, g),
             "A_log": lambda: 0.5 * _randn(shape, g),
             "dt_bias": lambda: 0.3 * _randn(shape, g),
             "conv": lambda: 0.5 * _randn(shape, g)}[kind]()
        out[name] = t.to(_DTYPES[kind]).to(device)
    if experts:
        out.update(make_experts(cfg, stage, seed, expert_format=expert_format, layer_idx=layer_idx,
                                device=device, draw_on=draw_on))
    return {n: out[n] for n in shapes if n in out}


def make_experts(cfg: K3Config, stage: str, seed: int, *, expert_format: str = "bf16",
                 layer_idx: int | None = None, device="cpu", draw_on: str = "cpu",
                 n: int | None = None) -> dict:
    """The routed experts' tensors of `stage` ({} where it has none), for experts 0 .. n-1 (default
    all cfg.n_experts). Expert e's bits depend only on (seed, its name, e, its shape), never on E:
    the first E experts of a larger draw are the experts of an E-expert config, which k3diff uses
    to draw one set for every E (k3diff.materialize)."""
    shapes = {name: sk for name, sk in _stage_weights(cfg, stage, layer_idx, expert_format).items()
              if sk[1] in EXPERT_KINDS}
    gdev, counter = _source(draw_on, device)
    out = {}
    for name, (shape, kind) in shapes.items():
        shape = (cfg.n_experts if n is None else n,) + tuple(shape[1:])
        if kind == "expert":
            # each expert written straight into its slot: the bits of stacking the draws, without
            # holding every expert twice (a full-dims bf16 set is 59 GB)
            t = out[name] = torch.empty(shape, dtype=torch.bfloat16, device=device)
            for e, w in _expert_draws(seed, _base(stage, name), shape[0], shape[1:], gdev,
                                      lambda w: w.to(torch.bfloat16), counter):
                t[e].copy_(w)
        elif kind == "packed":
            # quantised where the result lives: the float draw is the same bits wherever it is made
            # (on the CPU unless draw_on="device"), and quantize() is exact arithmetic
            sname = name.replace("_packed", "_scale")
            sshape = (shape[0],) + tuple(shapes[sname][0][1:])
            base = _base(stage, name).replace("_packed", "")
            packed = out[name] = torch.empty(shape, dtype=torch.uint8, device=device)
            scale = out[sname] = torch.empty(sshape, dtype=torch.uint8, device=device)
            # quantised a few experts at a time: quantize() works on each 32-group alone, so a
            # stack gives every expert the bits it gets alone, in one call instead of one each
            # (a call per expert was most of a small MoE case's drawing time on the CPU)
            chunk = max(1, _QUANTIZE_BYTES // (4 * shape[1] * 2 * shape[2]))
            ws, first = [], 0
            for e, w in _expert_draws(seed, base, shape[0], (shape[1], 2 * shape[2]), gdev, lambda w: w,
                                      counter):
                ws.append(w)
                if len(ws) == chunk or e == shape[0] - 1:
                    p, sc = mxfp4.quantize(torch.stack(ws).to(device))
                    packed[first:e + 1].copy_(p)
                    scale[first:e + 1].copy_(sc)
                    first, ws = e + 1, []
    return out


# float32 bytes of the experts quantised in one call: a full-dims MXFP4 expert (42-84 MB as float32)
# still goes alone, as before, so the GPU's peak while drawing is what it was (quantize's
# temporaries are several times its input); the small presets' experts go dozens at a time
_QUANTIZE_BYTES = 64 << 20
_POOL: list = []          # one thread pool for the expert draws, made on first use
_THREADED_NUMEL = 1 << 17  # experts this large are drawn on the pool (the tiny preset's are not)


def _expert_draws(seed: int, base: str, n: int, shape, gdev, finish, counter: bool = False):
    """(e, finish(expert e's float weight)) for e = 0 .. n-1, in order. Large experts drawn on the
    CPU come from a pool of threads, a few experts ahead: every expert has its own generator, so
    the bits do not depend on the threads, and torch releases the GIL while it draws. The threads
    only draw (a serial op); the scaling and `finish` run here, where torch's own threads live."""
    numel = math.prod(shape)
    threads = min(n, os.cpu_count() or 1, 16)
    if gdev.type != "cpu" or threads < 2 or numel < _THREADED_NUMEL:
        for e in range(n):
            yield e, finish(_expert_draw(seed, base, e, shape, gdev, counter))
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(min(os.cpu_count() or 1, 16), thread_name_prefix="k3diff-draw"))
    ahead = collections.deque()
    for e in range(n):
        ahead.append(_POOL[0].submit(_expert_normals, seed, base, e, shape, gdev, counter))
        if len(ahead) > 2 * threads:
            yield e - len(ahead) + 1, finish(_fan_in(ahead.popleft().result()))
    for k, fut in enumerate(ahead):
        yield n - len(ahead) + k, finish(_fan_in(fut.result()))


def expert_names(cfg: K3Config, stage: str, expert_format: str = "bf16",
                 layer_idx: int | None = None) -> list:
    """Names of the routed experts' tensors of `stage` ([E, ...]; none for mla, kda, a dense layer)."""
    return [n for n, (_, kind) in _stage_weights(cfg, stage, layer_idx, expert_format).items()
            if kind in EXPERT_KINDS]


def _base(stage: str, name: str) -> str:
    """A layer's attn.* / mlp.* weights are drawn as the stage's own (same seed, same bits)."""
    return name.split(".", 1)[1] if stage == "layer" and name.startswith(("attn.", "mlp.")) else name


def _expert_draw(seed: int, base: str, e: int, shape, gdev, counter: bool = False) -> torch.Tensor:
    """Expert e's float weight, shared by the bf16 and the MXFP4 formats."""
    return _fan_in(_expert_normals(seed, base, e, shape, gdev, counter))


def _expert_normals(seed: int, base: str, e: int, shape, gdev, counter: bool = False) -> torch.Tensor:
    return _randn(tuple(shape), _gen(seed, "w", base, e, device=gdev, counter=counter))


def _fan_in(w: torch.Tensor) -> torch.Tensor:
    return w / math.sqrt(w.shape[-1])


def nan_sentinels_from(values: torch.Tensor) -> torch.Tensor:
    """bf16 quiet NaNs, one per element of `values` (bf16 random normals), made from its bits: the
    value's sign, and a payload of its mantissa bits 1..4 with bit 0 set (1, 3, .., 31; never the
    canonical 0 or 63). Every read yields NaN; every write (a canonical NaN included) shows."""
    return ((values.view(torch.int16) & -32738) | 0x7FC1).view(torch.bfloat16)   # -32738 = 0x801E


def nan_sentinels_where(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`values` (bf16) with the elements where `mask` (broadcast) is true turned, in place, into
    `nan_sentinels_from` of themselves: the same bits as torch.where(mask, nan_sentinels_from(v),
    v) without its three temporaries (a large MLA cache's draw spent a third of its time there)."""
    bits = values.view(torch.int16)
    bits.bitwise_and_(torch.where(mask, -32738, -1).to(torch.int16))    # -32738 = 0x801E
    bits.bitwise_or_(torch.where(mask, 0x7FC1, 0).to(torch.int16))
    return values


def nan_sentinels(shape, gen: torch.Generator) -> torch.Tensor:
    """`nan_sentinels_from` fresh normals drawn from `gen`."""
    return nan_sentinels_from(_randn(tuple(shape), gen).to(torch.bfloat16))


def finite_sentinels(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Distinct-looking huge finite values sign * 2^e * (1 + m), e uniform in [100, 126], m
    uniform in [0, 1), drawn from `gen` in `dtype` (bf16 or f32: both reach 2^127). Any write shows
    bitwise (even a canonical NaN or a value passed through arithmetic); a read blows up whatever
    it enters (|v| >= 2^100: products with O(1) weights overflow or dwarf every real value)."""
    shape = tuple(shape)
    if isinstance(gen, counter_draw.Stream):
        return gen.finite_sentinels(shape, dtype)
    dev = gen.device
    sign = torch.randint(0, 2, shape, generator=gen, device=dev).to(torch.float64) * 2 - 1
    e = torch.randint(100, 127, shape, generator=gen, device=dev).to(torch.float64)
    m = torch.rand(shape, generator=gen, dtype=torch.float64, device=dev)
    return (sign * torch.exp2(e) * (1 + m)).to(dtype)


def state_scale(value_dist: str) -> float:
    """The factor the value distribution applies to caches and states (outliers: 1)."""
    return VALUE_DISTS[value_dist]


def _activations(shape, gen, scale: float, value_dist: str, outliers: torch.Tensor) -> torch.Tensor:
    t = _randn(shape, gen) * scale * VALUE_DISTS[value_dist]
    if value_dist == "outliers":
        t[..., outliers] *= OUTLIER_GAIN
    return t.to(torch.bfloat16)


def _kv_cache(cfg: K3Config, seed: int, lens: torch.Tensor, cap: int, scale: float, gdev,
              by_sequence: bool, counter: bool = False) -> torch.Tensor:
    """The MLA cache [T, cap, cache_dim] bf16: one normal draw for every row, rows < L_b the values
    and the rest the sentinels made from the same (otherwise unused) draws, which costs no second
    pass of the generator. draw_on="cpu": one draw of the whole cache (the bits of every seed so
    far); "device": sequence by sequence from one generator, so the f32 draw in flight stays one
    sequence's (a 32k cache of 256 sequences would be 19 GB of it at once)."""
    T = lens.numel()
    gen = _gen(seed, "in", "kv_cache", device=gdev, counter=counter)
    free = (torch.arange(cap, device=gdev).view(1, cap) >= lens.to(gdev).view(T, 1)).unsqueeze(-1)
    if not by_sequence:
        drawn = _randn((T, cap, cfg.mla_cache_dim), gen).mul_(scale).to(torch.bfloat16)
        return nan_sentinels_where(drawn, free)
    cache = torch.empty((T, cap, cfg.mla_cache_dim), dtype=torch.bfloat16, device=gdev)
    for b in range(T):
        cache[b] = _randn((cap, cfg.mla_cache_dim), gen).mul_(scale)
    return nan_sentinels_where(cache, free)


def _fp8_cache(cfg: K3Config, drawn: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The bf16 cache draw `drawn` [B, cap, R+rope] (free rows already NaN sentinels) as an FP8
    cache (fp8_cache's layout): rows < L_b quantised as a kernel writes them (faithful rounding);
    free rows NaN everywhere with payloads from the draw (e4m3 NaN codes 0x7F/0xFF by the value's
    sign, f32 scale NaNs carrying the bf16 sentinel's bits, the bf16 sentinels as k_pe), so a read
    poisons and a write shows bitwise."""
    R, n = cfg.kv_lora_rank, fp8_cache.n_tiles(cfg)
    free = torch.arange(drawn.shape[1], device=drawn.device).view(1, -1) >= lens.to(drawn.device).view(-1, 1)
    kv = drawn[..., :R].float()
    rows = fp8_cache.quantise(torch.where(free.unsqueeze(-1), 0.0, kv), drawn[..., R:], cfg, exact=False)
    sent = drawn[..., :R].view(torch.int16)
    nan8 = (((sent >> 8) & 0x80) | 0x7F).to(torch.uint8)
    nan_scale = ((sent[..., :n].to(torch.int32) << 16) | 1).view(torch.float32).contiguous().view(torch.uint8)
    f = free.unsqueeze(-1)
    rows[..., :R] = torch.where(f, nan8, rows[..., :R])
    rows[..., R:R + 4 * n] = torch.where(f, nan_scale.reshape(rows.shape[:-1] + (4 * n,)), rows[..., R:R + 4 * n])
    return rows


def make_inputs(cfg: K3Config, stage: str, seed: int, *, batch: int, cache_lens=None, state_idx=None,
                n_slots: int | None = None, layer_idx: int | None = None, value_dist: str = "plain",
                cache_capacity: int | None = None, device="cpu", caches: bool = True,
                draw_on: str = "cpu", widths=None, accepted=None, cache_format: str = "bf16") -> dict:
    """The inputs of one decode step of `stage` for `batch` sequences (see module doc). caches=False
    leaves out the MLA cache and the KDA states (a later decode step carries its own); every other
    input is drawn from its own generator, so its bits do not depend on that choice. draw_on="device"
    draws the caches and states with generators on `device` (module doc: not the CPU's bits),
    "counter" with counter_draw on `device` (the same bits on every device).

    A verify step (docs/k3-decode.md §14.1): `widths` W_b per sequence give T = Σ W_b token rows
    (x, prefix, delta, blocks) and the input query_lens [B]; a KDA attention also gets `accepted`
    [B] (default: all) and the per-token state buffers conv_states / recurrent_states [T, ...],
    filled with finite sentinels (a row the step must not write shows bitwise). cache_format
    "fp8": the MLA cache as fp8_cache's uint8 rows. Without them the inputs are bit for bit those
    of a decode step."""
    cfg.validate()
    gdev, counter = _source(draw_on, device)
    if batch < 0:
        raise ConfigError(f"batch must be >= 0, got {batch}")
    if value_dist not in VALUE_DISTS:
        raise ConfigError(f"value_dist must be one of {', '.join(VALUE_DISTS)}, got {value_dist!r}")
    if cache_format not in ("bf16", "fp8"):
        raise ConfigError(f"cache_format must be bf16 or fp8, got {cache_format!r}")
    if widths is not None:
        widths = [int(w) for w in widths]
        if len(widths) != batch or any(w < 1 for w in widths):
            raise ConfigError(f"widths must hold {batch} widths >= 1, got {widths}")
    T, d = (batch if widths is None else sum(widths)), cfg.hidden
    n_out = max(1, d // 64)
    outliers = torch.randperm(d, generator=_gen(seed, "outlier_channels"))[:n_out]
    act = lambda name, shape, scale: _activations(shape, _gen(seed, "in", name), scale, value_dist, outliers)
    inp: dict = {}
    kind = stage
    if stage == "layer":
        if layer_idx is None or not 0 <= layer_idx < cfg.n_layers:
            raise ConfigError(f"layer_idx must lie in [0, {cfg.n_layers}) for the layer stage, got {layer_idx}")
        kind = cfg.layer_kind(layer_idx)
        inp["layer_idx"] = int(layer_idx)
        inp["prefix"] = act("prefix", (T, d), 2.0)
        if layer_idx > 0:
            inp["delta"] = act("delta", (T, d), 0.5)
        n_valid = -(-layer_idx // cfg.attn_res_block_size)
        blocks = nan_sentinels((T, cfg.n_blocks, d), _gen(seed, "in", "blocks_sentinel"))
        blocks[:, :n_valid] = act("blocks", (T, n_valid, d), 2.0)
        if n_valid:
            blocks[:, 0] = act("embedding", (T, d), 1.0)
        inp["blocks"] = blocks
    elif stage in ("moe", "mla", "kda"):
        inp["x"] = act("x", (T, d), 1.0)
    else:
        raise ValueError(f"unknown stage {stage!r}; stages are moe, mla, kda, layer")

    if kind == "mla":
        if cache_lens is None:
            hi = min(64, cfg.max_cache_len - 1)
            cache_lens = torch.randint(0, hi + 1, (batch,), generator=_gen(seed, "in", "cache_lens"))
        lens = torch.as_tensor(cache_lens, dtype=torch.int64).reshape(-1)
        if lens.numel() != batch:
            raise ConfigError(f"cache_lens has {lens.numel()} entries for batch={batch}")
        ends = lens if widths is None else lens + torch.tensor(widths, dtype=torch.int64) - 1
        need = int(ends.max()) + 1 if batch else 1
        cap = cache_capacity if cache_capacity is not None else -(-need // 8) * 8
        if cap > cfg.max_cache_len:
            raise ConfigError(f"cache_capacity={cap} exceeds K3Config.max_cache_len={cfg.max_cache_len}")
        check_cache_lens(cfg, ends.tolist(), cap)
        inp["cache_lens"] = lens
        # one draw for every row: rows < L_b hold the values, the rest the sentinels made from
        # the same (otherwise unused) draws, which costs no second pass of the generator
        if caches:
            inp["kv_cache"] = _kv_cache(cfg, seed, lens, cap, state_scale(value_dist), gdev,
                                        by_sequence=draw_on != "cpu", counter=counter)
            if cache_format == "fp8":
                if fp8_cache.check(cfg):
                    raise ConfigError(fp8_cache.check(cfg))
                inp["kv_cache"] = _fp8_cache(cfg, inp["kv_cache"], lens)
    elif kind == "kda":
        if state_idx is None:
            S = batch + 1 if n_slots is None else n_slots
            if S < batch + 1:
                raise ConfigError(f"n_slots={S} cannot give {batch} rows distinct slots >= 1 (slot 0 is null)")
            idx = torch.randperm(S - 1, generator=_gen(seed, "in", "state_idx"))[:batch] + 1
        else:
            idx = torch.as_tensor(state_idx, dtype=torch.int64).reshape(-1)
            if idx.numel() != batch:
                raise ConfigError(f"state_idx has {idx.numel()} entries for batch={batch}")
            S = n_slots if n_slots is not None else max(batch, int(idx.max()) if T else 0) + 1
        live = [i for i in idx.tolist() if i > 0]
        if any(i >= S for i in live) or len(set(live)) != len(live):
            raise ConfigError(f"state_idx must hold distinct slots in [1, n_slots={S}) (or <= 0 for null rows)")
        P3, H, D = 3 * cfg.kda_proj, cfg.kda_heads, cfg.kda_head_dim
        sc = state_scale(value_dist)
        if caches:
            inp["conv_state"] = (_randn((S, P3, cfg.conv_width - 1),
                                        _gen(seed, "in", "conv_state", device=gdev, counter=counter))
                                 * sc).to(torch.bfloat16)
            inp["recurrent_state"] = _randn((S, H, D, D), _gen(seed, "in", "recurrent_state", device=gdev,
                                                               counter=counter)).mul_(0.5 * sc)
        inp["state_idx"] = idx
        if widths is not None:
            acc = widths if accepted is None else [int(a) for a in accepted]
            if len(acc) != batch or any(not 0 <= a <= w for a, w in zip(acc, widths)):
                raise ConfigError(f"accepted must hold {batch} counts in [0, width], got {acc}")
            inp["accepted"] = torch.tensor(acc, dtype=torch.int64)
            # the per-token state buffers: every step has its own (drawn also when caches=False)
            # on the CPU but with counter draws (the recurrent ones are T x 1.6 M numbers at full dims)
            sdev = gdev if counter else "cpu"
            inp["conv_states"] = finite_sentinels((T, P3, cfg.conv_width - 1), torch.bfloat16,
                                                  _gen(seed, "in", "conv_states", device=sdev, counter=counter))
            inp["recurrent_states"] = finite_sentinels((T, H, D, D), torch.float32,
                                                       _gen(seed, "in", "recurrent_states", device=sdev,
                                                            counter=counter))
    if widths is not None and kind in ("mla", "kda"):
        inp["query_lens"] = torch.tensor(widths, dtype=torch.int64)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
