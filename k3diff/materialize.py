"""Case -> (config, weights, inputs), deterministically, plus the routing modes.

Weights depend only on (dims, weight seed, expert format, layer) and are cached: drawing millions of
numbers for every Hypothesis example would make the fuzzer crawl. Inputs, caches and states are
drawn fresh for every case from `case.seed`. Routing modes are applied by `k3diff.routing.apply_routing`
to copies of the small router tensors, never to the cached weights.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from k3diff.case import Case
from k3diff.routing import apply_routing
from reference import materialize as ref_mat

_WEIGHT_CACHE: OrderedDict = OrderedDict()
_WEIGHT_CACHE_SIZE = 8


def weights_for(case: Case, device) -> dict:
    cfg = case.config()
    key = (cfg, case.stage, case.weight_seed, case.expert_format,
           case.layer_idx if case.stage == "layer" else None, str(device))
    if key in _WEIGHT_CACHE:
        _WEIGHT_CACHE.move_to_end(key)
        return _WEIGHT_CACHE[key]
    w = ref_mat.make_weights(cfg, case.stage, case.weight_seed, expert_format=case.expert_format,
                             layer_idx=case.layer_idx if case.stage == "layer" else None, device=device)
    _WEIGHT_CACHE[key] = w
    while len(_WEIGHT_CACHE) > _WEIGHT_CACHE_SIZE:
        _WEIGHT_CACHE.popitem(last=False)
    return w


def inputs_for(case: Case, device, step: int = 0) -> dict:
    """Fresh inputs for decode step `step` (step > 0 redraws only x, keeping shapes)."""
    cfg = case.config()
    kind = case.attention_kind
    return ref_mat.make_inputs(
        cfg, case.stage, case.seed * 1000 + step, batch=case.batch,
        cache_lens=list(case.cache_lens) if kind == "mla" else None,
        state_idx=list(case.state_idx) if kind == "kda" else None,
        n_slots=case.n_slots if kind == "kda" else None,
        layer_idx=case.layer_idx if case.stage == "layer" else None,
        value_dist=case.value_dist,
        cache_capacity=(max(case.cache_lens) + case.steps) if kind == "mla" else None,
        device=device)


def materialize(case: Case, device="cpu"):
    """(cfg, weights, inputs) for a case; `weights` may be a routing-mode copy of cached ones."""
    case.validate()
    cfg = case.config()
    weights = weights_for(case, device)
    inputs = inputs_for(case, device)
    if case.stage == "moe":
        weights, inputs = apply_routing(case, cfg, weights, inputs)
    if "state_idx" in inputs:
        poison_unused_slots(inputs, case.seed)
    return cfg, weights, inputs


def poison_unused_slots(inputs: dict, seed: int = 0) -> None:
    """State slots no row of this step owns (the null slot 0 included) hold finite sentinels drawn
    from the case seed (`reference.materialize.finite_sentinels`: random sign, |v| in [2^100, 2^128)),
    and must stay bitwise as they are.

    Why finite and not NaN: the bug to catch here is a WRITE (a kernel that runs padding rows
    against slot 0, or updates a slot nobody owns). A plain NaN let a kernel that writes a canonical
    NaN back pass the bitwise check, and a NaN pushed through the update (S * decay + ...) keeps its
    payload on CPUs, so even a random-payload NaN could come back bit-identical. A finite value moved
    by any arithmetic, or replaced by any NaN, shows bitwise. A READ stays visible too: a live row
    that reads a wrong slot takes the huge values into its new state (compared under the error rule)
    and its outputs, and null rows must output exactly 0 whatever they read."""
    live = inputs["state_idx"][inputs["state_idx"] > 0].to(torch.int64)
    for name in ("conv_state", "recurrent_state"):
        state = inputs[name]
        unused = torch.ones(state.shape[0], dtype=torch.bool, device=state.device)
        unused[live] = False
        n = int(unused.sum())
        if n:
            gen = torch.Generator().manual_seed(ref_mat._seed(seed, "unused_slot_sentinel", name))
            fill = ref_mat.finite_sentinels((n,) + tuple(state.shape[1:]), state.dtype, gen)
            state[unused] = fill.to(state.device)
