"""Case -> (config, weights, inputs), deterministically, plus the routing modes.

Weights depend only on (dims, weight seed, expert format, layer) and are cached: drawing millions of
numbers for every Hypothesis example would make the fuzzer crawl. Inputs, caches and states are
drawn fresh for every case from `case.seed`. Routing modes are applied to copies of the small router
tensors, never to the cached weights.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from k3diff.case import Case
from reference import materialize as ref_mat

_WEIGHT_CACHE: OrderedDict = OrderedDict()
_WEIGHT_CACHE_SIZE = 8

# selection-score boost that makes an expert win for every token (sigmoid scores lie in (0, 1))
_HOT_BOOST = 4.0


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
        poison_unused_slots(inputs)
    return cfg, weights, inputs


def poison_unused_slots(inputs: dict) -> None:
    """State slots no row of this step owns (the null slot 0 included) hold NaN, so a kernel that
    reads a padding row's or a neighbour's slot shows it at once; they must stay bitwise as they are."""
    live = inputs["state_idx"][inputs["state_idx"] > 0].to(torch.int64)
    for name in ("conv_state", "recurrent_state"):
        state = inputs[name]
        unused = torch.ones(state.shape[0], dtype=torch.bool, device=state.device)
        unused[live] = False
        state[unused] = float("nan")


def apply_routing(case: Case, cfg, weights: dict, inputs: dict):
    """Shape the router so each routing mode is exercised on every token (K3_SPEC §8, §10)."""
    mode = case.routing
    if mode == "natural":
        return weights, inputs
    g = torch.Generator().manual_seed(case.seed + 7919)
    E, k, T = cfg.n_experts, cfg.top_k, case.batch
    weights = dict(weights)
    dev = weights["router.bias"].device
    bias = weights["router.bias"].detach().cpu().clone()
    if mode == "skewed":
        # a rolled linspace: a pool of experts is favoured, as in vLLM's skewed routing test
        roll = int(torch.randint(E, (1,), generator=g))
        bias += torch.roll(torch.linspace(-0.5, 0.5, E, dtype=torch.float32), roll)
    elif mode == "hot":
        hot = torch.randperm(E, generator=g)[:k]
        bias[hot] += _HOT_BOOST
    elif mode in ("forced", "dropped"):
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
        # the edge ids 0 and E-1 always appear (overwriting a slot keeps rows distinct because
        # the id was absent from that row)
        if not bool((ids[0] == 0).any()):
            ids[0, 0] = 0
        if not bool((ids[-1] == E - 1).any()):
            ids[-1, -1] = E - 1
        if mode == "dropped":
            drop = torch.rand((T, k), generator=g) < 0.25
            drop[0, 1 % k] = True                              # at least one dropped route
            ids = torch.where(drop, torch.full_like(ids, -1), ids)
        inputs = dict(inputs, forced_ids=ids.to(inputs["x"].device))
    elif mode in ("ties", "near_tie"):
        # k-1 experts win for every token and a pair (a < b) with equal scores competes for the
        # last place: an exact tie (identical router rows) must go to the lower id a; a near-tie
        # (rows differing in one ulp-sized place) may flip and is replayed with forced ids
        perm = torch.randperm(E, generator=g)
        if k < E:
            winners, (a, b) = perm[: k - 1], sorted(perm[k - 1: k + 1].tolist())
        else:   # every expert is chosen: no boundary to tie at, so the pair ties inside the set
            winners, (a, b) = perm[2:], sorted(perm[:2].tolist())
        bias[winners] += _HOT_BOOST
        bias[[a, b]] += _HOT_BOOST / 2
        bias[b] = bias[a]
        router = weights["router.weight"].clone()
        router[b] = router[a]
        if mode == "near_tie":
            bias[b] = torch.nextafter(bias[a], torch.tensor(float("inf")))  # one f32 ulp above
        weights["router.weight"] = router
    weights["router.bias"] = bias.to(dev)
    return weights, inputs

