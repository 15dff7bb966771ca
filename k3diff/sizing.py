"""Refuse a case that cannot fit before drawing a single tensor, with one line saying why."""
from __future__ import annotations

import torch

from k3diff.case import Case

# the reference works in float64 and three backends hold their own copies of inputs and states
_WORKING_COPIES = 6


class CaseTooLarge(RuntimeError):
    pass


def estimate_bytes(case: Case) -> int:
    cfg = case.config()
    d, T = cfg.hidden, case.batch
    total = 0
    if case.stage in ("moe", "layer"):
        per_expert = 3 * cfg.moe_intermediate * cfg.latent_dim
        expert_bytes = per_expert * (2 if case.expert_format == "bf16" else 0.53)
        total += cfg.n_experts * expert_bytes
        total += 2 * (cfg.n_experts * d + 2 * cfg.latent_dim * d + 3 * cfg.shared_intermediate * d)
    kind = case.attention_kind
    if kind == "mla":
        H = cfg.mla_heads
        total += 2 * d * (cfg.q_lora_rank + cfg.mla_cache_dim + 2 * H * cfg.v_head_dim)
        total += 2 * cfg.q_lora_rank * H * cfg.qk_head_dim + 2 * cfg.kv_lora_rank * H * 2 * cfg.v_head_dim
        cap = max(case.cache_lens) + case.steps
        total += _WORKING_COPIES * T * cap * cfg.mla_cache_dim * 8
    if kind == "kda":
        P, D, H = cfg.kda_proj, cfg.kda_head_dim, cfg.kda_heads
        total += 2 * d * (5 * P + D + H) + 4 * 3 * P * cfg.conv_width
        total += _WORKING_COPIES * case.n_slots * (3 * P * (cfg.conv_width - 1) * 2 + H * D * D * 8)
    if case.stage == "layer":
        total += _WORKING_COPIES * T * (cfg.n_blocks + 4) * d * 8
    total += _WORKING_COPIES * T * 8 * (d + cfg.latent_dim + cfg.n_experts + 3 * cfg.kda_proj)
    return int(total)


def available_bytes(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def check_fits(case: Case, device) -> None:
    need, have = estimate_bytes(case), available_bytes(device)
    if need > have:
        raise CaseTooLarge(f"case too large for {device}: needs about {need / 2**30:.1f} GiB, "
                           f"{have / 2**30:.1f} GiB free ({case.label()})")
