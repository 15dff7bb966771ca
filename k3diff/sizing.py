"""Refuse a case that cannot fit before drawing a single tensor, with one line saying why.

The memory plan of one case (what `estimate_bytes` adds up):
  - the weights, once, in their stored dtypes (cached across cases; for a moe/layer case the
    routed experts dominate: E x 3 I r x 2 bytes in bf16, x 0.53 in MXFP4);
  - the backend's packed copies of the non-expert weights and the controls' copies of the small
    weights (k3diff.weight_guard keeps a copy of tensors < 256 MB and a fingerprint of larger ones,
    so the experts are never duplicated);
  - the float64 reference's transients: it converts one weight at a time (the largest non-expert
    matrix, or one routed expert's W13 and W2 -- only the experts the case routes to, one by one),
    plus float64 activations;
  - the drawing transients when the weights are drawn on the device (one expert in float32);
  - the working copies of inputs, states and outputs of the reference, the baseline and the
    candidate (its two runs), in float64 at worst.

A full-dims moe case (d 7168, r 3584, I 3072, E 896) at batch 256: weights 59.2 GB with bf16
experts (15.7 GB MXFP4) + ~0.5 GB non-expert bf16 weights held twice + ~0.7 GB float64 transients +
~0.2 GB activations: about 61 GB (bf16) or 18 GB (MXFP4), comfortably inside one H200 (139 GiB);
the weight cache keeps at most 60% of the GPU (k3diff.materialize): the full-dims expert draws of
both formats (one draw per format serves every E, as views of its first E experts).
"""
from __future__ import annotations

import torch

from k3diff import verify_dims
from k3diff.case import Case
from k3diff.gpu_share import OUTSIDE_ALLOCATOR, gpu_share
from k3diff.usage import CaseTooLarge  # noqa: F401 - raised here, named by its callers from here
from reference import counter_draw

# the reference works in float64 and three backends hold their own copies of inputs and states
_WORKING_COPIES = 6
_MXFP4_BYTES = 0.5 + 1 / 32        # a packed nibble plus one E8M0 scale per 32 weights


# what one megakernel worker was seen to hold at full dims, more than the estimate above: on the
# H200 (65bbe65, two workers sharing it, 67 GiB each) a worker holding 57.9 GiB drew the bf16 experts'
# W2 (18.4 GiB) and ran out of its share, in moe and layer cases alike
_WORKER_PEAK = int(76.3 * 2**30)


def workers_too_many(workers: int, gpus: int, total: int) -> str | None:
    """Why `workers` xdist workers over `gpus` GPUs of `total` bytes each cannot judge every case a
    GPU run draws (its full-dims moe at batch 256, bf16), or None."""
    per = -(-workers // max(1, gpus))
    if per <= 1:
        return None
    have = (1.0 / per - OUTSIDE_ALLOCATOR / total) * total
    need = max(estimate_bytes(Case("moe", "full", batch=256, expert_format="bf16"), "cuda"), _WORKER_PEAK)
    if have >= need:
        return None
    fit = max(1, int(total // (need + OUTSIDE_ALLOCATOR)))
    return (f"-n {workers} puts {per} workers on each of {gpus} GPU(s): each gets {have / 2**30:.0f} GiB, "
            f"but a worker at full dims needs about {need / 2**30:.0f} GiB; use at most -n {fit * gpus} "
            f"(-n auto: one per GPU)")


def _moe_bytes(cfg, fmt: str, T: int, draw_on_device: bool) -> int:
    d, E, I, r, Is = cfg.hidden, cfg.n_experts, cfg.moe_intermediate, cfg.latent_dim, cfg.shared_intermediate
    per_expert = 3 * I * r
    experts = E * per_expert * (2 if fmt == "bf16" else _MXFP4_BYTES)
    dense = 2 * (E * d + 2 * r * d + 3 * Is * d) + 4 * E + 2 * r
    total = experts + 2 * dense                                   # + packed / guard copies
    # float64 transients: the largest single matrix converted at once (x2: operand and product)
    total += 8 * max(2 * per_expert, 2 * Is * d, (E + r) * d)
    if draw_on_device:
        total += 4 * 2 * I * r * 2 + counter_draw.PEAK_BYTES       # one expert's float32 draw + quantise
    total += _WORKING_COPIES * T * 8 * (2 * Is + E + r + cfg.top_k * r)   # activations, f64
    return int(total)


def estimate_bytes(case: Case, device=None) -> int:
    cfg = case.config()
    d, T = cfg.hidden, verify_dims.tokens(case)        # token rows: Σ W_b in a verify step
    total = 0
    # weights drawn on the device (k3diff.materialize.draw_on): its temporaries are the device's
    dev_draw = (device is not None and torch.device(device).type == "cuda"
                and (case.preset == "full" or case.version >= 3))
    if case.stage in ("moe", "layer"):
        if case.stage == "moe" or cfg.is_moe_layer(case.layer_idx):
            total += _moe_bytes(cfg, case.expert_format, T, dev_draw)
        else:
            total += 2 * 3 * d * cfg.dense_intermediate * 2 + 8 * 2 * cfg.dense_intermediate * d
    kind = case.attention_kind
    if kind == "mla":
        H = cfg.mla_heads
        total += 2 * d * (cfg.q_lora_rank + cfg.mla_cache_dim + 2 * H * cfg.v_head_dim)
        total += 2 * cfg.q_lora_rank * H * cfg.qk_head_dim + 2 * cfg.kv_lora_rank * H * 2 * cfg.v_head_dim
        cap = max(case.cache_lens) + verify_dims.capacity_rows(case)
        total += _WORKING_COPIES * T * cap * cfg.mla_cache_dim * 8
    if kind == "kda":
        P, D, H = cfg.kda_proj, cfg.kda_head_dim, cfg.kda_heads
        total += 2 * d * (5 * P + D + H) + 4 * 3 * P * cfg.conv_width
        total += _WORKING_COPIES * case.n_slots * (3 * P * (cfg.conv_width - 1) * 2 + H * D * D * 8)
        if case.widths:                                  # a verify step's per-token states
            total += _WORKING_COPIES * T * (3 * P * (cfg.conv_width - 1) * 2 + H * D * D * 8)
    if case.stage == "layer":
        total += _WORKING_COPIES * T * (cfg.n_blocks + 4) * d * 8
    total += _WORKING_COPIES * T * 8 * (d + cfg.latent_dim + cfg.n_experts + 3 * cfg.kda_proj)
    return int(total)


def available_bytes(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        share = gpu_share(dev)
        if share < 1.0:                 # the rest of the GPU belongs to the other workers on it
            free = min(free, share * total - torch.cuda.memory_reserved(dev))
        return int(max(0, free))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


_RESERVES: dict = {}        # name -> give_back(): memory a process keeps for no weight (k3diff.isolation)


def register_reserve(name: str, give_back) -> None:
    """`give_back()` returns memory held for no weight set (an allocator's cached transients, in
    another process too) when a case does not fit, before any weight is dropped (idempotent: by name)."""
    _RESERVES[name] = give_back


def check_fits(case: Case, device) -> None:
    """CaseTooLarge (one line) if the case cannot fit; what both processes hold for earlier cases is
    given back first when that makes room.

    Free memory (`available_bytes`) is the device's: it excludes what the candidate's own process
    holds (k3diff.isolation: its prepared copies, its allocator's cached transients, and the shared
    expert weights it still maps, which stay allocated in THIS process until it lets go). So giving
    back is both sides', in two steps, each followed by a second look: first what no weight needs
    (both allocators' caches of the last cases' transients: the weights stay, a full-dims set is
    not drawn again for the room a batch's buffers took), then the weights: dropped here,
    `caches.weights_dropped()` tells the candidate's process to drop its copies and empty its cache,
    and frees what only it held. (Dropping this process's caches alone leaves a full-dims case "too
    large" with most of an H100 held for weights this process already evicted.)"""
    from k3diff import caches, materialize

    # weights the caches already hold take no new room (counted in `need`, absent from `have`)
    need = estimate_bytes(case, device) - materialize.cached_bytes_for(case, device)
    have = available_bytes(device)
    if need > have:
        for give_back in list(_RESERVES.values()):
            give_back()
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        have = available_bytes(device)
    if need > have:
        if not materialize.evict_weights(0):    # nothing held here: the caches built on weights,
            caches.weights_dropped()            # the candidate's process and the last case's transients
        need, have = estimate_bytes(case, device), available_bytes(device)
    if need > have:
        raise CaseTooLarge(f"case too large for {device}: needs about {need / 2**30:.1f} GiB, "
                           f"{have / 2**30:.1f} GiB free ({case.label()})")


# A case's estimate covers everything it holds (weights, the float64 reference, every role's
# working copies); a correct candidate needs a part of it. Out of memory with this many times the
# whole estimate free, the candidate asked for memory no correct kernel needs: its failure.
FAR_BELOW = 8


def own_out_of_memory(case: Case, device) -> str | None:
    """Why an out-of-memory error the candidate raised on `case` is its own (one line), or None
    where the case is large enough for this machine's memory to be the limit."""
    need, have = estimate_bytes(case, device), available_bytes(device)
    if need * FAR_BELOW > have:
        return None
    return (f"out of memory on a case of about {_size(need)} with {_size(have)} free on {device} "
            f"(at least {FAR_BELOW}x the case's whole estimate): the candidate's own allocation")


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
