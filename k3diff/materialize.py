"""Case -> (config, weights, inputs), deterministically, plus the routing modes.

Weights depend only on (dims, weight seed, expert format, where drawn) and are cached (LRU, by
count and by bytes: on a GPU up to 60% of it, the full-dims experts of both formats): drawing
millions of numbers for every Hypothesis example would make the fuzzer crawl. The routed experts
are cached apart from E: a set of E experts is a view of the first E of one draw
(`_experts_for`), shared by the moe and the layer stage. Inputs, caches and states are drawn fresh for every case from `case.seed`.
Routing modes are applied by `k3diff.routing.apply_routing` to copies of the small router
tensors, never to the cached weights.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from k3diff import caches, verify_dims
from k3diff.case import Case
from k3diff.gpu_share import gpu_share
from k3diff.routing import apply_routing
from k3diff.score_modes import apply_scores
from reference import materialize as ref_mat

_WEIGHT_CACHE: OrderedDict = OrderedDict()
# weight sets kept (the bytes budget below holds the big ones): a production space's ci run moves
# between ~20 (MoE menu points x formats, attention kinds) and would re-draw most of them at 8
_WEIGHT_CACHE_SIZE = 16
# the routed experts' tensors, one draw per expert_key holding the most experts asked for so far:
# an E-expert set is the first E of it (reference.materialize.make_experts), so the E the fuzzer
# moves between (896, 512, 257, 256, ...) cost one draw, not one each
_EXPERT_CACHE: OrderedDict = OrderedDict()
_VIEWS: OrderedDict = OrderedDict()     # (weight key, config) -> views of a cached set
# bytes of weights kept across cases: on a GPU 60% of its memory, which holds the full-dims expert
# draws of both formats at once (59.2 GB bf16 + 15.7 GB MXFP4 at E 896: the fuzzer switches between
# them case by case) beside a case's working memory (a few GB); on the CPU 8 GiB
_CPU_CACHE_BYTES = 8 << 30
_GPU_CACHE_SHARE = 0.6


def _layer(case: Case) -> int | None:
    """The layer whose weights a case draws (only the layer stage has one)."""
    return case.layer_idx if case.stage == "layer" else None


def draw_on(case: Case, device) -> str:
    """How the case's weights are drawn (reference.materialize's draw_on): from version 3 with
    counter draws on the device (the same bits on every device); before, on the device for the
    `full` preset on a GPU (30 G numbers would take many minutes on the CPU; bits of that kind of
    GPU only), else on the CPU. The rule reads only the case and the device type."""
    if case.version >= 3:
        return "counter"
    return "device" if case.preset == "full" and torch.device(device).type == "cuda" else "cpu"


def inputs_draw_on(case: Case, device) -> str:
    """How the case's caches and states are drawn: from version 3 with counter draws on the device
    (on the CPU they were half of a case's seconds in a GPU nightly: ~0.05 s at small dims, 0.1-0.3
    s at full; counter draws are the same bits on every device); version 2 on a GPU with the GPU's
    generator (CUDA's generator spreads a draw over the SMs, so another GPU model draws other
    bits, and the CPU cannot replay it); version 1, or version 2 on the CPU, on the CPU."""
    if case.version >= 3:
        return "counter"
    return "device" if case.version >= 2 and torch.device(device).type == "cuda" else "cpu"


def weight_key(case: Case, device) -> tuple:
    """The weights depend only on their names and shapes (the dims), the weight seed and where they
    are drawn -- not on top-k, scaling or grouping, so those share one cached set."""
    cfg = case.config()
    layer = _layer(case)
    shapes = tuple(sorted((n, tuple(s), str(dt)) for n, (s, dt) in
                          ref_mat.weight_shapes(cfg, case.stage, case.expert_format, layer).items()))
    return (case.stage, shapes, case.weight_seed, draw_on(case, device), str(device))


def _expert_base(name: str) -> str:
    """A layer's `mlp.experts.*` are drawn as the moe stage's `experts.*` (reference.materialize:
    same seed, same bits), so both stages share one cached draw under the moe name."""
    return name[len("mlp."):] if name.startswith("mlp.") else name


def expert_key(case: Case, device) -> tuple:
    """What the routed experts' bits depend on: their (moe-stage) names and shapes per expert --
    not E, and not whether a moe or a layer case asks (a full-dims bf16 set is 59 GB: drawn twice,
    the two would not fit the cache together and evict each other case by case)."""
    cfg = case.config()
    layer = _layer(case)
    names = ref_mat.expert_names(cfg, case.stage, case.expert_format, layer)
    shapes = ref_mat.weight_shapes(cfg, case.stage, case.expert_format, layer)
    return (tuple((_expert_base(n), tuple(shapes[n][0][1:]), str(shapes[n][1])) for n in names),
            case.weight_seed, draw_on(case, device), str(device))


def weight_bytes(case: Case, experts: bool = True) -> int:
    """Bytes of the case's weights (experts=False: without the routed experts' tensors)."""
    cfg = case.config()
    layer = _layer(case)
    skip = () if experts else set(ref_mat.expert_names(cfg, case.stage, case.expert_format, layer))
    total = 0
    for name, (shape, dt) in ref_mat.weight_shapes(cfg, case.stage, case.expert_format, layer).items():
        if name in skip:
            continue
        n = 1
        for s in shape:
            n *= s
        total += n * torch.empty((), dtype=dt).element_size()
    return total


def _cache_budget(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(_GPU_CACHE_SHARE * gpu_share(dev) * torch.cuda.get_device_properties(dev).total_memory)
    return _CPU_CACHE_BYTES


def _cached_bytes() -> int:
    """Bytes held by the caches, each storage once (a weight set's experts are views)."""
    held = {}
    for tensors in list(_WEIGHT_CACHE.values()) + list(_EXPERT_CACHE.values()):
        for t in tensors.values():
            st = t.untyped_storage()
            held[(st.device, st.data_ptr())] = st.nbytes()
    return sum(held.values())


def evict_weights(keep_bytes: int = 0) -> bool:
    """Drop least recently used weight sets (then expert draws) until at most `keep_bytes` are
    held, and the backends' prepared copies of them (k3diff.runner keeps those by weight set), in
    this process and the candidate's (k3diff.isolation); whether anything was dropped."""
    dropped = False
    # keep nothing means every entry, those of no bytes too (a set without routed experts): an
    # entry left behind made the cache's contents depend on which test ran before
    while (_WEIGHT_CACHE or _EXPERT_CACHE) and (keep_bytes <= 0 or _cached_bytes() > keep_bytes):
        (_WEIGHT_CACHE or _EXPERT_CACHE).popitem(last=False)
        dropped = True
    if dropped:
        for vkey in [k for k in _VIEWS if k[0] not in _WEIGHT_CACHE]:
            del _VIEWS[vkey]

        caches.weights_dropped()        # prepared copies and stale buffers go with them (k3diff.caches)
    return dropped


def weights_for(case: Case, device) -> dict:
    """The case's weights: one drawn set per weight_key, handed out per config as fresh views of
    the same storage (backends prepare per (backend, weight tensors); a top-k or scaling change
    must get its own prepared object, e.g. kernels compiled for that k)."""
    cfg = case.config()
    key = weight_key(case, device)
    if key in _WEIGHT_CACHE:
        _WEIGHT_CACHE.move_to_end(key)
    else:
        experts = _experts_for(case, device)
        evict_weights(max(0, _cache_budget(device) - weight_bytes(case, experts=False)))
        weights = ref_mat.make_weights(
            cfg, case.stage, case.weight_seed, expert_format=case.expert_format,
            layer_idx=_layer(case), device=device,
            draw_on=draw_on(case, device), experts=False)
        weights.update(experts)
        shapes = ref_mat.weight_shapes(cfg, case.stage, case.expert_format, _layer(case))
        _WEIGHT_CACHE[key] = {n: weights[n] for n in shapes}
        while len(_WEIGHT_CACHE) > _WEIGHT_CACHE_SIZE:
            _WEIGHT_CACHE.popitem(last=False)
        for old in [k for k in _VIEWS if k[0] not in _WEIGHT_CACHE]:
            del _VIEWS[old]
    vkey = (key, cfg)
    if vkey not in _VIEWS:
        _VIEWS[vkey] = {n: t.view(t.shape) for n, t in _WEIGHT_CACHE[key].items()}
        while len(_VIEWS) > 2 * _WEIGHT_CACHE_SIZE:
            _VIEWS.popitem(last=False)
    _VIEWS.move_to_end(vkey)
    return _VIEWS[vkey]


def cached_bytes_for(case: Case, device) -> int:
    """Bytes of the case's weights the caches already hold (k3diff.sizing need not find room for
    them again)."""
    if weight_key(case, device) in _WEIGHT_CACHE:
        return weight_bytes(case)
    held = _EXPERT_CACHE.get(expert_key(case, device))
    if held and all(t.shape[0] >= case.config().n_experts for t in held.values()):
        return weight_bytes(case) - weight_bytes(case, experts=False)
    return 0


def _experts_for(case: Case, device) -> dict:
    """The case's routed experts: views of the first E experts of the cached draw, which is drawn
    again (with E experts) only when a case asks for more experts than it holds."""
    cfg = case.config()
    E = cfg.n_experts
    key = expert_key(case, device)
    held = _EXPERT_CACHE.get(key)
    if held is None or any(t.shape[0] < E for t in held.values()):
        _EXPERT_CACHE.pop(key, None)
        evict_weights(max(0, _cache_budget(device) - weight_bytes(case)))
        drawn = ref_mat.make_experts(
            cfg, case.stage, case.weight_seed, expert_format=case.expert_format,
            layer_idx=_layer(case), device=device,
            draw_on=draw_on(case, device))
        held = _EXPERT_CACHE[key] = {_expert_base(n): t for n, t in drawn.items()}
    _EXPERT_CACHE.move_to_end(key)
    names = ref_mat.expert_names(cfg, case.stage, case.expert_format, _layer(case))
    return {n: held[_expert_base(n)][:E] for n in names}


def inputs_for(case: Case, device, step: int = 0) -> dict:
    """Fresh inputs for decode step `step` (step > 0 draws no cache or state: each implementation
    carries its own from the step before)."""
    cfg = case.config()
    kind = case.attention_kind
    # a verify step's extra inputs (docs/k3-decode.md §14; none for a decode case: its draws keep
    # their bits); the moe stage takes its T token rows as a batch of T
    verify = verify_dims.is_verify(case)
    extra = {} if not verify else {"widths": list(case.widths), "accepted": list(verify_dims.accepted_at(case, step))}
    if verify and kind is None:
        extra = {}
    batch = verify_dims.tokens(case) if verify and kind is None else case.batch
    if case.cache_format != "bf16":
        extra["cache_format"] = case.cache_format
    return ref_mat.make_inputs(
        cfg, case.stage, case.seed * 1000 + step, batch=batch, **extra,
        cache_lens=list(case.cache_lens) if kind == "mla" else None,
        state_idx=list(case.state_idx) if kind == "kda" else None,
        n_slots=case.n_slots if kind == "kda" else None,
        layer_idx=_layer(case),
        value_dist=case.value_dist,
        cache_capacity=(max(case.cache_lens) + verify_dims.capacity_rows(case)) if kind == "mla" else None,
        device=device, caches=step == 0, draw_on=inputs_draw_on(case, device))


def materialize(case: Case, device="cpu"):
    """(cfg, weights, inputs) for a case; `weights` may be a routing-mode copy of cached ones."""
    case.validate()
    cfg = case.config()
    weights = weights_for(case, device)
    inputs = inputs_for(case, device)
    if case.stage == "moe":
        weights, inputs = apply_routing(case, cfg, weights, inputs)
    if case.scores != "natural":               # softmax-stressing caches (k3diff/score_modes.py)

        apply_scores(case, cfg, weights, inputs)
    if "state_idx" in inputs:
        poison_unused_slots(inputs, case.seed, draw=inputs_draw_on(case, device))
    return cfg, weights, inputs


def poison_unused_slots(inputs: dict, seed: int = 0, draw: str = "cpu") -> None:
    """State slots no row of this step owns (the null slot 0 included) hold finite sentinels drawn
    from the case seed (`reference.materialize.finite_sentinels`: random sign, |v| in [2^100, 2^128)),
    and must stay bitwise as they are.

    Why finite and not NaN: the bug to catch here is a WRITE (a kernel that runs padding rows
    against slot 0, or updates a slot nobody owns). A plain NaN let a kernel that writes a canonical
    NaN back pass the bitwise check, and a NaN pushed through the update (S * decay + ...) keeps its
    payload on CPUs, so even a random-payload NaN could come back bit-identical. A finite value moved
    by any arithmetic, or replaced by any NaN, shows bitwise. A READ stays visible too: a live row
    that reads a wrong slot takes the huge values into its new state (compared under the error rule)
    and its outputs, and null rows must output exactly 0 whatever they read. `draw` (inputs_draw_on):
    "cpu" a CPU generator's, copied to the states' device; "device" a generator's on that device;
    "counter" counter draws on that device."""
    live = inputs["state_idx"][inputs["state_idx"] > 0].to(torch.int64)
    for name in ("conv_state", "recurrent_state"):
        state = inputs[name]
        unused = torch.ones(state.shape[0], dtype=torch.bool, device=state.device)
        unused[live] = False
        n = int(unused.sum())
        if n:
            gen = ref_mat._gen(seed, "unused_slot_sentinel", name,
                               device=state.device if draw != "cpu" else "cpu", counter=draw == "counter")
            fill = ref_mat.finite_sentinels((n,) + tuple(state.shape[1:]), state.dtype, gen)
            state[unused] = fill.to(state.device)
